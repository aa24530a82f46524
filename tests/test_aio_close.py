"""An engine closed under waiting coroutines ends their waits at once (no timeout, no stale loop reader),
and a requester closed with async operations pending fails them with Disconnected, promptly."""
from __future__ import annotations

import asyncio
import time

import pytest

import pydoca
from pydoca._loop import wait_for
from pydoca.errors import ClosedError


def test_closed_engine_settles_or_fails_its_waiters_and_leaves_no_reader() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        pe = pydoca.ProgressEngine()
        fd = pe.fileno()
        done = [False]
        settled = asyncio.ensure_future(wait_for(pe, lambda: done[0], timeout=10))
        stuck = asyncio.ensure_future(wait_for(pe, lambda: False, timeout=10))
        await asyncio.sleep(0.01)
        t0 = time.monotonic()
        done[0] = True                      # settled by the closing side, as Requester.close() does
        pe.close()
        await settled                       # its predicate holds: it returns
        with pytest.raises(ClosedError, match="closed while a coroutine waited"):
            await stuck
        assert time.monotonic() - t0 < 1.0, "a closed engine must not leave waiters to their timeout"
        assert not loop.remove_reader(fd), "the reader was removed with the fd it was added with"
        with pydoca.ProgressEngine() as pe2:            # often the same fd number: it must work again
            pe2.kick()
            flag = [False]
            loop.call_later(0.05, lambda: flag.__setitem__(0, True))
            await wait_for(pe2, lambda: flag[0], timeout=5)
    asyncio.run(main())


def test_an_engine_opened_right_after_a_close_is_woken_by_its_fd(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing an engine drops its loop reader at once (its fd still open): a new engine created before the
    loop runs again, often with the same fd number, must be registered afresh and woken by its fd, not
    only by the safety timer (made 30 s here)."""
    import threading
    import pydoca._loop as driver
    monkeypatch.setattr(driver, "SAFETY_INTERVAL", 30.0)

    async def main() -> None:
        pe = pydoca.ProgressEngine()
        stuck = asyncio.ensure_future(wait_for(pe, lambda: False, timeout=10))
        await asyncio.sleep(0.01)
        pe.close()
        with pydoca.ProgressEngine() as pe2:           # no await in between
            flag = [False]

            def later() -> None:
                flag[0] = True
                pe2.kick()
            t = threading.Timer(0.05, later)
            t.start()
            t0 = time.monotonic()
            await wait_for(pe2, lambda: flag[0], timeout=5)
            assert time.monotonic() - t0 < 2.0, "woken by its fd"
            t.join()
        with pytest.raises(ClosedError):
            await stuck
    asyncio.run(main())


def test_a_raising_predicate_fails_only_its_own_waiter() -> None:
    class Boom(Exception):
        pass

    async def main() -> None:
        with pydoca.ProgressEngine() as pe:
            flag = [False]

            def bad() -> bool:
                if flag[0]:                            # false at first: it is registered as a waiter
                    raise Boom("predicate failed")
                return False
            failing = asyncio.ensure_future(wait_for(pe, bad, timeout=5))
            good = asyncio.ensure_future(wait_for(pe, lambda: flag[0], timeout=5))
            await asyncio.sleep(0.01)
            flag[0] = True
            pe.kick()                                  # one driver run checks both waiters
            t0 = time.monotonic()
            await good
            assert time.monotonic() - t0 < 2.0
            with pytest.raises(Boom):
                await failing
    asyncio.run(main())
