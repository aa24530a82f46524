"""`pydoca bench` runs end to end and reports every figure of its JSON contract (no timing asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pydoca.cli", "bench", *args], capture_output=True, text=True,
                          timeout=240)


def test_summary_json_smoke() -> None:
    """`bench summary --json -`: the JSON alone on stdout; the children's stderr ('pydoca serve: stopped', their
    own backend warnings) stays out of the output, the fallback warning is printed once at most."""
    out = bench("summary", "--iterations", "20", "--rounds", "1", "--json", "-")
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    assert "pydoca serve: stopped" not in out.stderr and out.stderr.count("real DOCA not found") <= 1
    assert "ratio call 64 B" in out.stderr                       # the human lines, on stderr with --json -
    for key in ("tcp_pingpong_8B_s", "tcp_bulk_4MiB_s", "raw_write_8B_s", "raw_write_1MiB_s", "raw_write_4MiB_s",
                "peer_call_64B_s", "peer_write_8B_s", "peer_write_4MiB_s"):
        assert figures[key] > 0


BASE = ("backend", "transport", "op", "size", "iterations", "rounds")


@pytest.mark.parametrize("op", ["write", "read", "send", "write_imm", "send_imm", "fetch_add", "compare_swap"])
def test_lat_every_op(op: str, tmp_path: Path) -> None:
    out_file = tmp_path / "lat.json"
    out = bench("lat", "--op", op, "--size", "8", "--iterations", "50", "--rounds", "2", "--json", str(out_file))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out_file.read_text())
    assert all(k in r for k in BASE) and r["op"] == op and r["size"] == 8 and r["rounds"] == 2
    assert 0 < r["p50_us"] <= r["p99_us"] and len(r["p50_us_rounds"]) == 2
    assert "backend soft" in out.stdout and "transport tcp" in out.stdout and "p99" in out.stdout


def test_bw_rate_peer(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    out = bench("bw", "--op", "write", "--size", "64KiB", "--outstanding", "4", "--iterations", "100",
                "--rounds", "1", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(f.read_text())
    assert r["size"] == 65536 and r["MBps"] > 0 and r["outstanding"] == 4
    out = bench("rate", "--op", "write", "--size", "8", "--outstanding", "16", "--iterations", "500",
                "--rounds", "1", "--progress", "polling", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(f.read_text())
    assert r["ops_per_s"] > 0 and r["python_us_per_task"] > 0 and r["progress"] == "polling"
    out = bench("peer", "--iterations", "30", "--rounds", "1", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(f.read_text())
    for key in ("call_64B_p50_us", "call_64B_inline_p50_us", "write_8B_p50_us", "write_8B_posted_p50_us",
                "write_4MiB_MBps",
                "raw_write_8B_p50_us", "raw_write_4MiB_MBps"):
        assert r[key] > 0
    for key in ("call_64B_p50_us", "call_64B_inline_p50_us", "write_8B_p50_us", "write_8B_posted_p50_us",
                "write_4MiB_MBps"):                  # each round's ratio to the raw figure of that round
        assert r[f"ratio_{key}"] > 0 and len(r[f"ratio_{key}_rounds"]) == 1
    assert "median of per-round ratios" in out.stdout


def test_peer_polling(tmp_path: Path) -> None:
    """Polling progress on both sides of the peer pair; the raw references' idle targets wait blocking."""
    f = tmp_path / "p.json"
    out = bench("peer", "--progress", "polling", "--iterations", "30", "--rounds", "1", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(f.read_text())
    assert r["progress"] == "polling" and r["call_64B_p50_us"] > 0 and r["raw_write_8B_p50_us"] > 0
    assert "polling progress" in out.stdout


def test_bad_options() -> None:
    out = bench("lat", "--op", "fetch_add", "--size", "16")
    assert out.returncode != 0 and "8 bytes" in out.stderr
    out = bench("lat", "--size", "12XB")
    assert out.returncode != 0 and "invalid size" in out.stderr


def test_bw_connections_and_memory(tmp_path: Path) -> None:
    """--connections spreads the window over N connections (each operation's time reported);
    --memory private registers a bytearray on the target; the JSON says what was used."""
    f = tmp_path / "c.json"
    out = bench("bw", "--op", "write", "--size", "64KiB", "--outstanding", "4", "--connections", "2",
                "--iterations", "100", "--rounds", "1", "--memory", "private", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(f.read_text())
    assert r["connections"] == 2 and r["memory"] == "private" and r["outstanding"] == 4
    assert r["transport"] == r["transport_requested"] == "tcp"
    assert r["provider"] == "native" and r["provider_transport"] is None       # docs/providers.md
    assert 0 < r["op_p50_us"] <= r["op_p99_us"] and r["MBps"] > 0
    assert "over 2 connections" in out.stdout and "each operation under load" in out.stdout
    bad = bench("bw", "--op", "write", "--size", "8", "--connections", "0")
    assert bad.returncode == 2 and "--connections: must be >= 1" in bad.stderr      # refused when parsing


def test_bw_one_buffer(tmp_path: Path) -> None:
    """--one-buffer: every outstanding write from one source into one destination (iperf3's footprint)."""
    from pydoca.perftest.session import Session
    with Session("write", 4096, slots=3, one_buffer=True) as s:
        assert len({b.address for b in s.local}) == 1 and len({b.address for b in s.remote}) == 1
        assert s.latency(5)
    with Session("write", 4096, slots=3) as s:
        assert len({b.address for b in s.local}) == 3 and len({b.address for b in s.remote}) == 3
    f = tmp_path / "o.json"
    out = bench("bw", "--op", "write", "--size", "64KiB", "--one-buffer", "--iterations", "100", "--rounds", "1",
                "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(f.read_text())
    assert r["one_buffer"] is True and r["MBps"] > 0 and "one buffer each side" in out.stdout


@pytest.mark.plain_only("a harness of figures that mean nothing under a sanitizer; its operations are the other "
                        "bench tests' and the RDMA suite's")
def test_compare_quick(tmp_path: Path) -> None:
    """`bench compare` runs the matrix and the peers found on PATH, and reports every ratio row."""
    import shutil
    from pydoca.perftest.compare import RATIOS
    f = tmp_path / "cmp.json"
    out = bench("compare", "--quick", "--rounds", "1", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(f.read_text())
    med = r["medians"]
    for key in ("pydoca_lat_write_8B_polling_us", "pydoca_rate_write_8B_ops", "pydoca_bw_write_1MiB_MBps",
                "pydoca_bw_write_1MiB_one_buffer_MBps", "pydoca_rate_write_8B_batch_ops",
                "numpy_memcpy_1MiB_MBps", "python_tcp_pingpong_8B_us"):
        assert med[key] > 0, key
    if shutil.which("iperf3"):
        assert med["iperf3_1M_MBps"] is not None and med["iperf3_1M_MBps"] > 0
    if med.get("pydoca_shm_lat_write_8B_us") is not None:      # softdoca: the same-host rows, both 1 MiB ones
        assert med["pydoca_shm_bw_write_1MiB_MBps"] > 0 and med["pydoca_shm_bw_write_1MiB_one_buffer_MBps"] > 0
    for key in ("call_64B_us", "call_64B_inline_us", "write_8B_us", "write_8B_posted_us", "raw_write_8B_us",
                "write_4MiB_MBps", "raw_write_4MiB_MBps", "write_4MiB_window4_MBps", "raw_write_4MiB_4out_MBps"):
        assert med[f"pydoca_peer_{key}"] > 0, key                  # the peer layer, every round
    from pydoca.perftest.peers import installed
    for peer, prefix in (("zmq", "pyzmq_reqrep"), ("ucxx", "ucxx_tcp"), ("grpc", "grpc_unary")):
        if installed(peer) is None:                                   # measured: both figures
            assert med[f"{prefix}_64B_rtt_us"] > 0 and med[f"{prefix}_4MiB_MBps"] > 0, (peer, r["missing"])
        else:                                                         # absent: reported, not fatal
            assert med[f"{prefix}_64B_rtt_us"] is None and peer in r["missing"] and peer in out.stdout
    measures = {row["measure"] for row in r["ratios"]}
    for name, a, b, _, _ in RATIOS:
        if med.get(a) and med.get(b):
            assert name in measures and name in out.stdout, name
    rows = [name for name, _, b, _, _ in RATIOS if b.startswith(("pyzmq", "ucxx", "grpc"))]
    assert len(rows) >= 7 and all(name in out.stdout for name in rows)   # shown, with a ratio or 'peer missing'
    from pydoca.perftest.compare import _ofi_provider_ready
    if _ofi_provider_ready():                  # the ofi provider's rows (issue 24), the target engine polling too
        for key in ("pydoca_ofi_tcp_lat_write_8B_polling_us", "pydoca_ofi_tcp_lat_write_8B_polling_tspin_us",
                    "pydoca_ofi_shm_lat_write_8B_polling_us", "pydoca_ofi_shm_lat_write_8B_polling_tspin_us",
                    "pydoca_ofi_tcp_bw_write_1MiB_tspin_MBps", "pydoca_ofi_tcp_bw_write_1MiB_batch_tspin_MBps"):
            assert med[key] > 0, key
        if shutil.which("fi_pingpong"):              # measured, or why libfabric's own tool failed is reported
            for fabric in ("tcp", "shm"):
                got = med[f"fi_pingpong_{fabric}_rtt_us"]
                assert (got is not None and got > 0) or f"fi_pingpong {fabric}" in r["missing"], r["missing"]
        assert med["ofi_raw_tcp_write_1MiB_MBps"] or "ofi raw program" in r["missing"]
    else:
        assert "ofi provider" in r["missing"]


def test_target_spin_reaches_the_target_alone(tmp_path: Path) -> None:
    """--target-spin US: SOFTDOCA_SPIN_US=US in the target process's environment, not in the initiator's; the
    JSON records it (0 by default)."""
    import os
    from pydoca.perftest.session import BenchError, Session
    with Session("write", 8, target_spin_us=700) as s:
        env = (Path("/proc") / str(s.target.proc.pid) / "environ").read_bytes().split(b"\0")
        assert b"SOFTDOCA_SPIN_US=700" in env
        assert s.latency(5)
    assert os.environ.get("SOFTDOCA_SPIN_US") != "700"
    with pytest.raises(BenchError, match="between 0 and 100000"):
        Session("write", 8, target_spin_us=200_000)
    f = tmp_path / "l.json"
    out = bench("lat", "--iterations", "20", "--rounds", "1", "--target-spin", "300", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(f.read_text())["target_spin_us"] == 300 and "target engine polling 300 us" in out.stdout
    out = bench("rate", "--iterations", "64", "--outstanding", "8", "--rounds", "1", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(f.read_text())["target_spin_us"] == 0
    from pydoca.perftest.session import _spin_of
    assert _spin_of({"SOFTDOCA_SPIN_US": "250"}) == 250 and _spin_of({"SOFTDOCA_SPIN_US": "9999999"}) == 100_000
    assert _spin_of({"SOFTDOCA_SPIN_US": "x"}) == 0 and _spin_of({}) == 0     # inherited values are recorded too


def test_the_serving_spin_is_recorded_as_the_target_had_it(tmp_path: Path) -> None:
    """target_serve_spin_us: SOFTDOCA_SERVE_SPIN_US as softdoca reads it, its default the C header's, 0 where it
    does not apply (the native provider)."""
    import re
    from pydoca.perftest import session
    header = (Path(__file__).resolve().parents[1] / "softdoca/src/rdma/rdma.h").read_text()
    m = re.search(r"#define SD_SERVE_SPIN_US_DEFAULT (\d+)", header)
    assert m and int(m.group(1)) == session.SERVE_SPIN_US_DEFAULT
    assert [session._serve_spin_of_text(v) for v in ("", "250", " 7", "-5", " ", "x", "999999")] == \
        [session.SERVE_SPIN_US_DEFAULT, 250, 7, 100_000, 0, 0, 100_000]
    f = tmp_path / "l.json"
    out = bench("lat", "--iterations", "20", "--rounds", "1", "--json", str(f))
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(f.read_text())
    assert got["provider"] == "native" and got["target_serve_spin_us"] == 0, got
    import os
    import subprocess
    import sys
    env = dict(os.environ, SOFTDOCA_PROVIDER="ucx", UCX_TLS="tcp", SOFTDOCA_SERVE_SPIN_US="70")
    probe = subprocess.run([sys.executable, "-c", "from pydoca._native import provider_name; print(provider_name())"],
                           env=env, capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != "ucx":
        pytest.skip("softdoca built without the ucx provider (Debian: libucx-dev)")
    r = subprocess.run([sys.executable, "-m", "pydoca", "bench", "lat", "--iterations", "20", "--rounds", "1",
                        "--json", str(f)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(f.read_text())
    assert got["provider"] == "ucx" and got["target_serve_spin_us"] == 70, got


def test_fi_pingpong_and_the_raw_libfabric_program(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The ofi rows' peers: fi_pingpong's round trip (twice its usec/xfer), the raw libfabric program's MB/s,
    and a reason with the fix where the program is not built."""
    import shutil
    from pydoca.perftest import compare
    monkeypatch.setattr(compare, "MISSING", {})
    monkeypatch.setenv("PYDOCA_OFI_RAW_BW", str(tmp_path / "nothing"))
    assert compare._ofi_raw_MBps("tcp") is None
    assert "make -C softdoca build/bench/ofi_raw_bw" in compare.MISSING["ofi raw program"]
    if not shutil.which("fi_pingpong"):
        pytest.skip("fi_pingpong not installed (Debian: libfabric-bin)")
    rtt = compare._fi_pingpong_rtt_us("tcp", 2000)
    assert rtt is not None and 0 < rtt < 10_000
    root = Path(__file__).resolve().parent.parent
    raw = root / "softdoca" / "build" / "bench" / "ofi_raw_bw"
    if not raw.exists():
        made = subprocess.run(["make", "-s", "-C", str(root / "softdoca"), "build/bench/ofi_raw_bw"],
                              capture_output=True, text=True, timeout=120)
        if made.returncode != 0:
            pytest.skip(f"the raw libfabric program does not build here: {made.stderr[-300:]}")
    monkeypatch.setenv("PYDOCA_OFI_RAW_BW", str(raw))
    got = compare._ofi_raw_MBps("tcp")
    assert got is not None and got > 0 and "ofi raw program" not in compare.MISSING


@pytest.mark.parametrize("peer", ["zmq", "ucxx", "grpc"])
def test_python_peer(peer: str) -> None:
    """Each Python peer alone: a 64 B round trip and 4 MiB requests between two processes (skipped when its
    package is not installed: pip install 'pydoca[bench]')."""
    from pydoca.perftest.peers import installed, measure
    why = installed(peer)
    if why is not None:
        pytest.skip(why)
    got = measure(peer, 50)
    assert "error" not in got, got
    assert got["rtt_us"] > 0 and got["MBps"] > 0


def test_missing_python_peer_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer whose package does not import gives the reason (and the pip extra), not an exception."""
    from pydoca.perftest import compare, peers
    monkeypatch.setitem(peers.PACKAGES, "grpc", ("no_such_module_pydoca_test", "grpcio"))
    got = peers.measure("grpc", 10)
    assert "grpcio is not installed" in got["error"] and "pydoca[bench]" in got["error"]
    monkeypatch.setattr(peers, "measure", lambda peer, n: got if peer == "grpc" else {"rtt_us": 1.0, "MBps": 2.0})
    monkeypatch.setattr(compare, "MISSING", {})
    figures = compare._python_peers(10)
    assert figures["grpc_unary_64B_rtt_us"] is None and figures["pyzmq_reqrep_64B_rtt_us"] == 1.0
    assert "grpc" in compare.MISSING and "zmq" not in compare.MISSING
    lines, table = compare.report({**figures, "pydoca_peer_call_64B_us": 1.0}, [figures], "soft", 1)
    row = next(ln for ln in lines if "gRPC unary 64 B call" in ln)
    assert "peer missing" in row and "n/a" in row


def test_compare_headroom_and_plot(tmp_path: Path) -> None:
    """The plot shows each target row as headroom against its own target, whichever way it points."""
    from pydoca.perftest.compare import _plot, headroom
    assert headroom(1.0, "<= 2x") == 2.0 and headroom(4.0, "<= 2x") == 0.5
    assert headroom(0.4, ">= 0.8") == 0.5 and headroom(1.6, ">= 0.8") == 2.0
    assert headroom(3.0, "(info)") is None
    pytest.importorskip("matplotlib")
    table = [{"measure": "lat / peer", "ratio": 1.3, "target": "<= 2x", "met": True},
             {"measure": "rate / peer", "ratio": 0.4, "target": ">= 1.0", "met": False},
             {"measure": "info row", "ratio": 7.0, "target": "(info)", "met": True}]
    out = tmp_path / "ratios.png"
    _plot(table, str(out), "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
