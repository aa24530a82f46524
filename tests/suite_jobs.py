"""Child pytest runs of the cross-process suites: the provider matrices of test_softdoca_ucx.py and
test_softdoca_ofi.py, run four at a time, both modules' together.

Each matrix test checks one child run (a suite under one provider and transport). The first matrix test of the
session to run starts the child runs of every matrix test collected, of every matrix module (a module that
defines ``matrix_specs(collected)``), at most `width` at once (PYDOCA_MATRIX_JOBS, default 4; 1: one after the
other), the modules' longest runs first, and waits for all of them, so nothing else runs beside them (some
tests of those modules measure CPU shares); the others then read their result. A child run mostly waits for its
peers and its timeouts (0.3-0.4 of a core here), so four fit two vCPUs and the matrices take about the time of
their longest run instead of their sum (CI's 45 minutes)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterable, List, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN_S = 840.0   # all the child runs of the session at most (the matrix tests have 900 s each)


@dataclass
class Spec:
    """A child run: pytest arguments (test files, node ids, `-k` pairs), node ids left out, its environment."""
    tests: List[str]
    deselect: List[str]
    env: Dict[str, str]
    keyword: str = ""

    def argv(self) -> List[str]:
        # -v: each test's name is printed as it starts, so a run cut by its time names the test it hung in
        argv = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *self.tests]
        if self.keyword:
            argv += ["-k", self.keyword]
        for test in self.deselect:
            argv += ["--deselect", test]
        return argv

    def label(self) -> str:
        return (f"{' '.join(self.tests)} under {self.env.get('SOFTDOCA_PROVIDER')} "
                f"({self.env.get('UCX_TLS') or self.env.get('FI_PROVIDER')})")


@dataclass
class _Job:
    spec: Spec
    popen: Optional["subprocess.Popen[bytes]"] = None
    out: Optional[Path] = None
    rc: Optional[int] = None
    timed_out: bool = False
    output: str = ""


def check_output(spec: Spec, rc: Optional[int], output: str, timed_out: bool) -> None:
    """What a passing child run looks like: exit 0 and a last line that counts passed tests and no failures."""
    if timed_out:
        pytest.fail(f"{spec.label()} did not finish within {RUN_S:.0f} s; its last output:\n{output[-3000:]}")
    tail = output[-4000:]
    assert rc == 0, tail
    last = tail.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last and "error" not in last, tail


def run_one(spec: Spec) -> None:
    """One child run now, in the foreground."""
    with SuiteJobs({"one": spec}, ["one"], width=1) as jobs:
        jobs.check("one")


class SuiteJobs:
    """The child runs of one module: `check(name)` runs them all (once) and asserts the one named."""

    def __init__(self, specs: Dict[str, Spec], collected: Iterable[str], width: Optional[int] = None) -> None:
        names = set(collected)
        self.jobs = {n: _Job(s) for n, s in specs.items() if n in names}
        self.width = width or max(1, int(os.environ.get("PYDOCA_MATRIX_JOBS", "4") or "4"))
        self.dir = Path(tempfile.mkdtemp(prefix="pydoca-matrix-"))
        self.ran = False

    def __enter__(self) -> "SuiteJobs":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill whatever still runs (a test cut by its timeout), remove the output files."""
        for job in self.jobs.values():
            if job.popen and job.popen.poll() is None:
                job.popen.kill()
                job.popen.wait(timeout=30)
            if job.out and job.out.exists():
                job.out.unlink()
        try:
            self.dir.rmdir()
        except OSError:
            pass

    def _start(self, index: int, job: _Job) -> None:
        job.out = self.dir / f"{index}.log"
        with open(job.out, "wb") as f:
            job.popen = subprocess.Popen(job.spec.argv(), stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=job.spec.env, cwd=ROOT)

    def _finish(self, job: _Job, timed_out: bool) -> None:
        assert job.popen is not None and job.out is not None
        if timed_out:
            job.popen.kill()
        job.rc = job.popen.wait(timeout=30)
        job.timed_out = timed_out
        job.output = job.out.read_bytes().decode(errors="replace")

    def _run_all(self) -> None:
        # in the order given (the module lists its longest runs first)
        queue = list(enumerate(self.jobs.values()))
        running: List[_Job] = []
        deadline = time.monotonic() + RUN_S
        while (queue or running) and time.monotonic() < deadline:
            while queue and len(running) < self.width:
                index, job = queue.pop(0)
                self._start(index, job)
                running.append(job)
            time.sleep(0.2)
            for job in list(running):
                assert job.popen is not None
                if job.popen.poll() is not None:
                    self._finish(job, False)
                    running.remove(job)
        for job in running:
            self._finish(job, True)
        for _, job in queue:   # never started: the others took all the time
            job.timed_out = True
            job.output = "not started: the runs before it took the matrix's time"

    def check(self, name: str) -> None:
        if not self.ran:
            self.ran = True
            self._run_all()
        job = self.jobs[name]
        check_output(job.spec, job.rc, job.output, job.timed_out)


_POOL = pytest.StashKey["SuiteJobs"]()


class ModuleJobs:
    """One matrix module's view of the session's child runs (its tests' names, unqualified)."""

    def __init__(self, pool: SuiteJobs, module: ModuleType) -> None:
        self.pool, self.prefix = pool, module.__name__ + "::"
        self.jobs = {n[len(self.prefix):] for n in pool.jobs if n.startswith(self.prefix)}

    def check(self, name: str) -> None:
        self.pool.check(self.prefix + name)


def module_jobs(request: pytest.FixtureRequest) -> ModuleJobs:
    """The session's child runs (made once: every matrix module's, interleaved longest first), seen from the
    requesting module."""
    pool = request.session.stash.get(_POOL, None)
    if pool is None:
        modules: List[ModuleType] = []
        for item in request.session.items:
            mod = getattr(item, "module", None)
            if mod is not None and hasattr(mod, "matrix_specs") and mod not in modules:
                modules.append(mod)
        per_module = []
        for mod in modules:
            names = [i.name for i in request.session.items if getattr(i, "module", None) is mod]
            per_module.append([(f"{mod.__name__}::{n}", spec) for n, spec in mod.matrix_specs(names).items()])
        specs: Dict[str, Spec] = {}
        for rank in range(max((len(m) for m in per_module), default=0)):   # each module's longest first
            for runs in per_module:
                if rank < len(runs):
                    specs[runs[rank][0]] = runs[rank][1]
        pool = SuiteJobs(specs, list(specs))
        request.session.stash[_POOL] = pool
        request.config.add_cleanup(pool.close)
    return ModuleJobs(pool, request.module)
