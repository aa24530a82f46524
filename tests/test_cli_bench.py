"""`pydoca bench` and `pydoca transfer bench` options (issue 25, item 3): each option in the subcommand that
uses it or accepted in either position with the same meaning, `--json FILE` everywhere, one spelling, help on
every option, bare `pydoca bench` prints usage, the transfer bench says why verification failed."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Tuple

import pytest

from pydoca.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("lat", "bw", "rate", "peer", "compare", "summary")


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pydoca.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _parsers(parser: argparse.ArgumentParser, path: Tuple[str, ...] = ()) \
        -> Iterator[Tuple[Tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def test_help_on_every_option() -> None:
    """Every option of every command has help text; a hidden one (help=SUPPRESS) is an alias of a shown one."""
    for path, parser in _parsers(build_parser()):
        shown = {a.dest for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS}
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            where = f"pydoca {' '.join(path)} {'/'.join(action.option_strings)}"
            assert action.help, f"{where} has no help"
            if action.help == argparse.SUPPRESS:
                assert action.dest in shown, f"{where} is hidden but no shown option sets {action.dest}"


def test_one_spelling_per_option() -> None:
    """--iterations (not --iters), --progress (not --polling) in the bench kinds; the old ones are hidden aliases."""
    parser = build_parser()
    for kind in ("lat", "bw", "rate", "peer", "summary"):
        text = _help(parser, "bench", kind)
        assert "--iterations" in text and "--iters" not in text, kind
        assert "--progress" in text and "--polling" not in text, kind
    a = parser.parse_args(["bench", "summary", "--iters", "7", "--polling"])
    assert a.iterations == 7 and a.progress == "polling"
    assert parser.parse_args(["bench", "lat", "--iters", "9"]).iterations == 9


def _help(parser: argparse.ArgumentParser, *path: str) -> str:
    for p, sub in _parsers(parser):
        if p == path:
            return sub.format_help()
    raise KeyError(path)


@pytest.mark.parametrize("kind", KINDS)
def test_json_takes_a_file_in_either_position(kind: str) -> None:
    parser = build_parser()
    assert parser.parse_args(["bench", kind, "--json", "out.json"]).json == "out.json"
    assert parser.parse_args(["bench", "--json", "out.json", kind]).json == "out.json"
    assert parser.parse_args(["bench", "--rounds", "2", kind]).rounds == 2
    assert parser.parse_args(["bench", kind, "--rounds", "3"]).rounds == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", kind, "--json"])                     # FILE is required everywhere


def test_rounds_before_the_kind_is_used(tmp_path: Path) -> None:
    """`pydoca bench --rounds 1 lat` runs one round (before: the kind's default of 5)."""
    out = tmp_path / "lat.json"
    proc = _run("bench", "--rounds", "1", "--json", str(out), "lat", "--iterations", "20")
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["rounds"] == 1 and len(r["p50_us_rounds"]) == 1
    assert "1 round x 20 operations" in proc.stdout


def test_json_dash_is_stdout_only_json() -> None:
    proc = _run("bench", "lat", "--iterations", "20", "--rounds", "1", "--json", "-")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["rounds"] == 1              # the human lines went to stderr
    assert "pydoca bench lat" in proc.stderr


def test_bare_bench_prints_usage() -> None:
    proc = _run("bench", timeout=60)
    assert proc.returncode == 1
    assert proc.stdout.startswith("usage: pydoca bench") and "summary" in proc.stdout and "compare" in proc.stdout
    assert "pydoca serve" not in proc.stdout + proc.stderr and proc.stderr == ""


def test_summary_is_a_kind_with_the_shared_options(tmp_path: Path) -> None:
    a = build_parser().parse_args(["bench", "summary", "--iterations", "20", "--rounds", "1", "--json", "-"])
    assert (a.bench, a.iterations, a.rounds, a.json, a.progress) == ("summary", 20, 1, "-", "blocking")


def test_compare_report_separates_targets_from_figures() -> None:
    from pydoca.perftest.compare import HELPERS, RATIOS, report
    keys = [k for _, a, b, _, _ in RATIOS for k in (a, b)]
    med = {k: 100.0 + i for i, k in enumerate(dict.fromkeys(keys))}
    lines, table = report(med, [med], "soft", 1)
    start = lines.index("measured figures:") + 1
    figures = lines[start:lines.index("", start)]
    shown = {ln.split()[0] for ln in figures if ln.strip()}
    assert not shown & set(HELPERS) and "one_million_ops" in med and "three_x_p50_us" in med
    assert shown == set(med) - set(HELPERS)
    assert any("pydoca's own" in ln for ln in lines)
    assert len(table) == len(RATIOS)


def test_compare_report_aligns_long_labels() -> None:
    from pydoca.perftest import compare
    long = "a very long measure label " * 4
    ratios = [(long, "x", "y", ">= 1.0", lambda r: r >= 1), ("short", "x", "y", "<= 2x", lambda r: r <= 2),
              ("missing", "x", "z", "(info)", lambda r: True)]
    old = compare.RATIOS
    compare.RATIOS = ratios
    try:
        lines, _ = compare.report({"x": 3.0, "y": 2.0, "z": None}, [{"x": 3.0, "y": 2.0, "z": None}], "soft", 1)
    finally:
        compare.RATIOS = old
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("measure (same run)"))
    rows = lines[head:head + 4]
    ratio_col = {ln.index("ratio") + len("ratio") for ln in rows[:1]} | \
        {ln.index(v) + len(v) for ln, v in zip(rows[1:], ("1.50", "1.50", "n/a"))}
    target_col = {rows[0].index("target")} | {ln.index(t) for ln, t in zip(rows[1:], (">= 1.0", "<= 2x", "(info)"))}
    assert len(ratio_col) == 1 and len(target_col) == 1, rows
    assert "1 interleaved round (" in lines[0]


