"""DOCA behaviours C programs written against DOCA rely on (issue 21).

* ``doca_ctx_stop`` of an idle context answers DOCA_SUCCESS, for both context
  types softdoca implements (rdma, sync event): the samples stop their context
  from the RUNNING state callback, then stop it again at teardown;
* ``doca_ctx_stop`` inside a task completion callback of the context, with
  nothing else in flight, answers DOCA_ERROR_IN_PROGRESS; the context is IDLE
  once the callback has returned, the state callbacks come from progress;
* the installed headers include what DOCA's include (a program calling
  memset, strncpy, strnlen, free, calloc, assert with only DOCA headers
  compiles under ``-Werror=implicit-function-declaration``, gcc and clang);
* the installed libraries carry no run path but ``$ORIGIN``.

(The sync-event requester/responder pair in NVIDIA's style is in
tests/test_c_programs.py.)
"""
from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple

import pytest

import pydoca
from pydoca import CtxState
from pydoca._native import backend, callbacks, ffi, lib
from pydoca.cli import softdoca as sd_cli

IN_PROGRESS = pydoca.errors.InProgressError.code

pytestmark = pytest.mark.skipif(backend.name != "soft", reason="softdoca: its runtime, and a device on lo")


def _state(c_ctx: Any) -> CtxState:
    out = ffi.new("enum doca_ctx_states *")
    assert lib.doca_ctx_get_state(c_ctx, out) == 0
    return CtxState(int(out[0]))


