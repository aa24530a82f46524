"""Typed client generation from a spec: one method per endpoint.

``generate(spec)`` returns the source of a module with a ``<Name>Client``
class. On connect the client checks the responder against the contract it
was generated from (every endpoint present, same kind, buffer at least as
large) and raises :class:`ContractError` otherwise. Per endpoint:

* write ``/a/b`` -> ``a_b(data, offset=0)`` and ``a_b_async``;
* read -> ``a_b(length=None, offset=0) -> bytes``, ``a_b_into(into) -> int``, async twins;
* call -> ``a_b(payload) -> bytes`` and ``a_b_async``.
"""
from __future__ import annotations

import keyword
import re
from typing import TYPE_CHECKING, Dict, Iterable, List, Sequence, Set, Tuple

from .errors import PeerError
from .spec import EndpointSpec, Kind, ServiceSpec

if TYPE_CHECKING:       # the generator itself never loads a DOCA backend (pydoca codegen)
    from .requester import Requester

Contract = Sequence[Tuple[str, str, int]]
_RESERVED = {"close", "requester", "endpoints", "contract"}


class ContractError(PeerError):
    """The responder does not offer what the generated client was built for."""


def check_contract(requester: Requester, contract: Contract) -> None:
    """Raise ContractError unless every contracted endpoint is offered as specified."""
    offered = {e.path: e for e in requester.endpoints()}
    problems: List[str] = []
    for path, kind, size in contract:
        got = offered.get(path)
        if got is None:
            problems.append(f"{path} missing")
        elif got.kind != kind:
            problems.append(f"{path} is {got.kind}, expected {kind}")
        elif got.size < size:
            problems.append(f"{path} buffer is {got.size} bytes, expected at least {size}")
    if problems:
        raise ContractError(f"responder at {requester.address} does not match the client contract: "
                            + "; ".join(problems))


def method_names(endpoints: Iterable[EndpointSpec]) -> Dict[str, str]:
    """path -> a unique Python identifier for its method."""
    names: Dict[str, str] = {}
    used: Set[str] = set()
    for ep in endpoints:
        base = re.sub(r"[^0-9A-Za-z_]", "_", ep.path.strip("/")).strip("_") or "root"
        base = re.sub(r"_+", "_", base)
        if base[0].isdigit():
            base = f"ep_{base}"
        if keyword.iskeyword(base) or base in _RESERVED or base.startswith("_"):
            base = f"{base}_"
        name, n = base, 2
        while name in used or f"{name}_async" in used or f"{name}_into" in used:
            name, n = f"{base}_{n}", n + 1
        used.update({name, f"{name}_async", f"{name}_into", f"{name}_into_async"})
        names[ep.path] = name
    return names


def _doc(ep: EndpointSpec) -> str:
    text = f"{ep.kind.value} {ep.path} ({ep.size}-byte buffer)"
    if ep.description:
        text += ": " + " ".join(ep.description.split())
    return text.replace("\\", "\\\\").replace('"""', "'''")


def _methods(ep: EndpointSpec, name: str) -> List[str]:
    p, doc = repr(ep.path), _doc(ep)
    t = "timeout: Optional[float] = None"
    if ep.kind is Kind.WRITE:
        return [
            f"    def {name}(self, data: Any, offset: int = 0, *, wait: bool = True, {t}) -> None:",
            f'        """{doc}"""',
            f"        self.requester.write({p}, data, offset, wait=wait, timeout=timeout)",
            "",
            f"    async def {name}_async(self, data: Any, offset: int = 0, *, wait: bool = True, {t}) -> None:",
            f'        """{doc} (async)"""',
            f"        await self.requester.awrite({p}, data, offset, wait=wait, timeout=timeout)",
            ""]
    if ep.kind is Kind.READ:
        sig = f"length: Optional[int] = None, *, offset: int = 0, wait: bool = True, {t}"
        into = f"into: Any, *, offset: int = 0, wait: bool = True, {t}"
        return [
            f"    def {name}(self, {sig}) -> bytes:",
            f'        """{doc}"""',
            f"        return self.requester.read({p}, length, offset=offset, wait=wait, timeout=timeout)",
            "",
            f"    def {name}_into(self, {into}) -> int:",
            f'        """{doc}; fills ``into`` zero-copy, returns the byte count"""',
            f"        n: int = self.requester.read({p}, None, into, offset=offset, wait=wait, timeout=timeout)",
            "        return n",
            "",
            f"    async def {name}_async(self, {sig}) -> bytes:",
            f'        """{doc} (async)"""',
            f"        data: bytes = await self.requester.aread({p}, length, offset=offset, wait=wait, "
            "timeout=timeout)",
            "        return data",
            "",
            f"    async def {name}_into_async(self, {into}) -> int:",
            f'        """{doc} (async, zero-copy into ``into``)"""',
            f"        n: int = await self.requester.aread({p}, None, into, offset=offset, wait=wait, "
            "timeout=timeout)",
            "        return n",
            ""]
    return [
        f"    def {name}(self, payload: Any = b\"\", *, wait: bool = True, {t}) -> bytes:",
        f'        """{doc}"""',
        f"        return self.requester.call({p}, payload, wait=wait, timeout=timeout)",
        "",
        f"    async def {name}_async(self, payload: Any = b\"\", *, wait: bool = True, {t}) -> bytes:",
        f'        """{doc} (async)"""',
        f"        return await self.requester.acall({p}, payload, wait=wait, timeout=timeout)",
        ""]


def generate(spec: ServiceSpec, *, source: str = "") -> str:
    """Python source of the typed client module for ``spec``."""
    cls = f"{spec.name[:1].upper()}{spec.name[1:]}Client"
    names = method_names(spec.endpoints)
    contract = ",\n".join(f"    ({e.path!r}, {e.kind.value!r}, {e.size})" for e in spec.endpoints)
    lines = [
        f'"""Typed pydoca.peer client for service {spec.name!r}.',
        "",
        f"Generated by `pydoca codegen`{' from ' + source if source else ''}; do not edit.",
        '"""',
        "from __future__ import annotations",
        "",
        "from typing import Any, Optional, Tuple",
        "",
        "from pydoca.peer import Requester",
        "from pydoca.peer.codegen import check_contract",
        "",
        f"SERVICE = {spec.name!r}",
        f"CONTRACT: Tuple[Tuple[str, str, int], ...] = (\n{contract},\n)",
        "",
        "",
        f"class {cls}:",
        f'    """Client of {spec.name!r}: connect with ``{cls}("host:port")`` or a descriptor file path."""',
        "",
        "    def __init__(self, target: str, *, timeout: float = 10.0, **options: Any) -> None:",
        "        self.requester = Requester.open(target, timeout=timeout, **options)",
        "        try:",
        "            check_contract(self.requester, CONTRACT)",
        "        except BaseException:",
        "            self.requester.close()",
        "            raise",
        "",
        "    def close(self) -> None:",
        "        self.requester.close()",
        "",
        f"    def __enter__(self) -> \"{cls}\":",
        "        return self",
        "",
        "    def __exit__(self, *exc: object) -> None:",
        "        self.close()",
        "",
    ]
    for ep in spec.endpoints:
        lines += _methods(ep, names[ep.path])
    lines += ["", f"__all__ = [\"{cls}\", \"CONTRACT\", \"SERVICE\"]", ""]
    return "\n".join(lines)


__all__ = ["ContractError", "check_contract", "generate", "method_names"]
