"""pydoca.ports: port facts from a fake sysfs tree and from a stand-in pyverbs, the GID choice, the CLI."""
from __future__ import annotations

import dataclasses
import json
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from structlog.testing import capture_logs

from pydoca import ports
from pydoca.cli import main

V1, V2 = "IB/RoCE v1", "RoCE v2"       # what sysfs gid_attrs/types hold

# device -> port -> (state, link layer, active_mtu file or None, {index: (gid, type, netdev)})
TREE: Dict[str, Dict[int, Tuple[str, str, Optional[str], Dict[int, Tuple[str, Optional[str], Optional[str]]]]]] = {
    "mlx5_0": {
        1: ("4: ACTIVE", "Ethernet", None, {
            0: ("fe80:0000:0000:0000:0e42:a1ff:fe00:0001", V1, "eth9"),
            1: ("fe80:0000:0000:0000:0e42:a1ff:fe00:0001", V2, "eth9"),
            2: ("0000:0000:0000:0000:0000:ffff:0a00:0001", V1, "eth9"),
            3: ("0000:0000:0000:0000:0000:ffff:0a00:0001", V2, "eth9"),
            4: ("0000:0000:0000:0000:0000:ffff:0a00:0007", V2, "eth9"),
            5: ("fd00:0000:0000:0000:0000:0000:0000:0005", V2, "eth9"),
            6: ("0000:0000:0000:0000:0000:0000:0000:0000", None, None),      # empty entry
        }),
        2: ("1: DOWN", "Ethernet", "4096", {
            0: ("0000:0000:0000:0000:0000:ffff:0a00:0002", V2, "eth8"),
        }),
    },
    "mlx5_1": {
        1: ("4: ACTIVE", "InfiniBand", "4096", {
            0: ("fe80:0000:0000:0000:9803:9b03:0000:e4c6", V1, None),
        }),
    },
}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A sysfs root with two RDMA devices (class/infiniband/...) and the netdev MTU of eth9."""
    for dev, dports in TREE.items():
        for n, (state, link, mtu, gids) in dports.items():
            pdir = tmp_path / "class" / "infiniband" / dev / "ports" / str(n)
            _write(pdir / "state", state)
            _write(pdir / "link_layer", link)
            if mtu is not None:
                _write(pdir / "active_mtu", mtu)
            for i, (gid, gtype, ndev) in gids.items():
                _write(pdir / "gids" / str(i), gid)
                if gtype is not None:
                    _write(pdir / "gid_attrs" / "types" / str(i), gtype)
                if ndev is not None:
                    _write(pdir / "gid_attrs" / "ndevs" / str(i), ndev)
    _write(tmp_path / "class" / "net" / "eth9" / "mtu", "1500")
    return tmp_path


@pytest.fixture
def no_pyverbs(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyverbs not importable (it is not installed here; this makes sure)."""
    monkeypatch.setitem(sys.modules, "pyverbs", None)
    monkeypatch.setitem(sys.modules, "pyverbs.device", None)


# -- sysfs ---------------------------------------------------------------------------

def test_sysfs_ports_and_gid_table(sysfs: Path) -> None:
    found = ports.read_sysfs("mlx5_0", str(sysfs))
    assert found is not None and [p.port for p in found] == [1, 2]
    p1, p2 = found
    assert (p1.state, p1.link_layer, p1.active, p1.netdev) == ("ACTIVE", "Ethernet", True, "eth9")
    assert p1.active_mtu == 1024 and p1.mtu_source == "netdev eth9 mtu 1500"      # no active_mtu file
    assert [(g.index, g.gid, g.type) for g in p1.gids] == [
        (0, "fe80::e42:a1ff:fe00:1", "RoCE v1"), (1, "fe80::e42:a1ff:fe00:1", "RoCE v2"),
        (2, "::ffff:10.0.0.1", "RoCE v1"), (3, "::ffff:10.0.0.1", "RoCE v2"),
        (4, "::ffff:10.0.0.7", "RoCE v2"), (5, "fd00::5", "RoCE v2")]             # empty entry 6 skipped
    assert p1.gids[3].ipv4 == "10.0.0.1" and p1.gids[1].link_local and p1.gids[5].ipv4 is None
    assert (p2.state, p2.active, p2.active_mtu, p2.mtu_source) == ("DOWN", False, 4096, "sysfs active_mtu")
    ib = ports.read_sysfs("mlx5_1", str(sysfs))
    assert ib is not None and ib[0].link_layer == "InfiniBand" and ib[0].gids[0].type == "IB"
    assert ports.read_sysfs("mlx5_9", str(sysfs)) is None


def test_sysfs_root_from_environment(sysfs: Path, monkeypatch: pytest.MonkeyPatch, no_pyverbs: None) -> None:
    monkeypatch.setenv(ports.SYSFS_ENV, str(sysfs))
    assert ports.sysfs_root() == str(sysfs)
    assert ports.rdma_devices() == ["mlx5_0", "mlx5_1"]
    assert [dp.device for dp in ports.scan()] == ["mlx5_0", "mlx5_1"]


