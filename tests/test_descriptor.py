"""pydoca.descriptor: versioned, atomic, private descriptor files."""
from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pydoca import descriptor
from pydoca.descriptor import DescriptorError, read_descriptor, write_descriptor

KIND = "test-kind"


def _doc(path: Path) -> Dict[str, Any]:
    doc: Dict[str, Any] = json.loads(path.read_text())
    return doc


def test_round_trip_header_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    payload = {"connection": b"\x00\x01\xffblob", "size": 4096, "name": "ep0",
               "nested": {"memory": b"\x10" * 40, "list": [b"a", 1, "b"]}, "empty": b""}
    before = time.time()
    write_descriptor(path, KIND, payload)
    got = read_descriptor(path, KIND)
    for key, value in payload.items():
        assert got[key] == value
    assert got["magic"] == "pydoca-descriptor"
    assert got["format_version"] == 1
    assert got["kind"] == KIND
    assert got["pid"] == os.getpid()
    assert isinstance(got["host"], str) and got["host"]
    assert before - 1 <= got["created"] <= time.time() + 1
    raw = _doc(path)                                   # bytes travel as {"b64": ...}
    assert raw["connection"] == {"b64": "AAH/YmxvYg=="}
    assert raw["nested"]["list"][0] == {"b64": "YQ=="}


def test_accepts_str_and_pathlike(tmp_path: Path) -> None:
    write_descriptor(str(tmp_path / "s.json"), KIND, {"x": 1})
    assert read_descriptor(tmp_path / "s.json", KIND)["x"] == 1


def test_mode_0600_regardless_of_umask_and_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text("old")
    path.chmod(0o644)
    old_umask = os.umask(0)
    try:
        write_descriptor(path, KIND, {"key": b"secret"})
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_descriptor(path, KIND)["key"] == b"secret"