def test_compare_chart_has_a_legend(tmp_path: Path) -> None:
    from pydoca.perftest.compare import _plot, legend_labels
    labels = legend_labels()
    assert any("met" in t and ">= 1" in t for t in labels) and any("not met" in t for t in labels)
    assert any(t.startswith("1 =") for t in labels)                # the line at 1
    pytest.importorskip("matplotlib")
    table = [{"measure": "lat / peer", "ratio": 1.3, "target": "<= 2x", "met": True},
             {"measure": "rate / peer", "ratio": 0.4, "target": ">= 1.0", "met": False}]
    assert _plot(table, str(tmp_path / "r.png"), "t") == labels


# -- transfer bench ------------------------------------------------------------------------------
def test_register_form_is_checked_when_parsing() -> None:
    proc = _run("transfer", "serve", "--register", "kv:1GiB:patern", timeout=60)
    assert proc.returncode == 2 and "'pattern'" in proc.stderr and "Traceback" not in proc.stderr
    a = build_parser().parse_args(["transfer", "serve", "--register", "kv:1MiB:pattern", "--register", "b:4KiB"])
    assert a.register == [("kv", 1 << 20, "pattern"), ("b", 4096, "zero")]


def test_docs_show_the_register_form_for_the_bench() -> None:
    text = (ROOT / "docs" / "transfer.md").read_text()
    bench = text[text.index("## Benchmark"):]
    assert "--register kv:1GiB:pattern" in bench and "--op read --target" in bench