def test_roce_mtu_follows_the_netdev_mtu() -> None:
    assert [ports.roce_mtu(m) for m in (9000, 4200, 4000, 1500, 1000, 300)] == [4096, 4096, 2048, 1024, 512, None]


# -- pyverbs -------------------------------------------------------------------------

def test_pyverbs_missing_falls_back_to_sysfs_and_says_so(sysfs: Path, no_pyverbs: None) -> None:
    assert ports.pyverbs_status()[0] is False
    with capture_logs() as logs:
        dp = ports.device_ports("mlx5_0", sysfs_root=str(sysfs))
    assert dp.source == "sysfs" and len(dp.ports) == 2
    assert "pyverbs not importable" in dp.detail and str(sysfs) in dp.detail
    read = [e for e in logs if e["event"] == "ports read"]
    assert read and read[0]["source"] == "sysfs" and "pyverbs not importable" in read[0]["detail"]
    assert read[0]["logger"] == "pydoca.ports"
    missing = ports.device_ports("mlx5_9", sysfs_root=str(sysfs))
    assert missing.source == "none" and not missing.ports and "no RDMA device mlx5_9" in missing.detail


def test_software_device_has_no_ports() -> None:
    dp = ports.device_ports("soft_lo", software=True)
    assert (dp.source, dp.ports, dp.detail) == ("none", (), "software device (softdoca), no ports")


class _FakeGid:
    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


class _FakeContext:
    """pyverbs.device.Context over TREE: verbs numbers where verbs has numbers."""

    closed: List[str] = []

    def __init__(self, name: str) -> None:
        if name not in TREE:
            raise RuntimeError(f"Failed to find device {name}")
        self.name = name

    def query_device(self) -> Any:
        return types.SimpleNamespace(phys_port_cnt=len(TREE[self.name]))

    def query_port(self, port: int) -> Any:
        state, link, mtu, gids = TREE[self.name][port]
        return types.SimpleNamespace(state=int(state.split(":")[0]), link_layer={"InfiniBand": 1, "Ethernet": 2}[link],
                                     active_mtu={"4096": 5, None: 3}[mtu], gid_tbl_len=max(gids) + 1)

    def query_gid(self, port: int, index: int) -> _FakeGid:
        return _FakeGid(TREE[self.name][port][3][index][0])

    def query_gid_type(self, port: int, index: int) -> int:
        gtype = TREE[self.name][port][3][index][1]
        if gtype is None:
            raise RuntimeError("Failed to query gid type")
        return 1 if gtype == V2 else 0

    def close(self) -> None:
        self.closed.append(self.name)


