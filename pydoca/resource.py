"""RAII base for every DOCA object: deterministic, ordered, idempotent close.

Children hold their parent strongly; a parent tracks its children weakly and
closes them first, newest first, so DOCA objects are always destroyed in
dependency order. An object collected without ``close()`` is destroyed by its
finalizer and reported with a ``ResourceWarning``.
"""
from __future__ import annotations

import itertools
import warnings
import weakref
from typing import Any, Callable, Optional, TypeVar

from pydoca._log import get_logger

log = get_logger()

_seq = itertools.count()
R = TypeVar("R", bound="Resource")


def _finalize(name: str, destroy: Callable[[], Any], parent: Optional["Resource"]) -> None:
    """Run by weakref.finalize: only knows how to destroy, never the object.
    Destroys first, then warns (the warning may be turned into an error)."""
    try:
        destroy()
    except Exception as exc:  # noqa: BLE001 - nothing can be raised from a finalizer
        log.error("finalizer destroy failed", resource=name, error=str(exc))
    del parent
    warnings.warn(f"pydoca: unclosed {name} destroyed by the garbage collector; "
                  "use close() or a with-block", ResourceWarning, stacklevel=2)


class Resource:
    """A DOCA object with an owner chain. Subclasses implement ``_destroy``."""

    _closed: bool = True
    _close_rank: int = 1          # lower closes earlier among siblings (contexts: 0)

    def __init__(self, parent: Optional["Resource"] = None) -> None:
        self._parent = parent
        self._children: "weakref.WeakValueDictionary[int, Resource]" = weakref.WeakValueDictionary()
        self._seq = next(_seq)
        self._closed = False
        self._finalizer: Optional[weakref.finalize] = None  # type: ignore[type-arg]
        if parent is not None:
            parent._check_open()
            parent._children[self._seq] = self

    # -- lifecycle ---------------------------------------------------------
    def _arm(self, destroy: Callable[[], Any]) -> None:
        """Register the finalizer once the C handle exists. ``destroy`` must not
        reference ``self`` (close over the handle and functions only)."""
        self._finalizer = weakref.finalize(self, _finalize, type(self).__name__, destroy, self._parent)

    def _shutdown(self) -> None:
        """Hook run by ``close()`` before the destroy function (stop, drain)."""

    def close(self) -> None:
        """Close children (newest first), then this object. Idempotent."""
        if self._closed:
            return
        # contexts first (they fail and deliver in-flight tasks), then newest first
        children = [c for c in (self._children.get(k) for k in list(self._children.keys())) if c is not None]
        for child in sorted(children, key=lambda c: (c._close_rank, -c._seq)):
            child.close()
        try:
            self._shutdown()
        finally:
            self._closed = True
            fin, self._finalizer = self._finalizer, None
            if self._parent is not None:
                self._parent._children.pop(self._seq, None)
            if fin is not None:
                detached = fin.detach()
                if detached is not None:
                    _obj, _fn, args, _kw = detached
                    args[1]()  # the destroy function

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            from .errors import ClosedError
            raise ClosedError(f"{type(self).__name__} is closed")

    def __enter__(self: R) -> R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {state}>"
