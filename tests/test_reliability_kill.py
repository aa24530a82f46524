"""SIGKILL and SIGSTOP of either side mid-stream, on raw RDMA between two
child processes that write into each other's memory (``SOFTDOCA_TIMEOUT_MS``
is CHILD_TIMEOUT_MS in both). The survivor's outstanding writes all fail
within the bound (at once after a kill, after SOFTDOCA_TIMEOUT_MS after a
stop), and a reconnect with a fresh peer then works, bytes verified."""
from __future__ import annotations

import os
import random
import signal
import time
from typing import Any, Dict, List

import pytest
from reliability_util import CHILD_TIMEOUT_MS, HEAVY, Child, child_env, scale, summary

from rdma_util import free_port

pytestmark = pytest.mark.timeout(3600 if HEAVY else 300)

BOUND = CHILD_TIMEOUT_MS / 1000 + 2.0     # seconds from the signal until every outstanding write failed


def _wait_stopped(pid: int, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                states.append(fh.read().rsplit(")", 1)[1].split()[0])
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.01)
    raise TimeoutError(f"process {pid} did not stop")


def _pair(listener: Child, port: int, dialer: Child) -> None:
    """dialer connects to listener:port; both learn the other's memory."""
    dialer.post("connect", port=port)
    listener.call("wait_conn", timeout=10.0)
    dialer.answer("connect", 10)


def _start(listen_port: int = 0) -> tuple[Child, Dict[str, Any]]:
    # TCP: a SIGSTOPped peer must stall (over softdoca's same-host transport it
    # would still be served, as by a NIC)
    child = Child("peer", env={**child_env(), "SOFTDOCA_TRANSPORT": "tcp"})
    return child, child.call("start", listen_port=listen_port)


def _trial(sig: int, victim_is_listener: bool, rng: random.Random) -> Dict[str, Any]:
    port = free_port()
    a, a_info = _start(port)
    b, b_info = _start()
    children: List[Child] = [a, b]
    try:
        _pair(a, port, b)
        a.call("remote", blob=b_info["mmap"])
        b.call("remote", blob=a_info["mmap"])
        victim, survivor = (a, b) if victim_is_listener else (b, a)
        a.post("stream", seconds=30)
        b.post("stream", seconds=30)
        time.sleep(rng.uniform(0.2, 0.5))
        victim.proc.send_signal(sig)
        t_sig = time.monotonic()
        if sig == signal.SIGSTOP:
            _wait_stopped(victim.pid)
        res = survivor.answer("stream", 40)
        victim.kill()
        first = (res["first_fail"] - t_sig) if res["first_fail"] is not None else None
        last = (res["last_fail"] - t_sig) if res["last_fail"] is not None else None
        out: Dict[str, Any] = {"ok_ops": res["ok_ops"], "failed": res["failed"], "pending": res["pending_left"],
                               "first": first, "last": last, "errors": res["errors"]}
        # reconnect: a fresh process in the victim's place
        if victim_is_listener:
            port2 = free_port()
            v2, v2_info = _start(port2)
            children.append(v2)
            _pair(v2, port2, survivor)
            survivor.call("remote", blob=v2_info["mmap"])
            out["reconnect"] = survivor.call("check")["verified"]
        else:
            v2, v2_info = _start()
            children.append(v2)
            _pair(survivor, port, v2)
            v2.call("remote", blob=a_info["mmap"])
            survivor.call("remote", blob=v2_info["mmap"])
            out["reconnect"] = v2.call("check")["verified"] and survivor.call("check")["verified"]
        return out
    finally:
        for c in children:
            if c.proc.poll() is None and c.proc.returncode is None:
                try:
                    os.kill(c.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            c.close(10)


def test_kill_and_stop_either_side_mid_stream(reliability_report: Any) -> None:
    n = scale(6, 100)
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    combos = [(signal.SIGKILL, True), (signal.SIGKILL, False), (signal.SIGSTOP, True), (signal.SIGSTOP, False)]
    results: List[Dict[str, Any]] = []
    bad: List[Any] = []
    for i in range(n):
        sig, victim_is_listener = combos[i % len(combos)]
        r = _trial(sig, victim_is_listener, rng)
        r["case"] = f"{signal.Signals(sig).name} {'listener' if victim_is_listener else 'dialer'}"
        results.append(r)
        ok = (r["pending"] == 0 and r["last"] is not None and r["last"] <= BOUND and r["reconnect"])
        if not ok:
            bad.append(r)
    lasts = {name: [r["last"] for r in results if r["case"].startswith(name) and r["last"] is not None]
             for name in ("SIGKILL", "SIGSTOP")}
    reliability_report.add("SIGKILL/SIGSTOP mid-stream", trials=n, passed=n - len(bad), failed=len(bad),
                           bound_s=BOUND, kill_fail_max_s=summary(lasts["SIGKILL"]).get("max"),
                           stop_fail_max_s=summary(lasts["SIGSTOP"]).get("max"),
                           ops_before=sum(r["ok_ops"] for r in results),
                           reconnects=sum(bool(r["reconnect"]) for r in results))
    assert not bad, bad