def test_transfer_bench_says_why_verification_failed(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from transfer_util import Target
    zeroed = Target("kv:16MiB")                        # as the etcd example registers it: no pattern
    try:
        out = tmp_path / "r.json"
        proc = _run("transfer", "bench", "--op", "read", "--target", f"{zeroed.address}/kv", "--duration", "0.2",
                    "--block-size", "64KiB", "--json", str(out))
    finally:
        zeroed.stop()
    assert proc.returncode == 1, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["verified"] is False and "MBps" in r and "ops_per_s" in r       # the keys others read are there
    for text in (r["verify_error"], proc.stderr):
        assert "not the bench pattern" in text and "--register kv:SIZE:pattern" in text
    patterned = Target("kv:16MiB:pattern")
    try:
        proc = _run("transfer", "bench", "--op", "read", "--target", f"{patterned.address}/kv", "--duration",
                    "0.2", "--block-size", "64KiB", "--json", "-")
    finally:
        patterned.stop()
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert r["verified"] is True and r["verify_error"] is None
    # the transports as used (issue 22): softdoca's own link, and no provider's under the native provider
    assert r["provider"] == "native" and r["transport"] in ("tcp", "shm") and r["provider_transport"] is None, r


def test_transfer_bench_target_too_small() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from transfer_util import Target
    small = Target("kv:1MiB:pattern")
    try:
        proc = _run("transfer", "bench", "--op", "read", "--target", f"{small.address}/kv", "--duration", "0.2")
    finally:
        small.stop()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "holds 1048576 bytes" in proc.stderr and "--register NAME:SIZE:pattern" in proc.stderr


def test_mismatch_names_the_first_difference() -> None:
    import numpy as np

    from pydoca.transfer.bench import mismatch, pattern
    p = pattern(4096)
    assert mismatch(p, p.copy()) == ""
    why = mismatch(np.zeros(4096, dtype=np.uint8), p, base=100)
    assert "at segment offset 100" in why and "all zero" in why




# -- children import the parent's pydoca (issue 23, item 4) --------------------------------------
def _decoy(where: Path) -> Path:
    """A directory holding a `pydoca/` package that must never be imported (an unbuilt source tree)."""
    (where / "pydoca").mkdir(parents=True)
    (where / "pydoca" / "__init__.py").write_text("raise ImportError('the decoy pydoca was imported')\n")
    (where / "cwd_helper.py").write_text("WHERE = 'cwd'\n")
    return where


def _as_installed(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`pydoca ARGS` as an installed console script runs it: the script's directory first on sys.path, not the
    working directory (here: the directory this test's pydoca came from)."""
    import pydoca
    root = str(Path(pydoca.__file__).resolve().parent.parent)
    code = f"import sys; sys.path[0] = {root!r}; from pydoca.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def test_child_argv_imports_the_parents_pydoca(tmp_path: Path) -> None:
    """module_argv: the child runs the module as -m would (argv, __main__), with this process's pydoca although
    the working directory holds another, and a module of the working directory is still importable."""
    import pydoca
    from pydoca._child import module_argv
    cwd = _decoy(tmp_path)
    probe = "import sys, pydoca, cwd_helper; print(pydoca.__file__, cwd_helper.WHERE, sys.argv[1:])"
    (tmp_path / "probe_mod.py").write_text(probe + "\n")
    got = subprocess.run(module_argv("probe_mod", "a", "--b"), capture_output=True, text=True, timeout=60,
                         cwd=cwd)
    assert got.returncode == 0, got.stderr[-2000:]
    file, where, argv = got.stdout.split(" ", 2)
    assert Path(file).resolve() == Path(pydoca.__file__).resolve() and where == "cwd"
    assert argv.strip() == "['a', '--b']"
    # the branch where the parent's root is already on sys.path (a site-packages install): cwd after it
    env = {**os.environ, "PYTHONPATH": str(Path(pydoca.__file__).resolve().parent.parent)}
    got = subprocess.run(module_argv("probe_mod"), capture_output=True, text=True, timeout=60, cwd=cwd, env=env)
    assert got.returncode == 0 and Path(got.stdout.split()[0]).resolve() == Path(pydoca.__file__).resolve()


def test_bench_from_a_directory_holding_another_pydoca(tmp_path: Path) -> None:
    """`pydoca bench lat` and `bench peer` started where `./pydoca` is another (unbuilt) package: the target and
    `pydoca serve` import the parent's pydoca (before: the decoy's ImportError from the target)."""
    cwd = _decoy(tmp_path)
    out = tmp_path / "lat.json"
    proc = _as_installed("bench", "lat", "--iterations", "20", "--rounds", "1", "--json", str(out), cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "decoy" not in proc.stderr and json.loads(out.read_text())["p50_us"] > 0
    proc = _as_installed("bench", "peer", "--iterations", "10", "--rounds", "1", "--json", "-", cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["call_64B_p50_us"] > 0


def test_transfer_bench_from_a_directory_holding_another_pydoca(tmp_path: Path) -> None:
    cwd = _decoy(tmp_path)
    proc = _as_installed("transfer", "bench", "--duration", "0.2", "--block-size", "64KiB", "--json", "-", cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["verified"] is True


def _copy_source(dst: Path) -> None:
    """The committed tree (git archive HEAD): pip builds a local directory in place, and this checkout may hold
    build outputs and other work in progress (the decoy tests above cover the working tree)."""
    import io
    import tarfile
    listed = subprocess.run(["git", "archive", "--format=tar", "HEAD", "pyproject.toml", "setup.py", "README.md",
                             "pydoca", "cdefs", "softdoca"], capture_output=True, cwd=ROOT, timeout=120)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: " + listed.stderr.decode(errors="replace").strip())
    with tarfile.open(fileobj=io.BytesIO(listed.stdout)) as tar:
        tar.extractall(dst, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(dst)


@pytest.mark.timeout(400)
@pytest.mark.plain_only("it builds and installs a plain softdoca of its own")
def test_bench_lat_with_a_non_editable_install(tmp_path: Path) -> None:
    """Issue 23 as reported: `pip install .` into a virtual environment, then that environment's `pydoca bench lat`
    run from a source tree whose `./pydoca` is not built. (The build reuses this Python's setuptools and cffi:
    --system-site-packages, --no-build-isolation; about 30 s here.)"""
    import importlib.util
    import venv
    if importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("pip") is None:
        pytest.skip("building needs setuptools and pip in this Python")
    src, env_dir = tmp_path / "src", tmp_path / "venv"
    src.mkdir()
    _copy_source(src)
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    built = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-q", str(src)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    where = subprocess.run([str(py), "-c", "import pydoca; print(pydoca.__file__)"], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
    assert str(env_dir) in where.stdout, where.stdout + where.stderr        # the venv's copy, not this checkout
    tree = _decoy(tmp_path / "tree")              # the source tree: ./pydoca is not importable
    proc = subprocess.run([str(env_dir / "bin" / "pydoca"), "bench", "lat", "--iterations", "20", "--rounds", "1",
                           "--json", "-"], capture_output=True, text=True, timeout=180, cwd=tree)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["p50_us"] > 0
