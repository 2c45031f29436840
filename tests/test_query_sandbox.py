"""`tracekit query` cannot create or modify any file: not the store, not `<store>.tmp/` (DuckDB's
default spill directory, which it lets even a sandboxed connection write), not the working
directory. Each attack is run through the real CLI and the file trees are listed before and after."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import run_cli, sha256

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"

#: Sorting 6 M md5 strings needs ~400 MB: under a 64 MiB limit DuckDB must spill to its temp dir.
SPILL = "SELECT count(*) FROM (SELECT range r, md5(range::varchar) m FROM range(6000000) ORDER BY m)"


def _tree(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``roots``: path → (size, mtime ns) of a file, (0, 0) of a
    directory (whose mtime moves when the private spill directory comes and goes in $TMPDIR)."""
    seen: dict[str, tuple[int, int]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames:
                seen[str(Path(dirpath) / name)] = (0, 0)
            for name in filenames:
                st = (Path(dirpath) / name).lstat()
                seen[str(Path(dirpath) / name)] = (st.st_size, st.st_mtime_ns)
    return seen


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sandbox")
    store_dir, tmp, cwd = root / "store", root / "tmp", root / "cwd"
    for d in (store_dir, tmp, cwd):
        d.mkdir()
    store = store_dir / "s.duckdb"
    got = run_cli("ingest", str(SAMPLE), "--store", str(store))
    assert got.returncode == 0, got.stderr
    return {"store": store, "tmp": tmp, "cwd": cwd, "root": root}


def _query(sandbox: dict[str, Path], sql: str, *extra: str) -> tuple[int, str, str]:
    env = {"TMPDIR": str(sandbox["tmp"]), "TRACEKIT_MEMORY_LIMIT": "64MiB"}
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if k not in ("TRACEKIT_STORE", "TRACEKIT_TMPDIR")}
    full.update(env)
    got = subprocess.run([sys.executable, "-c", "from tracekit.cli.main import main; main()", "query", sql,
                          "--store", str(sandbox["store"]), *extra], capture_output=True, text=True, env=full,
                         cwd=sandbox["cwd"], timeout=600, check=False)
    return got.returncode, got.stdout, got.stderr


ATTACKS = [
    # the spill of a big sort, then files written into the directories a spill may use
    SPILL,
    "COPY (SELECT * FROM range(1000)) TO '{store}.tmp/x.csv'",
    "COPY (SELECT * FROM range(1000)) TO '{tmp}/x.csv'",
    "COPY (SELECT 1) TO 'x.csv'",
    "EXPORT DATABASE '{store}.tmp/db'",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{store}.tmp/y.csv'",
    "/* hidden */ EXPLAIN ANALYZE COPY (SELECT 1) TO '{store}.tmp/y.csv'",
    "SET temp_directory = '{store}.tmp'",
    "ATTACH '{store}.tmp/other.duckdb' AS other",
    "CREATE TABLE t AS SELECT 1",
    "INSERT INTO runs_raw SELECT * FROM runs_raw",
    "DELETE FROM kernels",
    "CHECKPOINT",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM read_csv('{store}')",
    "CALL checkpoint()",
    "PRAGMA enable_profiling='json'",
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_query_creates_and_changes_no_file(sandbox: dict[str, Path], attack: str) -> None:
    store = sandbox["store"]
    sql = attack.format(store=store, tmp=sandbox["tmp"])
    before, digest = _tree(sandbox["root"]), sha256(store)
    code, _out, err = _query(sandbox, sql)
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("error: "), err
    assert _tree(sandbox["root"]) == before, f"{sql!r} changed the file tree"
    assert sha256(store) == digest
    assert not Path(f"{store}.tmp").exists()


def test_spill_happens_in_a_private_directory_that_is_removed(sandbox: dict[str, Path]) -> None:
    """The big sort does run (and so spills, under 64 MiB): its answer is right, and the private
    directory DuckDB spilled into (under $TMPDIR) is gone afterwards."""
    code, out, err = _query(sandbox, SPILL)
    assert code == 0, err
    assert "6000000" in out.replace(",", "")
    assert list(sandbox["tmp"].iterdir()) == []
    code, out, err = _query(sandbox, "SELECT current_setting('temp_directory')", "--format", "csv")
    assert code == 0, err
    spill_dir = out.strip().splitlines()[-1].strip()
    assert spill_dir.startswith(str(sandbox["tmp"])), spill_dir
    assert not Path(spill_dir).exists()


def test_kinds_that_read_still_run(sandbox: dict[str, Path]) -> None:
    for sql in ("SELECT count(*) FROM kernels", "EXPLAIN SELECT 1", "PRAGMA table_info('runs')",
                "CALL pragma_version()"):
        code, _out, err = _query(sandbox, sql)
        assert code == 0, (sql, err)


def test_spill_dirs_of_dead_processes_are_swept(sandbox: dict[str, Path]) -> None:
    """A reader killed (SIGKILL, a CI timeout) before it removed its spill directory leaves it
    behind; the next reader removes it, and never one of a process that still runs."""
    dead = sandbox["tmp"] / "tracekit-query-999999999-abc"  # above Linux's pid_max: no such process
    alive = sandbox["tmp"] / f"tracekit-query-{os.getpid()}-abc"
    for d in (dead, alive):
        d.mkdir()
        (d / "duckdb_temp_block").write_bytes(b"x" * 1000)
    code, _out, err = _query(sandbox, "SELECT 1")
    assert code == 0, err
    assert not dead.exists() and alive.exists()
    import shutil

    shutil.rmtree(alive)


def test_unusable_temp_dir_is_one_line(sandbox: dict[str, Path]) -> None:
    import subprocess
    import sys

    bad = sandbox["root"] / "not-a-dir"
    bad.write_text("x")
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_STORE"}
    env["TRACEKIT_TMPDIR"] = str(bad)
    got = subprocess.run([sys.executable, "-c", "from tracekit.cli.main import main; main()", "query", "SELECT 1",
                          "--store", str(sandbox["store"])], capture_output=True, text=True, env=env, timeout=300,
                         check=False)
    bad.unlink()
    assert got.returncode == 2 and got.stderr.count("\n") == 1 and got.stderr.startswith("error: TRACEKIT_TMPDIR: ")
