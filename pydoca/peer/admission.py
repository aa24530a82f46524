"""Which RDMA CM requests a responder takes, and when.

A request is refused at once when its address is not allowed, every authenticated place is taken, or its address
holds its share of them (``max_connections_per_source``); a place whose requester has been idle long enough counts
as free (the responder evicts that requester once the newcomer has authenticated). Handshakes
(connected, not yet authenticated) have a budget of their own, in all and per source address, so silent
connections never take an authenticated requester's place. A request over that budget is not refused: it waits,
undecided, for a handshake to end (like a listen backlog), for at most ``wait_s``. The waiting requests are
bounded like the handshakes themselves (in all and per address); beyond that a request is refused at once.
So a burst of honest requesters from one host is served, and a flood costs a bounded number of connections.
"""
from __future__ import annotations

import collections
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from .._log import get_logger
from ..rdma import Connection, ConnectionState, Rdma
from .auth import Network, address_allowed

log = get_logger()

#: how long a request may wait for a handshake place: well inside the requester's connection request
#: timeout (5 s by default in DOCA and softdoca), so that an accepted request still has time to complete
WAIT_S = 3.0

#: (places taken, handshakes pending, pending from that address, places taken from that address): the
#: responder's requesters, counted for one source address
Counter = Callable[[Optional[str]], Tuple[int, int, int, int]]


class Admission:
    """The listen policy of one responder (``policy``), and its queue of waiting requests (``admit``)."""

    def __init__(self, rdma: Rdma, *, allow: Optional[Sequence[Network]], max_connections: int, max_pending: int,
                 max_pending_per_source: int, count: Counter, max_connections_per_source: Optional[int] = None,
                 on_admit: Callable[[Connection, Optional[str]], None], wait_s: float = WAIT_S) -> None:
        self.rdma, self.allow, self.count, self.on_admit = rdma, allow, count, on_admit
        self.max_connections, self.max_pending = max_connections, max_pending
        self.max_pending_per_source, self.wait_s = max_pending_per_source, wait_s
        self.max_connections_per_source = max_connections_per_source
        self.refused = 0        # requests refused (allow-list, limits, waited too long)
        self.waited = 0         # requests that waited for a handshake place
        self._waiting: Dict[Connection, Tuple[float, Optional[str]]] = collections.OrderedDict()

    @property
    def waiting(self) -> int:
        """Requests waiting for a handshake place now."""
        return len(self._waiting)

    def policy(self, conn: Connection) -> Optional[bool]:
        """The RDMA CM request policy, before any memory is spent: True accepts, False refuses, None waits."""
        addr = conn.peer_address
        source = addr[0] if addr else None
        if not address_allowed(source, self.allow):
            return self._refuse("address not in the allow-list", address=source)
        verdict = self._budget(source)
        if verdict is None:
            self.on_admit(conn, source)
            return True
        if verdict == "max_connections reached":
            return self._refuse(verdict, max_connections=self.max_connections)
        if verdict == "max_connections_per_source reached":
            return self._refuse(verdict, address=source, max_connections_per_source=self.max_connections_per_source)
        in_all = len(self._waiting)
        from_source = sum(s == source for _, s in self._waiting.values())
        if in_all >= self.max_pending or from_source >= self.max_pending_per_source:
            return self._refuse(verdict + ", and as many wait already", address=source, max_pending=self.max_pending,
                                max_pending_per_source=self.max_pending_per_source)
        self.waited += 1
        self._waiting[conn] = (time.monotonic(), source)
        log.info("connection request waits for a handshake place", address=source, reason=verdict,
                 waiting=len(self._waiting))
        return None

    def admit(self) -> None:
        """Accept the waiting requests that fit the budget now (oldest first); refuse those that waited
        ``wait_s``; forget those whose requester left. Cheap when nothing waits."""
        if not self._waiting:
            return
        now = time.monotonic()
        for conn, (since, source) in list(self._waiting.items()):
            if conn.state is not ConnectionState.REQUESTED:
                del self._waiting[conn]
                self.rdma.decide(conn, False)       # only takes it off the runtime's undecided list
            elif self._budget(source) is None:
                del self._waiting[conn]
                if self.rdma.decide(conn, True):     # its events are dispatched later, on this thread
                    self.on_admit(conn, source)
                else:
                    log.info("a waiting requester left before its turn", address=source)
            elif now - since >= self.wait_s:
                del self._waiting[conn]
                self._refuse("no handshake place within the wait", address=source, waited_s=self.wait_s)
                self.rdma.decide(conn, False)

    def close(self) -> None:
        """Refuse what still waits (the responder is closing)."""
        for conn in list(self._waiting):
            self.rdma.decide(conn, False)
        self._waiting.clear()

    def _budget(self, source: Optional[str]) -> Optional[str]:
        """None when a request from ``source`` fits now, else what is full."""
        ready, pending, from_source, ready_source = self.count(source)
        if ready >= self.max_connections:
            return "max_connections reached"
        per_source = self.max_connections_per_source
        if per_source is not None and ready_source >= per_source:
            return "max_connections_per_source reached"
        if pending >= self.max_pending:
            return "too many handshakes pending"
        if from_source >= self.max_pending_per_source:
            return "too many handshakes pending from one address"
        return None

    def _refuse(self, why: str, **kw: object) -> bool:
        self.refused += 1
        log.warning(f"connection refused: {why}", **kw)
        return False