def _progress_until(pe: pydoca.ProgressEngine, cond: Callable[[], bool], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError("condition not reached")
        if not pe.progress():
            time.sleep(0.0005)


@pytest.fixture
def dev() -> Iterator[pydoca.Device]:
    with pydoca.Device.open(iface="lo") as d:
        yield d


# ---------------------------------------------------------------------------- rdma context
def test_rdma_stop_from_running_callback_then_again_at_teardown(dev: pydoca.Device) -> None:
    with pydoca.ProgressEngine() as pe:
        rdma = pydoca.Rdma(dev, pe, start=False)
        assert lib.doca_ctx_stop(rdma._ctx) == 0          # never started: nothing to stop
        stops: List[Tuple[int, CtxState]] = []

        def on_state(prev: CtxState, nxt: CtxState) -> None:
            if nxt is CtxState.RUNNING:
                stops.append((int(lib.doca_ctx_stop(rdma._ctx)), _state(rdma._ctx)))

        rdma.on_state = on_state
        assert lib.doca_ctx_start(rdma._ctx) == 0
        _progress_until(pe, lambda: rdma.state_history[-1:] == [(CtxState.STOPPING, CtxState.IDLE)])
        assert len(stops) == 1 and stops[0][0] in (0, IN_PROGRESS)
        assert rdma.state_history == [(CtxState.IDLE, CtxState.STARTING), (CtxState.STARTING, CtxState.RUNNING),
                                      (CtxState.RUNNING, CtxState.STOPPING), (CtxState.STOPPING, CtxState.IDLE)]
        assert lib.doca_ctx_stop(rdma._ctx) == 0          # teardown stops again: DOCA_SUCCESS
        pe.progress_all()
        assert len(rdma.state_history) == 4 and rdma.state is CtxState.IDLE
        rdma.close()


def test_rdma_stop_inside_the_completion_callback(dev: pydoca.Device) -> None:
    access = pydoca.Access.LOCAL_READ_WRITE | pydoca.Access.RDMA_WRITE
    with pydoca.ProgressEngine() as pe, pydoca.Rdma(dev, pe) as a, pydoca.Rdma(dev, pe, permissions=access) as b, \
            pydoca.BufferInventory(8) as inv:
        blob_a, conn_a = a.export()
        blob_b, conn_b = b.export()
        a.connect(blob_b, conn_a)
        b.connect(blob_a, conn_b)
        conn_a.wait_established(10)
        conn_b.wait_established(10)
        target = bytearray(64)
        source = bytearray(b"stopped from its completion".ljust(64, b"\0"))
        with pydoca.MemoryMap(dev, target, access=access) as tm, pydoca.MemoryMap(dev, source) as sm:
            remote = pydoca.MemoryMap.from_export(dev, tm.export_rdma())
            src, dst = inv.buffer(sm), inv.buffer(remote, empty=True)
            seen: List[Tuple[int, CtxState, int]] = []

            def stop_here(task: pydoca.Task[Any]) -> None:
                n = ffi.new("size_t *")
                rc = int(lib.doca_ctx_stop(a._ctx))
                lib.doca_ctx_get_num_inflight_tasks(a._ctx, n)
                seen.append((rc, _state(a._ctx), int(n[0])))

            before = len(a.state_history)
            task = a.write(conn_a, src, dst)
            task.add_done_callback(stop_here)
            task.result(10)
            assert seen == [(IN_PROGRESS, CtxState.STOPPING, 0)]
            _progress_until(pe, lambda: _state(a._ctx) is CtxState.IDLE)
            pe.progress_all()
            assert a.state_history[before:] == [(CtxState.RUNNING, CtxState.STOPPING),
                                                (CtxState.STOPPING, CtxState.IDLE)]
            assert bytes(target) == bytes(source)
            assert lib.doca_ctx_stop(a._ctx) == 0        # and at teardown
            src.close()
            dst.close()
            remote.close()


# ---------------------------------------------------------------------------- sync event context
class _Sink:
    """Receives a raw context's state callbacks (pydoca's shim dispatches by user data)."""

    def __init__(self, c_ctx: Any, on_running: Callable[[], None]) -> None:
        self.c_ctx = c_ctx
        self.history: List[Tuple[CtxState, CtxState]] = []
        self.on_running = on_running

    def _on_state(self, prev: int, nxt: int) -> None:
        self.history.append((CtxState(prev), CtxState(nxt)))
        if nxt == CtxState.RUNNING:
            self.on_running()

    def _on_conn_event(self, kind: int, c_conn: Any, conn_ud: int) -> None:  # pragma: no cover
        pass


def test_sync_event_context_stop_when_idle_and_from_running_callback(dev: pydoca.Device) -> None:
    with pydoca.ProgressEngine() as pe:
        out = ffi.new("struct doca_sync_event **")
        assert lib.doca_sync_event_create(out) == 0
        se = out[0]
        try:
            assert lib.doca_sync_event_add_publisher_location_cpu(se, dev.handle) == 0
            assert lib.doca_sync_event_add_subscriber_location_cpu(se, dev.handle) == 0
            c_ctx = lib.doca_sync_event_as_ctx(se)
            assert c_ctx != ffi.NULL
            assert lib.doca_ctx_stop(c_ctx) == 0          # idle, not even connected
            assert lib.doca_ctx_start(c_ctx) == lib.DOCA_ERROR_NOT_CONNECTED   # doca_ctx.h: no pe
            stops: List[int] = []
            sink = _Sink(c_ctx, lambda: stops.append(int(lib.doca_ctx_stop(c_ctx))))
            key = callbacks.new_id()
            callbacks.contexts[key] = sink
            data = ffi.new("union doca_data *")
            data.u64 = key
            assert lib.doca_ctx_set_user_data(c_ctx, data[0]) == 0
            assert lib.pydoca_ctx_set_state_cb(c_ctx) == 0
            assert lib.doca_pe_connect_ctx(pe.handle, c_ctx) == 0
            assert lib.doca_ctx_stop(c_ctx) == 0          # idle, connected
            assert lib.doca_ctx_start(c_ctx) == 0
            _progress_until(pe, lambda: sink.history[-1:] == [(CtxState.STOPPING, CtxState.IDLE)])
            assert stops and stops[0] in (0, IN_PROGRESS)
            assert [p[1] for p in sink.history] == [CtxState.STARTING, CtxState.RUNNING, CtxState.STOPPING,
                                                    CtxState.IDLE]
            assert lib.doca_ctx_stop(c_ctx) == 0          # teardown's second stop
            assert _state(c_ctx) is CtxState.IDLE
            pe.progress_all()
            assert len(sink.history) == 4
            callbacks.contexts.pop(key, None)
        finally:
            assert lib.doca_sync_event_destroy(se) == 0


# ---------------------------------------------------------------------------- installed runtime
_LIBC_CALLS = r"""
int main(void)
{
	char a[16], b[16];
	char *p = calloc(4, 8);

	memset(a, 'x', sizeof(a));
	strncpy(b, "doca", sizeof(b));
	assert(p != NULL);
	free(p);
	return (int)strnlen(b, sizeof(b)) + a[0] - 'x' - 4;
}
"""

#: each installed DOCA header alone, and all of them together
_HEADERS = ["doca_compat.h", "doca_pe.h", "doca_ctx.h", "doca_dev.h", "doca_mmap.h", "doca_buf.h",
            "doca_buf_inventory.h", "doca_buf_pool.h", "doca_sync_event.h", "doca_rdma.h", "doca_types.h",
            "doca_error.h", "doca_log.h", "doca_argp.h", "doca_version.h"]


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_headers_declare_what_doca_headers_declare(cc: str, tmp_path: Path) -> None:
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed")
    p = sd_cli.paths()
    flags = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Werror=implicit-function-declaration",
             "-DDOCA_ALLOW_EXPERIMENTAL_API", f"-I{p['includedir']}"]
    for header in _HEADERS:
        src = tmp_path / f"uses_{header[:-2]}.c"
        src.write_text(f"#include <{header}>\n" + _LIBC_CALLS)
        proc = subprocess.run([cc, *flags, "-fsyntax-only", str(src)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{cc} with only <{header}>:\n{proc.stderr}"
    # a whole program with every header, linked against the runtime and run
    src = tmp_path / "all.c"
    src.write_text("".join(f"#include <{h}>\n" for h in _HEADERS) + _LIBC_CALLS)
    exe = tmp_path / "all"
    proc = subprocess.run([cc, *flags, "-o", str(exe), str(src), f"-L{p['libdir']}", f"-Wl,-rpath,{p['libdir']}",
                           "-ldoca_common", "-ldoca_rdma", "-ldoca_argp"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run([str(exe)], timeout=30).returncode == 0


def _run_paths(path: Path) -> List[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    paths: List[str] = []
    for m in re.finditer(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out.stdout):
        paths += m.group(1).split(":")
    return paths


def test_installed_libraries_carry_no_run_path_but_origin() -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf not installed")
    libdir = Path(sd_cli.paths()["libdir"])
    libs = sorted(f for f in libdir.iterdir() if f.is_file() and not f.is_symlink() and ".so" in f.name)
    assert {f.name for f in libs} >= {"libdoca_common.so.3", "libdoca_rdma.so.3", "libdoca_argp.so.3"}
    for f in libs:
        assert set(_run_paths(f)) <= {"$ORIGIN"}, f"{f.name}: run path {_run_paths(f)}"