def test_reserved_keys_and_bad_kind_rejected_on_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reserved"):
        write_descriptor(tmp_path / "d.json", KIND, {"magic": "x"})
    with pytest.raises(ValueError, match="kind"):
        write_descriptor(tmp_path / "d.json", "", {})
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.json"
    write_descriptor(path, KIND, {"gen": 1})

    def boom(src: str, dst: str) -> None:
        raise OSError("simulated crash before rename")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="simulated"):
        write_descriptor(path, KIND, {"gen": 2})
    monkeypatch.undo()
    assert read_descriptor(path, KIND)["gen"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["d.json"]


def test_no_partial_file_is_ever_visible(tmp_path: Path) -> None:
    """A reader polling while a writer rewrites a large descriptor sees either
    no file or a complete one, never a torn one."""
    path = tmp_path / "d.json"
    big = os.urandom(512 * 1024)
    stop = threading.Event()
    seen: List[int] = []
    errors: List[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                got = read_descriptor(path, KIND)
            except DescriptorError as exc:
                if "not found" not in str(exc):
                    errors.append(exc)
                continue
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                continue
            if got["blob"] != big:
                errors.append(AssertionError("payload differs"))
            seen.append(got["gen"])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for gen in range(30):
            write_descriptor(path, KIND, {"gen": gen, "blob": big})
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(10)
    assert not errors, errors[0]
    assert seen, "the reader never saw the file"
    assert [p.name for p in tmp_path.iterdir()] == ["d.json"]     # no temp files left


@pytest.mark.parametrize("content, message", [
    (b"", "invalid JSON"),
    (b"{not json", "invalid JSON"),
    (b"\xff\xfe\x00garbage", "invalid JSON"),
    (b"[1, 2]", "top level is list"),
    (b'"string"', "top level is str"),
    (b"{}", "magic None"),
    (b'{"magic": "other", "format_version": 1, "kind": "test-kind"}', "magic 'other'"),
    (b'{"magic": "pydoca-descriptor", "format_version": 2, "kind": "test-kind"}',
     "unsupported descriptor format_version 2"),
    (b'{"magic": "pydoca-descriptor", "format_version": 0, "kind": "test-kind"}',
     "unsupported descriptor format_version 0"),
    (b'{"magic": "pydoca-descriptor", "format_version": "1", "kind": "test-kind"}', "not an integer"),
    (b'{"magic": "pydoca-descriptor", "format_version": true, "kind": "test-kind"}', "not an integer"),
    (b'{"magic": "pydoca-descriptor", "kind": "test-kind"}', "format_version None"),
    (b'{"magic": "pydoca-descriptor", "format_version": 1, "kind": "other-kind"}',
     "kind is 'other-kind', expected 'test-kind'"),
    (b'{"magic": "pydoca-descriptor", "format_version": 1}', "kind is None"),
    (b'{"magic": "pydoca-descriptor", "format_version": 1, "kind": "test-kind", "blob": {"b64": "!!"}}',
     "invalid base64"),
    (b'{"magic": "pydoca-descriptor", "format_version": 1, "kind": "test-kind", "blob": {"b64": 5}}',
     "not a string"),
])
def test_malformed_rejected(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(DescriptorError) as info:
        read_descriptor(path, KIND)
    text = str(info.value)
    assert message in text
    assert str(path) in text
    assert "\n" not in text                 # one line
    assert isinstance(info.value, ValueError)


def test_wrong_kind_of_a_real_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    write_descriptor(path, "responder", {"x": 1})
    with pytest.raises(DescriptorError, match="kind is 'responder', expected 'requester'"):
        read_descriptor(path, "requester")


def test_directory_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(DescriptorError, match="directory"):
        read_descriptor(tmp_path, KIND)


def test_missing_without_timeout_fails_at_once(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(DescriptorError, match="not found"):
        read_descriptor(tmp_path / "missing.json", KIND)
    assert time.monotonic() - start < 2.0


def test_timeout_waiting_is_bounded(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(DescriptorError, match=r"not found after waiting 0.3s"):
        read_descriptor(tmp_path / "missing.json", KIND, timeout=0.3)
    elapsed = time.monotonic() - start
    assert 0.29 <= elapsed < 2.0


def test_waits_for_a_file_that_appears(tmp_path: Path) -> None:
    path = tmp_path / "late.json"
    timer = threading.Timer(0.3, write_descriptor, args=(path, KIND, {"late": b"yes"}))
    timer.start()
    try:
        start = time.monotonic()
        got = read_descriptor(path, KIND, timeout=10)
        assert got["late"] == b"yes"
        assert time.monotonic() - start < 5
    finally:
        timer.cancel()
        timer.join()


def test_document_helpers_round_trip() -> None:
    doc = descriptor.encode_payload("hello", {"memory": b"\x01\x02", "n": 3})
    text = json.dumps(doc)
    back = descriptor.decode_document(json.loads(text), "hello", source="message")
    assert back["memory"] == b"\x01\x02" and back["n"] == 3
    with pytest.raises(DescriptorError, match="message: descriptor kind"):
        descriptor.decode_document(json.loads(text), "other", source="message")


def test_fresh_skips_a_file_left_by_an_exited_process(tmp_path: Path) -> None:
    """fresh=True: a file written on this host by a dead process is not taken;
    the error after the timeout names the stale writer; a live writer's file is."""
    import subprocess
    import sys
    path = tmp_path / "peer.json"
    code = ("import sys; from pydoca.descriptor import write_descriptor; "
            "write_descriptor(sys.argv[1], 'sample', {'x': 1})")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    assert read_descriptor(path, "sample")["x"] == 1               # default: taken as is
    with pytest.raises(DescriptorError, match=r"stale: written by process \d+, which has exited.*0.2s"):
        read_descriptor(path, "sample", timeout=0.2, fresh=True)
    write_descriptor(path, "sample", {"x": 2})                      # ours: alive
    assert read_descriptor(path, "sample", fresh=True)["x"] == 2
