"""RAII base for every DOCA object: deterministic, ordered, idempotent close.

Children hold their parent strongly; a parent tracks its children weakly and
closes them first, newest first, so DOCA objects are always destroyed in
dependency order.

Objects collected without ``close()`` follow the same rule. Each Resource has
a small :class:`_Node` that knows only how to destroy its C object and which
nodes it depends on (its parent and extra owners: a Buffer's MemoryMap, an
Rdma context's Device). The node outlives the Python object: when the object
is collected, its node destroys the C object at once if no child node is still
alive, and otherwise waits; the last child node to go destroys the waiting
parents after itself. So the garbage collector's order does not matter, and a
parent is never destroyed while DOCA still counts it in use. A destroy that
fails with ``DOCA_ERROR_IN_USE`` (DOCA knows of a user we do not) is retried
whenever one of the node's children goes, and at exit.

At interpreter exit, one ``atexit`` handler destroys whatever is still alive in
dependency order: contexts first (stopped, their in-flight tasks flushed and
delivered within a bound), then every other object children first. Nothing is
printed. An object collected unclosed is reported with a ``ResourceWarning``
(Buffers excepted: handing temporary buffers to tasks is the common case).
"""
from __future__ import annotations

import atexit
import itertools
import threading
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, TypeVar

from pydoca._log import get_logger

log = get_logger()

_seq = itertools.count()
R = TypeVar("R", bound="Resource")

_LIVE, _COLLECTED, _DONE = "live", "collected", "done"
_lock = threading.RLock()
_nodes: Dict[int, "_Node"] = {}     # every node not yet destroyed (strong: they outlive objects)
_exiting = False


def _in_use(exc: BaseException) -> bool:
    # DOCA refuses an mmap destroy with buffers outstanding with NOT_PERMITTED
    from .errors import InUseError, NotPermittedError
    return isinstance(exc, (InUseError, NotPermittedError))


class _Node:
    """What survives a Resource: its destroy function and its dependencies.

    ``parents`` are the nodes this one must be destroyed before; ``children``
    the live nodes that must be destroyed before this one. Never references
    the Resource itself (only weakly, to mark it closed at exit)."""

    __slots__ = ("name", "seq", "destroy", "parents", "children", "state", "quiet", "context", "ref",
                 "failed", "__weakref__")

    def __init__(self, name: str, seq: int, obj: "Resource") -> None:
        self.name = name
        self.seq = seq
        self.destroy: Optional[Callable[[], Any]] = None
        self.parents: List[_Node] = []
        self.children: Set[_Node] = set()
        self.state = _LIVE
        self.quiet = False          # no ResourceWarning when collected (Buffers)
        self.context = False        # destroyed first at exit (contexts flush tasks)
        self.ref = weakref.ref(obj)
        self.failed: Optional[str] = None

    def depend_on(self, parent: "_Node") -> None:
        with _lock:
            if parent.state == _DONE or parent in self.parents:
                return
            self.parents.append(parent)
            parent.children.add(self)

    def run(self, *, raise_errors: bool) -> bool:
        """Destroy now (children must be gone). True when done; False when
        DOCA still reports the object in use (kept for a retry)."""
        with _lock:
            if self.state == _DONE:
                return True
            destroy, self.destroy = self.destroy, None
        try:
            if destroy is not None:
                destroy()
        except Exception as exc:  # noqa: BLE001 - decided below
            if _in_use(exc) and not _exiting:
                with _lock:
                    self.destroy = destroy        # retried when a child goes, or at exit
                    self.state = _COLLECTED       # i.e. waiting: nobody else will close it
                    self.failed = str(exc)
                if raise_errors:
                    raise
                log.debug("destroy deferred: still in use", resource=self.name, error=str(exc))
                return False
            self._finish()
            if raise_errors:
                raise
            log.error("destroy failed", resource=self.name, error=str(exc))
            return True
        self._finish()
        return True

    def _finish(self) -> None:
        with _lock:
            self.state = _DONE
            _nodes.pop(self.seq, None)
            parents, self.parents = self.parents, []
            for p in parents:
                p.children.discard(self)
        for p in parents:                      # a parent waiting for its last child goes now
            if p.state == _COLLECTED and not p.children:
                p.run(raise_errors=False)

    def collected(self) -> None:
        """The object was garbage collected: destroy now or after the children."""
        with _lock:
            if self.state != _LIVE:
                return
            self.state = _COLLECTED
            ready = not self.children
        if ready:
            self.run(raise_errors=False)
        if not self.quiet:
            warnings.warn(f"pydoca: unclosed {self.name} destroyed by the garbage collector; "
                          "use close() or a with-block", ResourceWarning, stacklevel=2)


def _collected(node: _Node) -> None:
    """weakref.finalize callback: knows only the node, never the object."""
    node.collected()


def _at_exit() -> None:
    """Destroy what is still alive, in dependency order; print nothing."""
    global _exiting
    with _lock:
        nodes = sorted(_nodes.values(), key=lambda n: -n.seq)
    # objects still referenced: mark them closed so a later close() is a no-op
    for n in nodes:
        obj = n.ref()
        if obj is not None:
            obj._closed = True
            fin, obj._finalizer = obj._finalizer, None
            if fin is not None:
                fin.detach()
    # contexts first: stopping them fails and delivers their in-flight tasks
    for n in nodes:
        if n.context and not n.children:
            _quiet_run(n)
    _exiting = True
    for _round in range(len(nodes) + 1):
        with _lock:
            ready = sorted((n for n in _nodes.values() if not n.children), key=lambda n: -n.seq)
        if not ready:
            break
        for n in ready:
            _quiet_run(n)


def _quiet_run(node: _Node) -> None:
    try:
        node.run(raise_errors=True)
    except Exception as exc:  # noqa: BLE001 - at exit: record, never print
        log.debug("destroy at exit failed", resource=node.name, error=str(exc))


atexit.register(_at_exit)


class Resource:
    """A DOCA object with an owner chain. Subclasses implement ``_destroy``."""

    _closed: bool = True
    _close_rank: int = 1          # lower closes earlier among siblings (contexts: 0)
    _quiet_collect: bool = False  # collected without close(): no ResourceWarning

    def __init__(self, parent: Optional["Resource"] = None) -> None:
        self._parent = parent
        self._children: "weakref.WeakValueDictionary[int, Resource]" = weakref.WeakValueDictionary()
        self._seq = next(_seq)
        self._closed = False
        if parent is not None:
            parent._check_open()
        node = self._node = _Node(type(self).__name__, self._seq, self)
        node.quiet = self._quiet_collect
        if parent is not None:
            parent._children[self._seq] = self
            node.depend_on(parent._node)
        with _lock:
            _nodes[node.seq] = node
        self._finalizer: Optional[weakref.finalize] = weakref.finalize(self, _collected, node)  # type: ignore[type-arg]
        self._finalizer.atexit = False           # _at_exit orders the survivors itself

    # -- lifecycle ---------------------------------------------------------
    def _arm(self, destroy: Callable[[], Any]) -> None:
        """Register the finalizer once the C handle exists. ``destroy`` must not
        reference ``self`` (close over the handle and functions only)."""
        self._node.destroy = destroy

    def _add_owner(self, owner: "Resource") -> None:
        """Also a child of ``owner``: closed (and destroyed) before it."""
        owner._check_open()
        owner._children[self._seq] = self
        self._node.depend_on(owner._node)

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
                fin.detach()
            # raises the destroy error; an in-use one is retried when a child goes, or at exit
            self._node.run(raise_errors=True)

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
