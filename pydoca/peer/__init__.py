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

from .errors import (Busy, Disconnected, HandlerError, NotFound, PeerError, PeerTimeout, ProtocolError, Rejected,
                     StaleDescriptor, TooLarge, Unavailable)
from .files import ResponderFile, read_responder_file
from .requester import EndpointInfo, Requester
from .responder import Endpoint, RequesterInfo, Responder
from .spec import EndpointSpec, Kind, ServiceSpec, SpecError, load_spec, parse_spec

__all__ = ["Busy", "Disconnected", "Endpoint", "EndpointInfo", "EndpointSpec", "HandlerError", "Kind", "NotFound",
           "PeerError", "PeerTimeout", "ProtocolError", "Rejected", "Requester", "RequesterInfo", "Responder",
           "ResponderFile", "ServiceSpec", "SpecError", "StaleDescriptor", "TooLarge", "Unavailable", "load_spec",
           "parse_spec", "read_responder_file"]
