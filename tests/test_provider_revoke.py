"""A stopped map is revoked between hosts under a provider whose fabric does not refuse old keys.

UCX's tcp and libfabric's tcp write a one-sided operation's bytes wherever its key says; on one host softdoca's
requester checks the target's live registration table, between hosts nothing did: a requester holding the
descriptor of a map the target had stopped (and maybe freed) still wrote into it. Now the target's
``doca_mmap_stop`` tells its peers (PROV_REVOKE on the native link) and waits for their answers, and their later
operations on that map take the native link, where the target refuses them (NOT_PERMITTED, as under native).

The two processes run in two network namespaces joined by a veth pair (two hosts to UCX and libfabric), with
SOFTDOCA_TRANSPORT=tcp: they still share a pid namespace and a kernel, where softdoca's same-host path would map the
target's registration table and refuse the write at the requester; on two hosts there is no such table.
"""
from __future__ import annotations

import base64
import ctypes
import hashlib
import os
import random
import signal
from typing import Any, Dict, Iterator, Tuple

import pytest

from netns import NetnsPair, ns_exec, veth_namespaces
from pydoca._native import soft_fn
from rdma_util import ALL_REMOTE, PeerProc, forge_export

pytestmark = pytest.mark.timeout(180)

PROVIDERS: Dict[str, Dict[str, str]] = {
    "ucx": {"SOFTDOCA_PROVIDER": "ucx", "UCX_TLS": "tcp", "SOFTDOCA_TRANSPORT": "tcp"},
    "ofi": {"SOFTDOCA_PROVIDER": "ofi", "FI_PROVIDER": "tcp", "SOFTDOCA_TRANSPORT": "tcp"},
}
SIZE, CHUNK = 1 << 16, 4096


def _built() -> str:
    fn = soft_fn("softdoca_providers_built", ctypes.c_char_p)
    return fn().decode() if fn else "native"


@pytest.fixture(scope="module")
def netns() -> Iterator[NetnsPair]:
    with veth_namespaces("10.200.93") as pair:
        yield pair


def _procs(netns: NetnsPair, provider: str, **extra: str) -> Tuple[PeerProc, PeerProc]:
    """A target in namespace b and a requester in namespace a under provider (skipped where not built)."""
    if provider not in _built().split(","):
        pytest.skip(f"softdoca built without the {provider} provider")
    env = {**PROVIDERS[provider], **extra}
    return PeerProc(env=env, prefix=ns_exec(netns.b)), PeerProc(env=env, prefix=ns_exec(netns.a))


def _serve(target: PeerProc, netns: NetnsPair) -> Tuple[int, Dict[str, Any]]:
    """The target's map (filled with 0x22) and its RDMA CM listener: (port, its start answer)."""
    port = random.randint(20000, 40000)
    return port, target.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="cm",
                             port=port, iface=netns.vb, fill=0x22)


