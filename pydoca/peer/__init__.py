"""pydoca.peer: requester/responder over DOCA RDMA.

A :class:`Responder` serves endpoints (path, kind ``write``/``read``/``call``,
buffer size, handler) to many requesters from one progress loop. A
:class:`Requester` connects by RDMA CM (``Requester.connect("host:port")``)
or through a descriptor file (``Requester.from_descriptor(path)``), gets the
endpoint list and memory descriptors once in the responder's hello, then
moves data with RDMA write/read; control messages are framed sends on the
same connection (see :mod:`pydoca.peer.protocol`). Errors come back typed:
:class:`NotFound`, :class:`Busy`, :class:`Rejected`, :class:`TooLarge`,
:class:`HandlerError`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (Busy, Disconnected, Dismissed, HandlerError, NotFound, PeerError, PeerTimeout, ProtocolError,
                     Rejected, StaleDescriptor, TooLarge, Unavailable)
from .files import ResponderFile, read_responder_file
from .spec import EndpointSpec, Kind, ServiceSpec, SpecError, load_spec, parse_spec

if TYPE_CHECKING:
    from .requester import EndpointInfo as EndpointInfo, Requester as Requester
    from .responder import Endpoint as Endpoint, RequesterInfo as RequesterInfo, Responder as Responder

# Imported on first use: they load the DOCA backend, which the spec, codegen and errors never need
# (`pydoca codegen`, `pydoca --help` run without one).
_LAZY = {"EndpointInfo": ".requester", "Requester": ".requester", "Endpoint": ".responder",
         "RequesterInfo": ".responder", "Responder": ".responder"}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'pydoca.peer' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value

__all__ = ["Busy", "Disconnected", "Dismissed", "Endpoint", "EndpointInfo", "EndpointSpec", "HandlerError", "Kind",
           "NotFound", "PeerError", "PeerTimeout", "ProtocolError", "Rejected", "Requester", "RequesterInfo",
           "Responder", "ResponderFile", "ServiceSpec", "SpecError", "StaleDescriptor", "TooLarge", "Unavailable",
           "load_spec", "parse_spec", "read_responder_file"]
