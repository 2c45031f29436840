"""The store: schema versioning and migration, dedup by content hash, locking, read-only queries."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES
from helpers import run_cli

import tracekit
from tracekit.errors import StoreError
from tracekit.store import SCHEMA_VERSION, connect, migrate

SAMPLE = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"


def test_new_store_has_schema_version_and_contract_views(store: Path) -> None:
    tracekit.ingest([SAMPLE], store=store)
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT max(version) FROM tracekit_schema").fetchone() == (SCHEMA_VERSION,)
    runs_cols = [r[0] for r in con.execute("DESCRIBE runs").fetchall()]
    assert runs_cols[:9] == ["run_id", "source", "format", "vendor", "device_name", "label", "workload",
                             "captured_at", "ingested_at"]
    kernel_cols = {r[0]: r[1] for r in con.execute("DESCRIBE kernels").fetchall()}
    for col, typ in {"run_id": "VARCHAR", "rank": "INTEGER", "device": "INTEGER", "stream": "VARCHAR",
                     "category": "VARCHAR", "name": "VARCHAR", "start_ns": "BIGINT", "dur_ns": "BIGINT",
                     "correlation_id": "BIGINT"}.items():
        assert kernel_cols[col] == typ
    con.close()


def test_reingest_same_content_returns_same_run(store: Path, tmp_path: Path) -> None:
    first = tracekit.ingest([SAMPLE], store=store, label="a")
    again = tracekit.ingest([SAMPLE], store=store, label="b")
    assert first[0].created and not again[0].created
    assert first[0].run_id == again[0].run_id
    assert again[0].updated == ["label"]  # a new --label on stored content updates the run (issue 16)
    copy = tmp_path / "renamed.json.gz"
    shutil.copy(SAMPLE, copy)  # same bytes under another name: still the same run
    third = tracekit.ingest([copy], store=store)[0]
    assert third.run_id == first[0].run_id and third.updated == []  # no label given: kept
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*), any_value(label) FROM runs").fetchone() == (1, "b")
    n_ops = con.execute("SELECT count(*) FROM ops").fetchone()[0]
    con.close()
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    other = tracekit.ingest([plain], store=store)[0]
    assert other.created and other.run_id != first[0].run_id
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM ops WHERE run_id = ?", [other.run_id]).fetchone()[0] == n_ops
    con.close()


def test_label_workload_tags_are_stored(store: Path) -> None:
    res = run_cli("ingest", str(SAMPLE), "--store", str(store), "--label", "sha-abc", "--workload",
                  "tiny-decode", "--tag", "batch=2", "--tag", "dtype=fp32", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out[0]["created"] is True and out[0]["vendor"] == "cpu"
    con = duckdb.connect(str(store), read_only=True)
    row = con.execute("SELECT label, workload, tags['batch'], tags['dtype'], format FROM runs").fetchone()
    assert row == ("sha-abc", "tiny-decode", "2", "fp32", "kineto")
    con.close()


def test_future_schema_is_refused(store: Path) -> None:
    tracekit.ingest([SAMPLE], store=store)
    con = duckdb.connect(str(store))
    con.execute("INSERT INTO tracekit_schema VALUES (?, now()::TIMESTAMP)", [SCHEMA_VERSION + 1])
    con.close()
    with pytest.raises(StoreError, match="newer than this tracekit"):
        connect(store)
    res = run_cli("runs", "--store", str(store))
    assert res.returncode == 2 and "upgrade tracekit" in res.stderr


def test_migration_steps_run_in_order_in_one_transaction(store: Path) -> None:
    tracekit.ingest([SAMPLE], store=store)
    con = duckdb.connect(str(store))
    seen: list[int] = []

    def step(v: int):
        def apply(c: duckdb.DuckDBPyConnection) -> None:
            seen.append(v)
            c.execute(f"ALTER TABLE run_meta ADD COLUMN extra_{v} INTEGER DEFAULT {v}")
        return apply

    migrate(con, SCHEMA_VERSION, SCHEMA_VERSION + 2, {SCHEMA_VERSION: step(1), SCHEMA_VERSION + 1: step(2)})
    assert seen == [1, 2]
    assert con.execute("SELECT max(version) FROM tracekit_schema").fetchone() == (SCHEMA_VERSION + 2,)
    assert con.execute("SELECT extra_1 + extra_2 FROM run_meta").fetchone() == (3,)

    def broken(c: duckdb.DuckDBPyConnection) -> None:
        c.execute("ALTER TABLE run_meta ADD COLUMN half_done INTEGER")
        raise RuntimeError("step failed")

    with pytest.raises(RuntimeError):
        migrate(con, SCHEMA_VERSION + 2, SCHEMA_VERSION + 3, {SCHEMA_VERSION + 2: broken})
    cols = [r[0] for r in con.execute("DESCRIBE run_meta").fetchall()]
    assert "half_done" not in cols
    assert con.execute("SELECT max(version) FROM tracekit_schema").fetchone() == (SCHEMA_VERSION + 2,)
    con.close()


_HOLD_LOCK = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def test_second_writer_waits_for_the_lock(store: Path) -> None:
    tracekit.ingest([SAMPLE], store=store)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(store), "2.0"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    t0 = time.monotonic()
    plain = store.parent / "plain.json"
    plain.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    res = run_cli("ingest", str(plain), "--store", str(store))
    waited = time.monotonic() - t0
    holder.wait()
    assert res.returncode == 0, res.stderr
    assert waited >= 1.0  # it really waited for the holder to let go
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (2,)
    con.close()


def test_lock_timeout_gives_a_clear_error_and_no_damage(store: Path) -> None:
    tracekit.ingest([SAMPLE], store=store)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(store), "3.0"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    plain = store.parent / "plain.json"
    plain.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    res = run_cli("ingest", str(plain), "--store", str(store), env={"TRACEKIT_LOCK_TIMEOUT": "0.5"})
    holder.wait()
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"waiting for the lock on {store}")
    assert lines[-1] == (
        f"error: {store}: store is locked by another tracekit process (waited 0.5 s; "
        "set TRACEKIT_LOCK_TIMEOUT to wait longer)"
    )
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    con.close()


def test_two_concurrent_ingests_both_land(store: Path, tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    a.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    b = tmp_path / "b.json.gz"
    b.write_bytes(gzip.compress(a.read_bytes(), compresslevel=1))
    cmd = [sys.executable, "-c", "from tracekit.cli.main import main; main()", "ingest", "--store", str(store)]
    procs = [subprocess.Popen([*cmd, str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in (a, b)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (2,)
    per_run = con.execute("SELECT count(DISTINCT n) FROM (SELECT run_id, count(*) n FROM ops GROUP BY 1)").fetchone()
    assert per_run == (1,)  # both runs complete, with the same number of ops
    con.close()


def test_query_is_read_only_and_formats_are_machine_readable(store: Path) -> None:
    tracekit.ingest([SAMPLE], store=store, workload="w")
    res = run_cli("query", "SELECT name, count(*) AS n FROM ops GROUP BY name ORDER BY n DESC, name LIMIT 3",
                  "--store", str(store), "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == ["name", "n"] and len(rows) == 4
    con = duckdb.connect(str(store), read_only=True)
    want = con.execute("SELECT name, count(*) AS n FROM ops GROUP BY name ORDER BY n DESC, name LIMIT 3").fetchall()
    con.close()
    assert [(r[0], int(r[1])) for r in rows[1:]] == want
    res = run_cli("query", "SELECT run_id, workload, captured_at FROM runs", "--store", str(store), "-f", "json")
    data = json.loads(res.stdout)
    assert data[0]["workload"] == "w" and data[0]["captured_at"].startswith("20")
    for sql, phrase in [("DELETE FROM run_meta", "query: the store is read-only here (DELETE is refused)"),
                        ("COPY (SELECT 1) TO '/tmp/tracekit-should-not-exist.csv'", "(COPY is refused)"),
                        ("SELECT * FROM read_csv('/etc/passwd')", "query failed"),  # reading files: disabled
                        ("SELEC nonsense", "query failed: Parser Error")]:
        res = run_cli("query", sql, "--store", str(store))
        assert res.returncode == 2 and res.stderr.startswith(f"error: {store}: ") and phrase in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    assert not Path("/tmp/tracekit-should-not-exist.csv").exists()
    res = run_cli("query", "SELECT 1", "--store", str(store.parent / "none.duckdb"))
    assert res.returncode == 2 and "no such store" in res.stderr
    assert not (store.parent / "none.duckdb").exists()


def test_runs_lists_each_run(store: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(SAMPLE.read_bytes()))
    ids = [r.run_id for r in tracekit.ingest([SAMPLE, plain], store=store)]
    res = run_cli("runs", "--store", str(store), "-f", "json")
    data = json.loads(res.stdout)
    assert sorted(r["run_id"] for r in data) == sorted(ids)
    assert all(r["vendor"] == "cpu" and r["device_events"] == 0 for r in data)


def test_env_var_picks_the_store(tmp_path: Path) -> None:
    store = tmp_path / "env.duckdb"
    res = run_cli("ingest", str(SAMPLE), env={"TRACEKIT_STORE": str(store)})
    assert res.returncode == 0, res.stderr
    assert store.exists()
    res = run_cli("query", "SELECT count(*) AS n FROM runs", "-f", "json", env={"TRACEKIT_STORE": str(store)})
    assert json.loads(res.stdout) == [{"n": 1}]


def test_ingest_prints_what_each_new_run_holds(store: Path, tmp_path: Path) -> None:
    """Without --json: the runs table, then each new run's top activity (queried on the ingest's
    own connection before it commits); plain aligned text when stderr is not a terminal, Rich
    tables when it is; stdout is the run ids either way."""
    res = run_cli("ingest", str(SAMPLE), "--store", str(store))
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    assert "no device activity; top host ops by inclusive time" in res.stderr
    con = duckdb.connect(str(store), read_only=True)
    name, calls = con.execute(
        "SELECT name, count(*) FROM ops WHERE run_id = ? GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT 1",
        [run_id],
    ).fetchone()
    con.close()
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith(f"{name} "))
    assert line.split()[1] == str(calls)
    assert "│" not in res.stderr  # no box drawing in a log
    again = run_cli("ingest", str(SAMPLE), "--store", str(store))  # nothing new: no summary
    assert again.returncode == 0 and "already in store" in again.stderr and "top host ops" not in again.stderr

    import pty

    main, secondary = pty.openpty()  # stderr on a terminal: Rich tables
    try:
        tty = subprocess.run(
            [sys.executable, "-c", "from tracekit.cli.main import main; main()", "ingest", str(SAMPLE),
             "--store", str(tmp_path / "tty.duckdb")],
            stdout=subprocess.PIPE, stderr=secondary, timeout=120, check=False,
            env={**os.environ, "COLUMNS": "100"},
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(main)
    shown = b"".join(chunks).decode(errors="replace")
    assert tty.returncode == 0 and tty.stdout.decode().strip() == run_id
    assert "│" in shown and name in shown and "top host ops" in shown


def test_console_script_ingest_exits_with_everything_written(tmp_path: Path) -> None:
    """The console script ends an ingest with os._exit: output flushed, store committed, codes kept."""
    script = Path(sys.executable).parent / "tracekit"
    assert script.exists()
    store = tmp_path / "s.duckdb"
    res = subprocess.run([str(script), "ingest", str(SAMPLE), "--store", str(store), "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    [row] = json.loads(res.stdout)
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM host_events WHERE run_id = ?", [row["run_id"]]).fetchone() == (
        row["n_host_events"],
    )
    con.close()
    assert not Path(str(store) + ".wal").exists()  # checkpointed and closed
    bad = subprocess.run([str(script), "ingest", str(tmp_path / "missing.json"), "--store", str(store)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such file" in bad.stderr
    usage = subprocess.run([str(script), "ingest"], capture_output=True, text=True, timeout=120, check=False)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr


@pytest.mark.parametrize(
    ("sample", "absent"),
    [
        # the C helpers write their own JSON and hand DuckDB columns: no msgspec; Kineto needs no NumPy
        ("jax_cpu_decode_recompile.xplane.pb.gz", ("msgspec", "pandas", "pyarrow", "rich", "typer")),
        ("cpu_tiny_decoder_prefill_decode.pt.trace.json.gz",
         ("msgspec", "numpy", "google.protobuf", "pandas", "pyarrow", "rich", "typer")),
    ],
)
def test_ingest_loads_only_what_its_format_needs(tmp_path: Path, sample: str, absent: tuple[str, ...]) -> None:
    """Every import is paid by every ingest of that format (start-up is most of a small ingest)."""
    from tracekit.parsers import _xplane_read
    from tracekit.parsers.kineto import native_scanner_enabled

    if _xplane_read._wire is None or not native_scanner_enabled():
        if os.environ.get("CI"):
            raise AssertionError("CI must build the C helpers")
        pytest.skip("the C helpers are not built here (no C compiler when tracekit was installed)")
    import duckdb

    if duckdb.__version__.startswith("1."):  # DuckDB 1.x is handed batches as pandas frames (store_writer)
        absent = tuple(m for m in absent if m not in ("pandas", "numpy"))
    store = tmp_path / "s.duckdb"
    code = (
        "import sys, tracekit\n"
        f"tracekit.ingest([{str(SAMPLES / sample)!r}], store={str(store)!r})\n"
        f"print(sorted(m for m in {absent!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_writer_checkpoints_at_commit(store: Path) -> None:
    """A writer's COMMIT goes into the store file itself (checkpoint threshold 1 KB), not into a
    WAL that waits for close: the data is written once, and nothing needs replaying later."""
    tracekit.ingest([SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"], store=store)
    wal = Path(str(store) + ".wal")
    con = connect(store)
    try:
        con.execute("BEGIN")
        con.execute("UPDATE run_meta SET label = 'x'")
        con.execute("COMMIT")
        assert not wal.exists() or wal.stat().st_size == 0  # while the connection is still open
        size = store.stat().st_size
    finally:
        con.close()
    reader = duckdb.connect(str(store), read_only=True)
    assert reader.execute("SELECT label FROM run_meta").fetchall() == [("x",)]
    reader.close()
    assert size == store.stat().st_size