def _connect(target: PeerProc, requester: PeerProc, netns: NetnsPair, port: int, fill: int = 0x5C) -> str:
    """Connect requester to target's listener (the target progresses meanwhile); the provider's transport."""
    target.post("wait_conn")
    requester.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="connect",
                   port=port, iface=netns.va, addr=netns.ip_b, fill=fill)
    target.answer("wait_conn")
    up: str = requester.call("provider_up")["transport"]
    assert up, "the provider's connection never came up"
    return up


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_stopped_map_is_refused_between_hosts(netns: NetnsPair, provider: str) -> None:
    target, requester = _procs(netns, provider)
    try:
        port, started = _serve(target, netns)
        up = _connect(target, requester, netns, port)
        assert "tcp" in up, f"the {provider} connection came up over {up}, not tcp"
        requester.call("write_burst", blob=started["mmap"], n=2, size=CHUNK)
        assert [r["error"] for r in requester.call("burst_results", wait=10)["results"]] == [None, None]
        landed = bytes([0x5C]) * (2 * CHUNK) + bytes([0x22]) * (SIZE - 2 * CHUNK)
        assert target.call("digest")["sha"] == hashlib.sha256(landed).hexdigest()
        # the first write asked the target to confirm the descriptor (PROV_CHECK) and both waited for the answer,
        # then took the provider, as the next ones do
        names = ["provider:checks_sent", "provider:check_native", "provider:one_sided"]
        assert requester.call("counters", names=names)["values"] == dict(zip(names, [1, 0, 2]))
        requester.call("write_burst", blob=started["mmap"], n=2, size=CHUNK)
        assert [r["error"] for r in requester.call("burst_results", wait=10)["results"]] == [None, None]
        assert requester.call("counters", names=names)["values"] == dict(zip(names, [1, 0, 4]))

        target.call("stop_mmap")                          # returns once the requester answered the revocation
        requester.call("write_burst", blob=started["mmap"], n=1, size=CHUNK)
        results = requester.call("burst_results", wait=15)["results"]
        assert results[0]["error"] == "DOCA_ERROR_NOT_PERMITTED", results
        assert "is not registered on the target" in results[0]["message"], results
        assert target.call("digest")["sha"] == hashlib.sha256(landed).hexdigest()   # nothing reached it

        # the refusal broke the connection (RC); a new one to the same process refuses the kept descriptor too
        assert "disconnected" in target.call("conn_events", want="disconnected", wait=10)["events"]
        _connect(target, requester, netns, port, fill=0x7E)
        requester.call("write_burst", blob=started["mmap"], n=1, size=CHUNK)
        results = requester.call("burst_results", wait=15)["results"]
        assert results[0]["error"] == "DOCA_ERROR_NOT_PERMITTED", results
        assert target.call("digest")["sha"] == hashlib.sha256(landed).hexdigest()
    finally:
        requester.close()
        target.close()


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_descriptor_is_confirmed_once_per_connection(netns: NetnsPair, provider: str) -> None:
    """One descriptor used in turn on eleven connections to its target (more than a map caches: the transfer
    engine's connections per peer use a segment this way): asked about once on each, every write through the
    provider, the bytes in place."""
    target, requester = _procs(netns, provider)
    try:
        port, started = _serve(target, netns)
        _connect(target, requester, netns, port)
        target.post("wait_conn", n=11)
        ups = requester.call("connect_more", addr=netns.ip_b, port=port, n=10)["transports"]
        target.answer("wait_conn")
        assert all(ups) and len(ups) == 10, ups
        size, rounds = 1024, 3
        errors = requester.call("write_rounds", blob=started["mmap"], rounds=rounds, size=size)["errors"]
        assert errors == [None] * (11 * rounds), errors
        n = 11 * rounds * size
        landed = bytes([0x5C]) * n + bytes([0x22]) * (SIZE - n)
        assert target.call("digest")["sha"] == hashlib.sha256(landed).hexdigest()
        names = ["provider:checks_sent", "provider:check_native", "provider:one_sided"]
        assert requester.call("counters", names=names)["values"] == dict(zip(names, [11, 0, 11 * rounds]))
    finally:
        requester.close()
        target.close()


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_frozen_peer_holds_a_stop_only_briefly(provider: str) -> None:
    """Two requesters, one SIGSTOPped: the target's stop waits for the live one's answer and at most a twentieth
    of the engine timeout (250 ms) for the frozen one, not the whole timeout; the live one is then refused."""
    if provider not in _built().split(","):
        pytest.skip(f"softdoca built without the {provider} provider")
    env = PROVIDERS[provider]
    target, frozen, live = PeerProc(env=env), PeerProc(env=env), PeerProc(env=env)
    try:
        port = random.randint(20000, 40000)
        started = target.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="cm",
                              port=port, fill=0x22)
        target.post("wait_conn", n=2)
        for p in (frozen, live):
            p.call("start", size=SIZE, access=int(ALL_REMOTE), permissions=int(ALL_REMOTE), mode="connect",
                   port=port, fill=0x5C)
            assert p.call("provider_up")["transport"]
        target.answer("wait_conn")
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        try:
            took = target.call("stop_mmap")["seconds"]
        finally:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        assert took < 2.5, f"the stop waited {took:.2f} s for a frozen peer (engine timeout 5 s)"
        before = target.call("digest")["sha"]
        live.call("write_burst", blob=started["mmap"], n=1, size=CHUNK)
        results = live.call("burst_results", wait=15)["results"]
        assert results[0]["error"] == "DOCA_ERROR_NOT_PERMITTED", results
        assert target.call("digest")["sha"] == before
    finally:
        for p in (live, frozen, target):
            p.close()


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("case", ["stale", "forged"])
def test_a_descriptor_its_target_does_not_grant_never_takes_the_provider(netns: NetnsPair, provider: str,
                                                                         case: str) -> None:
    """No revocation notice can reach a process that connects after the map stopped, and nothing at all stops a
    descriptor whose range was edited: between hosts the requester asks the target to confirm a descriptor
    (PROV_CHECK) before operations on it take the provider; until then, and after a refusal, they take the native
    link, where the target refuses them with its reason. On the code before, the stale write landed in the stopped
    map under UCX's tcp and reset the connection under libfabric's; the forged one was refused at the requester by
    the provider's check of its own key section (left unedited here), without the target's reason."""
    target, requester = _procs(netns, provider)
    try:
        port, started = _serve(target, netns)
        before = target.call("digest")["sha"]
        blob, roff = started["mmap"], 0
        if case == "stale":
            target.call("stop_mmap")                      # nobody is connected: nobody hears of it
        else:                                             # the same map, a descriptor claiming four times its size
            blob, roff = base64.b64encode(forge_export(base64.b64decode(blob), length=SIZE * 4)).decode(), SIZE
        _connect(target, requester, netns, port)
        requester.call("write_burst", blob=blob, n=1, size=CHUNK, roff=roff)
        results = requester.call("burst_results", wait=15)["results"]
        assert results[0]["error"] == "DOCA_ERROR_NOT_PERMITTED", results
        want = "is not registered on the target" if case == "stale" else "is outside mmap"
        assert "target refused" in results[0]["message"] and want in results[0]["message"], results
        assert target.call("digest")["sha"] == before
        names = ["provider:checks_sent", "provider:check_native", "provider:one_sided"]
        assert requester.call("counters", names=names)["values"] == dict(zip(names, [1, 1, 0]))
    finally:
        requester.close()
        target.close()


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_frozen_target_fails_what_waits_for_its_check(netns: NetnsPair, provider: str) -> None:
    """Writes held for the target's answer to a PROV_CHECK are watched by the link's keepalive: a target that
    stops (SIGSTOP) before it answered fails them after SOFTDOCA_TIMEOUT_MS, as it fails native operations."""
    target, requester = _procs(netns, provider, SOFTDOCA_TIMEOUT_MS="2000")
    stopped = False
    try:
        port, started = _serve(target, netns)
        _connect(target, requester, netns, port)
        target_pid = int(target.call("pid")["pid"])
        os.kill(target_pid, signal.SIGSTOP)
        stopped = True
        submitted = requester.call("write_burst", blob=started["mmap"], n=2, size=CHUNK)["submitted"]
        results = requester.call("burst_results", wait=15)["results"]
        assert [r["error"] for r in results] == ["DOCA_ERROR_CONNECTION_RESET"] * 2, results
        assert all(r["at"] - submitted < 8 for r in results), results     # the timeout (2 s), not the wait (15 s)
        assert requester.call("counters", names=["provider:checks_sent"])["values"] == {"provider:checks_sent": 1}
    finally:
        if stopped:
            os.kill(target_pid, signal.SIGCONT)
        requester.close()
        target.close()
