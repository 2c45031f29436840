"""No output option overwrites a store, a directory or a device (issue 17, item 1).

Every command that writes a file a user names (`export --perfetto`, `report -o`, `check --output`,
`capture --out`) is run through the real CLI against a store built from the bundled samples, with
the output pointed at the store (as given, relative, through a symlink), the store's `.wal`, a
directory, `/dev/null`, a fifo, and an existing file with and without `--force`. After every
refusal: exit 2, one `error: <path>: <reason>` line, the store byte-identical and still listing its
runs, the target as it was, and no temporary file left next to it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from helpers import run_cli, sha256

import tracekit
from tracekit.errors import OutputError
from tracekit.outputs import check_output, open_output, prepare_output_dir, write_output

CPU = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
COMPILE = SAMPLES / "cpu_torch_compile_recompile.pt.trace.json.gz"
PY = sys.executable

#: A tiny torch workload: the profiler window opens at the import and closes at exit.
TORCH_SCRIPT = """
import torch
m = torch.nn.Linear(8, 8)
for _ in range(3):
    m(torch.randn(2, 8))
"""


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A store with two analyzed runs from the bundled samples, and their ids."""
    d = tmp_path_factory.mktemp("outputs-store")
    store = d / "store.duckdb"
    runs = tracekit.ingest([CPU, COMPILE], store=store)
    ids = [r.run_id for r in runs]
    # analyzed up front, so that report/check have nothing to store: any later change of the
    # store's bytes is the output option's doing
    res = run_cli("analyze", *ids, "--store", str(store), "-f", "json")
    assert res.returncode == 0, res.stderr
    res = run_cli("check", "--candidate", ids[0], "--baseline", ids[1], "--store", str(store))
    assert res.returncode in (0, 1), res.stderr
    return store, ids


def _run_ids(store: Path) -> list[str]:
    con = tracekit.connect(store, read_only=True)
    try:
        return sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall())
    finally:
        con.close()


def _argv(command: str, ids: list[str], target: str, store: Path, work: Path, force: bool) -> list[str]:
    extra = ["--force"] if force else []
    if command == "export":
        return ["export", ids[0], "--perfetto", target, "--store", str(store), *extra]
    if command == "report":
        return ["report", ids[0], "-o", target, "--store", str(store), *extra]
    if command == "check":
        return ["check", "--candidate", ids[0], "--baseline", ids[1], "--output", target, "--store", str(store),
                *extra]
    script = work / "work.py"
    script.write_text(TORCH_SCRIPT)
    return ["capture", "--backend", "torch", "--out", target, "--store", str(store), "--no-analyze", *extra,
            "--", PY, str(script)]


def _kind(path: Path) -> str:
    st = os.lstat(path)
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"),
                       (stat.S_ISCHR, "char device"), (stat.S_ISFIFO, "fifo")):
        if test(st.st_mode):
            return name
    return "other"


def _snapshot(path: Path) -> Any:
    """What a target is: its kind, and its bytes (a file) or its listing (a directory)."""
    if not os.path.lexists(path):
        return None
    kind = _kind(path)
    if kind == "symlink":
        return kind, os.readlink(path)
    if kind == "file":
        return kind, path.read_bytes()
    if kind == "dir":
        return kind, sorted(p.name for p in path.iterdir())
    return kind, None


COMMANDS = ["export", "report", "check", "capture"]

#: (case, reason expected from export/report/check, reason expected from capture --out)
REFUSED = [
    ("store", "is a tracekit store; refusing to overwrite it", "is a tracekit store; refusing to overwrite it"),
    ("relative", "is a tracekit store; refusing to overwrite it", "is a tracekit store; refusing to overwrite it"),
    ("symlink", "is a tracekit store; refusing to overwrite it", "is a tracekit store; refusing to overwrite it"),
    ("wal", "is a tracekit store's write-ahead log", "is a tracekit store's write-ahead log"),
    ("directory", "is a directory", "output directory is not empty"),
    ("symlink-to-directory", "is a directory", "output directory is not empty"),
    ("dev-null", "is not a regular file", "is not a directory"),
    ("fifo", "is not a regular file", "is not a directory"),
    ("existing-file", "exists; pass --force to overwrite it", "is a file, not a directory"),
]