def test_pyverbs_path(sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With pyverbs importable (a stand-in here), ports come from verbs; netdevs still from sysfs."""
    pkg = types.ModuleType("pyverbs")
    pkg.__version__ = "99.0"                                          # type: ignore[attr-defined]
    dev = types.ModuleType("pyverbs.device")
    dev.Context = _FakeContext                                        # type: ignore[attr-defined]
    listed = [types.SimpleNamespace(name=b"mlx5_0"), types.SimpleNamespace(name=b"mlx5_7")]
    dev.get_device_list = lambda: listed                              # type: ignore[attr-defined]
    pkg.device = dev                                                  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyverbs", pkg)
    monkeypatch.setitem(sys.modules, "pyverbs.device", dev)
    _FakeContext.closed.clear()

    dp = ports.device_ports("mlx5_0", sysfs_root=str(sysfs))
    assert (dp.source, dp.detail) == ("pyverbs", "pyverbs 99.0")
    from_sysfs = ports.read_sysfs("mlx5_0", str(sysfs))
    assert from_sysfs is not None
    for verbs, fs in zip(dp.ports, from_sysfs):
        assert (verbs.state, verbs.link_layer, verbs.netdev) == (fs.state, fs.link_layer, fs.netdev)
        assert [(g.index, g.gid, g.type, g.netdev) for g in verbs.gids] == \
            [(g.index, g.gid, g.type, g.netdev) for g in fs.gids]
    assert [p.active_mtu for p in dp.ports] == [1024, 4096] and dp.ports[0].mtu_source == "pyverbs"
    assert _FakeContext.closed == ["mlx5_0"]
    ib = ports.device_ports("mlx5_1", sysfs_root=str(sysfs))
    assert ib.source == "pyverbs" and ib.ports[0].gids[0].type == "IB"
    assert ports.rdma_devices(str(sysfs)) == ["mlx5_0", "mlx5_1", "mlx5_7"]

    # a device pyverbs does not know: sysfs (which does not know it either), with pyverbs' answer
    fallback = ports.device_ports("mlx5_9", sysfs_root=str(sysfs))
    assert fallback.source == "none" and "Failed to find device mlx5_9" in fallback.detail


# -- the GID choice --------------------------------------------------------------------

def _ports(sysfs: Path, dev: str = "mlx5_0") -> Tuple[ports.PortInfo, ...]:
    found = ports.read_sysfs(dev, str(sysfs))
    assert found is not None
    return found


def test_gid_choice_prefers_the_interface_ipv4_and_logs_why(sysfs: Path) -> None:
    with capture_logs() as logs:
        choice = ports.choose_gid(_ports(sysfs), "10.0.0.7")
    assert choice is not None and (choice.port, choice.index, choice.entry.gid) == (1, 4, "::ffff:10.0.0.7")
    assert "interface address 10.0.0.7" in choice.reason and "2 DOWN" in choice.reason
    [event] = [e for e in logs if e["event"] == "chose GID"]
    assert event["log_level"] == "info" and event["logger"] == "pydoca.ports"
    assert (event["device"], event["port"], event["index"], event["type"]) == ("mlx5_0", 1, 4, "RoCE v2")
    assert event["reason"] == choice.reason


def test_gid_choice_without_a_matching_address(sysfs: Path) -> None:
    for addr in (None, "192.0.2.1"):
        choice = ports.choose_gid(_ports(sysfs), addr)
        assert choice is not None and choice.index == 3                   # lowest RoCE v2 IPv4-mapped
        assert "RoCE v2 IPv4-mapped" in choice.reason
        assert ("no interface IPv4 address" if addr is None else "192.0.2.1") in choice.reason


def test_gid_choice_falls_back_to_ipv6_then_v1_never_v2_link_local(sysfs: Path) -> None:
    p1 = _ports(sysfs)[0]
    no_v4 = dataclasses.replace(p1, gids=tuple(g for g in p1.gids if g.ipv4 is None))
    choice = ports.choose_gid([no_v4])
    assert choice is not None and (choice.index, choice.entry.gid) == (5, "fd00::5")
    assert "RoCE v2 IPv6" in choice.reason
    only_ll = dataclasses.replace(no_v4, gids=tuple(g for g in no_v4.gids if g.link_local))
    choice = ports.choose_gid([only_ll])
    assert choice is not None and (choice.index, choice.entry.type) == (0, "RoCE v1")    # not index 1 (v2 link-local)
    ib = ports.choose_gid(_ports(sysfs, "mlx5_1"))
    assert ib is not None and ib.entry.type == "IB" and "InfiniBand" in ib.reason


def test_gid_choice_needs_an_active_port(sysfs: Path) -> None:
    down = _ports(sysfs)[1]
    with capture_logs() as logs:
        assert ports.choose_gid([down], "10.0.0.2") is None
    [event] = [e for e in logs if e["event"] == "no GID chosen"]
    assert event["log_level"] == "warning" and event["reason"] == "no ACTIVE port"
    assert event["ports_not_active"] == ["2 DOWN"]


# -- the CLI -----------------------------------------------------------------------------

def test_cli_devices_prints_ports_from_the_tree(sysfs: Path, monkeypatch: pytest.MonkeyPatch, no_pyverbs: None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(ports.SYSFS_ENV, str(sysfs))
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "IBDEV_NAME" in out
    for text in ("mlx5_0: sysfs", "pyverbs not importable", "ACTIVE", "DOWN", "Ethernet", "InfiniBand", "1024",
                 "::ffff:10.0.0.1", "RoCE v2", "RoCE v1", "GID choice: port 1 index 3 ::ffff:10.0.0.1 (RoCE v2)"):
        assert text in out, text
    from pydoca._native import backend
    if backend.name == "soft":
        assert "software device (softdoca), no ports" in out

    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data and all("ports" in d and d["ports"]["device"] == d["ibdev_name"] for d in data)


def test_cli_doctor_reports_ports(sysfs: Path, monkeypatch: pytest.MonkeyPatch, no_pyverbs: None,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(ports.SYSFS_ENV, str(sysfs))
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pyverbs"]["available"] is False
    assert report["sys_class_infiniband"] == ["mlx5_0", "mlx5_1"]
    host = {e["device"]: e for e in report.get("rdma_devices", [])}
    own = {d["ibdev_name"] for d in report["devices"]}
    for name in {"mlx5_0", "mlx5_1"} - own:
        assert host[name]["source"] == "sysfs"
    if "mlx5_0" in host:
        e = host["mlx5_0"]
        assert [p["state"] for p in e["ports"]] == ["ACTIVE", "DOWN"]
        assert e["gid_choice"]["index"] == 3 and e["gid_choice"]["type"] == "RoCE v2"
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["pyverbs"]["status"] == "info" and "sysfs" in checks["pyverbs"]["detail"]
    assert "ports" in checks
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "ports:" in text and "mlx5_0" in text and "GID choice" in text