def _target(case: str, store: Path, work: Path) -> tuple[str, Path]:
    """The path to give on the command line for ``case``, and the file system object it names."""
    if case == "store":
        return str(store), store
    if case == "relative":
        return os.path.relpath(store, os.getcwd()), store
    if case == "symlink":
        link = work / "link.md"
        link.symlink_to(store)
        return str(link), link
    if case == "wal":
        return str(store) + ".wal", Path(str(store) + ".wal")
    if case in ("directory", "symlink-to-directory"):
        d = work / "some-dir.md"
        d.mkdir()
        (d / "keep.txt").write_text("mine")
        if case == "directory":
            return str(d), d
        link = work / "dir-link.md"
        link.symlink_to(d)
        return str(link), link
    if case == "dev-null":
        return "/dev/null", Path("/dev/null")
    if case == "fifo":
        fifo = work / "pipe.md"
        os.mkfifo(fifo)
        return str(fifo), fifo
    existing = work / "existing.md"
    existing.write_text("precious\n")
    return str(existing), existing


def _tmp_leftovers(work: Path) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("case", "reason", "capture_reason"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_outputs_leave_store_and_target_untouched(
    sample_store: tuple[Path, list[str]], tmp_path: Path, command: str, case: str, reason: str,
    capture_reason: str,
) -> None:
    store, ids = sample_store
    before_store, before_runs = sha256(store), _run_ids(store)
    shown, obj = _target(case, store, tmp_path)
    before_target = _snapshot(obj) if obj != store else None
    before_resolved = _snapshot(obj.resolve()) if obj.is_symlink() else None
    r = run_cli(*_argv(command, ids, shown, store, tmp_path, force=False))
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    want = capture_reason if command == "capture" else reason
    assert len(lines) == 1 and lines[0].startswith(f"error: {shown}: {want}"), r.stderr
    assert "Traceback" not in r.stderr
    # the store: byte-identical, its runs still listed; no WAL was made up for it
    assert sha256(store) == before_store and _run_ids(store) == before_runs
    assert not Path(str(store) + ".wal").exists()
    # the target: as it was (a device stays a device, a fifo a fifo, a file keeps its bytes)
    if obj != store:
        assert _snapshot(obj) == before_target
    if before_resolved is not None:
        assert _snapshot(obj.resolve()) == before_resolved
    assert _kind(Path("/dev/null")) == "char device"
    assert _tmp_leftovers(tmp_path) == [] and _tmp_leftovers(store.parent) == []


@pytest.mark.parametrize("command", ["export", "report", "check"])
def test_force_replaces_an_existing_file(sample_store: tuple[Path, list[str]], tmp_path: Path, command: str) -> None:
    store, ids = sample_store
    before_store, before_runs = sha256(store), _run_ids(store)
    shown, existing = _target("existing-file", store, tmp_path)
    os.chmod(existing, 0o640)
    r = run_cli(*_argv(command, ids, shown, store, tmp_path, force=True))
    assert r.returncode in ((0, 1) if command == "check" else (0,)), r.stderr
    text = existing.read_text()
    assert text != "precious\n"
    if command == "export":
        assert json.loads(text)["metadata"]["tracekit"]["run_id"] == ids[0]
    elif command == "report":
        assert text.startswith(f"# tracekit report: run {ids[0]}")
    else:
        assert text == r.stdout  # the message, as printed
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640  # a replaced file keeps its permissions
    assert sha256(store) == before_store and _run_ids(store) == before_runs
    assert _tmp_leftovers(tmp_path) == []


def test_force_through_a_symlink_writes_the_file_it_points_to(
        sample_store: tuple[Path, list[str]], tmp_path: Path) -> None:
    store, ids = sample_store
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    r = run_cli("export", ids[0], "--perfetto", str(link), "--store", str(store), "--force")
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and json.loads(real.read_text())["metadata"]["tracekit"]["run_id"] == ids[0]


def test_a_new_file_needs_no_force(sample_store: tuple[Path, list[str]], tmp_path: Path) -> None:
    store, ids = sample_store
    out = tmp_path / "new.json"
    r = run_cli("export", ids[0], "--perfetto", str(out), "--store", str(store))
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["metadata"]["tracekit"]["run_id"] == ids[0]
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()
    # and the same command again is refused: the file exists now
    r = run_cli("export", ids[0], "--perfetto", str(out), "--store", str(store))
    assert r.returncode == 2 and r.stderr.strip() == f"error: {out}: exists; pass --force to overwrite it"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_capture_force_replaces_only_a_previous_capture(sample_store: tuple[Path, list[str]], tmp_path: Path) -> None:
    """`capture --out DIR --force` empties a previous capture's directory and captures into it;
    without --force, or for a directory that is not a capture's, it refuses."""
    store = tmp_path / "cap.duckdb"
    out = tmp_path / "cap"
    argv = _argv("capture", [], str(out), store, tmp_path, force=False)
    first = run_cli(*argv, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (out / "tracekit-capture.json").is_file()
    (out / "stale-trace.pt.trace.json").write_text("{}")
    again = run_cli(*argv, timeout=300)
    assert again.returncode == 2 and "output directory is not empty" in again.stderr
    assert (out / "stale-trace.pt.trace.json").exists()
    forced = run_cli(*_argv("capture", [], str(out), store, tmp_path, force=True), timeout=300)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert not (out / "stale-trace.pt.trace.json").exists() and (out / "tracekit-capture.json").is_file()
    # a directory holding a DuckDB file is never emptied, even when it looks like a capture
    other = tmp_path / "other"
    other.mkdir()
    (other / "tracekit-capture.json").write_text("{}")
    (other / "copy.duckdb").write_bytes(store.read_bytes())
    r = run_cli(*_argv("capture", [], str(other), store, tmp_path, force=True))
    assert r.returncode == 2 and "holds a DuckDB database" in r.stderr
    assert sorted(p.name for p in other.iterdir()) == ["copy.duckdb", "tracekit-capture.json"]


def test_capture_refuses_a_directory_that_holds_the_store(tmp_path: Path) -> None:
    store = tmp_path / "data" / "s.duckdb"
    store.parent.mkdir()
    r = run_cli(*_argv("capture", [], str(store.parent), store, tmp_path, force=True))
    assert r.returncode == 2 and f"error: {store.parent}: holds the store" in r.stderr
    assert not store.exists()


def test_capture_of_a_missing_command_leaves_nothing_behind(tmp_path: Path) -> None:
    """Issue 17 item 9: `capture` left two temporary directories (and the new --out directory)
    behind when the command was not found."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    store = work / "s.duckdb"
    r = run_cli("capture", "--backend", "torch", "--store", str(store), "--out", str(work / "cap"),
                "--", "no-such-command-xyz", env={"TMPDIR": str(tmp)})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["error: no-such-command-xyz: command not found"]
    assert list(tmp.iterdir()) == [] and list(work.iterdir()) == []


def test_capture_without_a_trace_leaves_no_temp_dirs(tmp_path: Path) -> None:
    """A command that runs but never imports torch: the control and hook directories go too, and
    the --out directory tracekit created is removed again (it stayed empty)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    store = tmp_path / "s.duckdb"
    r = run_cli("capture", "--backend", "torch", "--store", str(store), "--out", str(tmp_path / "cap"),
                "--ready-timeout", "1", "--", PY, "-c", "pass", env={"TMPDIR": str(tmp)})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert list(tmp.iterdir()) == [] and not (tmp_path / "cap").exists() and not store.exists()


# -- the module itself ----------------------------------------------------------------------------------


def test_a_failed_write_leaves_the_target_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), open_output(target, store=tmp_path / "s.duckdb", force=True) as fh:
        fh.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_the_target_appears_only_when_complete(tmp_path: Path) -> None:
    target = tmp_path / "out.md"
    with open_output(target, store=tmp_path / "s.duckdb") as fh:
        fh.write("part one, ")
        assert not target.exists()
        fh.write("part two")
    assert target.read_text() == "part one, part two"


def test_a_store_created_while_writing_is_not_replaced(tmp_path: Path) -> None:
    """The check is repeated just before the rename."""
    store = tmp_path / "s.duckdb"
    target = tmp_path / "late.duckdb"
    with pytest.raises(OutputError, match="is a tracekit store"), open_output(target, store=store) as fh:
        fh.write("x")
        tracekit.ingest([CPU], store=target)
    assert _run_ids(target) and _tmp_leftovers(tmp_path) == []


def test_any_duckdb_file_and_any_wal_of_one_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    tracekit.ingest([CPU], store=other)
    for path in (other, Path(str(other) + ".wal")):
        with pytest.raises(OutputError, match="store"):
            check_output(path, store=tmp_path / "in-use.duckdb", force=True)
    assert write_output(tmp_path / "fine.txt", "ok", store=other) == (tmp_path / "fine.txt").resolve()


def test_prepare_output_dir(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    assert prepare_output_dir(tmp_path / "new" / "cap", store=store, marker="m.json") is True
    assert prepare_output_dir(tmp_path / "new" / "cap", store=store, marker="m.json") is False  # empty: fine
    (tmp_path / "new" / "cap" / "x").write_text("x")
    with pytest.raises(OutputError, match="not a previous capture"):
        prepare_output_dir(tmp_path / "new" / "cap", store=store, force=True, marker="m.json")
    (tmp_path / "new" / "cap" / "m.json").write_text("{}")
    (tmp_path / "new" / "cap" / "sub").mkdir()
    assert prepare_output_dir(tmp_path / "new" / "cap", store=store, force=True, marker="m.json") is False
    assert list((tmp_path / "new" / "cap").iterdir()) == []
