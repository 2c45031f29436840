"""The lake store end to end: DuckLake over a SQLite or a real PostgreSQL catalog (started here),
data on local disk or on a local S3 server (moto), written by several processes at once.

These need the ``tracekit[lake]`` extra (DuckDB 1.5.5 and DuckDB's ducklake, postgres, sqlite and
httpfs extensions as PyPI packages, for offline use): ``.ci/run`` runs them in a second virtual
environment, ``.venv-lake``. In the main environment (DuckDB 2) they skip, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from helpers import distinct_copies, run_cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("duckdb_extension_ducklake") is None,
    reason="needs tracekit[lake] (DuckDB 1.5.5 + the DuckLake extension packages); .ci/run runs these in .venv-lake",
)

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
#: Every bundled sample that is one run (the formats of three vendors).
SAMPLE_RUNS = sorted(p for p in SAMPLES.iterdir() if not p.name.endswith((".md", ".json", ".py")) and p.name != "weekly")


def _ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stderr
    return res.stdout


def _sqlite_url(tmp: Path) -> str:
    return f"lake:sqlite:///{tmp}/catalog.sqlite?data={tmp}/data"


@pytest.fixture()
def sqlite_lake(tmp_path: Path) -> str:
    url = _sqlite_url(tmp_path)
    _ok(run_cli("lake", "init", url))
    return url


def _rows(store: str, sql: str) -> list[tuple[object, ...]]:
    from tracekit.store import close, connect

    con = connect(store, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        close(con)


def _view_rows(store: str | Path, view: str) -> list[tuple[object, ...]]:
    """Every row of a public view, every column but the ingest time, in a fixed order."""
    cols = [c[0] for c in _rows(str(store), f"DESCRIBE {view}") if c[0] not in ("ingested_at",)]
    return _rows(str(store), f"SELECT {', '.join(cols)} FROM {view} ORDER BY ALL")


def test_a_lake_holds_exactly_what_a_store_file_holds(sqlite_lake: str, tmp_path: Path) -> None:
    file_store = tmp_path / "file.duckdb"
    paths = [str(p) for p in SAMPLE_RUNS]
    lake_ids = json.loads(_ok(run_cli("ingest", *paths, "--store", sqlite_lake, "--label", "a", "--json")))
    file_ids = json.loads(_ok(run_cli("ingest", *paths, "--store", str(file_store), "--label", "a", "--json")))
    assert [r["run_id"] for r in lake_ids] == [r["run_id"] for r in file_ids]
    assert all(r["created"] for r in lake_ids)
    views = [r[0] for r in _rows(str(file_store), "SELECT view_name FROM duckdb_views() WHERE NOT internal "
                                                   "AND schema_name = 'main'")]
    assert len(views) >= 20
    for view in views:
        assert _view_rows(sqlite_lake, view) == _view_rows(file_store, view), view
    # the same bytes again: the existing run, its label updated, nothing duplicated
    again = json.loads(_ok(run_cli("ingest", paths[0], "--store", sqlite_lake, "--label", "b", "--json")))
    assert again[0]["created"] is False and again[0]["updated"] == ["label"]
    assert _rows(sqlite_lake, "SELECT count(*), count(DISTINCT run_id) FROM run_meta") == [(len(paths), len(paths))]


def test_read_commands_print_the_same_on_a_lake_and_a_file(sqlite_lake: str, tmp_path: Path) -> None:
    file_store = tmp_path / "file.duckdb"
    history = distinct_copies(tmp_path, 6)
    for store in (sqlite_lake, str(file_store)):
        _ok(run_cli("ingest", str(SAMPLES / "amd_synthetic_rocpd"), "--store", store))
        for i, p in enumerate(history):  # a workload's history, one capture a day
            _ok(run_cli("ingest", str(p), "--store", store, "--workload", "w",
                        "--captured-at", f"2026-11-{i + 1:02d}T10:00:00"))
    a, b = (r[0] for r in _rows(str(file_store), "SELECT run_id FROM run_meta ORDER BY run_id LIMIT 2"))
    commands = [["runs", "-f", "json"], ["query", "SELECT name, count(*) FROM kernels GROUP BY ALL ORDER BY ALL"],
                ["analyze", a, "-f", "json"], ["summary", b], ["compare", a, b, "-f", "json"],
                ["check", "--history", "w", "-f", "json"],
                ["report", a, "-o", "{out}/report.md"], ["export", b, "--perfetto", "{out}/trace.json"]]
    for args in commands:
        printed = {}
        for name, store in (("lake", sqlite_lake), ("file", str(file_store))):
            out = tmp_path / name
            out.mkdir(exist_ok=True)
            res = run_cli(*(x.replace("{out}", str(out)) for x in args), "--store", store)
            assert res.returncode in (0, 1), res.stderr  # check: 1 = a regression found
            text = res.stdout + "".join(p.read_text() for p in sorted(out.iterdir()))
            text = text.replace(store, "STORE").replace(str(out), "OUT")
            if args[0] == "check" and name == "lake":  # the snapshot it read, so an alert can be reproduced
                assert re.search(r'"read lake snapshot \d+ \(reproduce with ATTACH', text), text
            text = re.sub(r',\s*"read lake snapshot \d+[^"]*"', "", text)
            printed[name] = re.sub(r'"?ingested_at"?: ?"[^"]*"', "", text)
        assert printed["lake"] == printed["file"], args


def test_concurrent_analyses_of_one_run_take_turns_and_store_it_once(sqlite_lake: str, tmp_path: Path) -> None:
    """DuckLake inserts never conflict, so two ``analyze`` of one run at once each replaced the rows
    "before the other" and stored them twice; the run's analysis claim makes them take turns."""
    from tracekit.lake.claims import ANALYSIS_PREFIX, claims_for
    from tracekit.lake.url import parse_lake_url
    from tracekit.store import close, connect

    [run] = json.loads(_ok(run_cli("ingest", str(SAMPLES / "amd_synthetic_rocpd"), "--store", sqlite_lake,
                                   "--json")))
    rid = str(run["run_id"])
    con = connect(sqlite_lake)
    claims = claims_for(con, parse_lake_url(sqlite_lake))
    claims.create()
    assert claims.claim(ANALYSIS_PREFIX + rid, "the-test", 600) == "mine"  # another analyzer, mid-way
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_STORE"}
    procs = [subprocess.Popen([sys.executable, "-c", "from tracekit.cli.main import main; main()", "analyze", rid,
                               "--store", sqlite_lake, "-f", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    try:
        # while the claim is held nobody stores anything, however long we look (no timing margin:
        # a broken lock would show rows or an exit here on any machine sooner or later)
        for _ in range(20):
            assert all(p.poll() is None for p in procs)
            assert _rows(sqlite_lake, f"SELECT count(*) FROM metric_rows WHERE run_id = '{rid}'") == [(0,)]
            time.sleep(0.2)
    finally:
        claims.finish(ANALYSIS_PREFIX + rid, "the-test", committed=False)
        close(con)
    outs = [json.loads(_ok_proc(p)) for p in procs]
    assert all(o == outs[0] for o in outs)  # each analysis saw the same run
    n_metrics = sum(len(r["metrics"]) for r in outs[0])
    assert n_metrics > 0
    rows = _rows(sqlite_lake, "SELECT analyzer, name, count(*) FROM metric_rows "
                              f"WHERE run_id = '{rid}' GROUP BY ALL HAVING count(*) > 1")
    assert rows == []  # no metric stored twice
    assert _rows(sqlite_lake, f"SELECT count(*) FROM metric_rows WHERE run_id = '{rid}'") == [(n_metrics,)]
    with closing(sqlite3.connect(parse_lake_url(sqlite_lake).catalog_file)) as db:
        assert db.execute("SELECT count(*) FROM tracekit_claims WHERE run_id LIKE 'analysis:%'").fetchone() == (0,)
        # a reader of a rollback-journal catalog blocked the committer ("database is locked" for a minute)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def _ok_proc(proc: subprocess.Popen[str]) -> str:
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr
    return stdout


def test_readers_cannot_write_the_lake(sqlite_lake: str) -> None:
    res = run_cli("query", "CREATE TABLE x (a INT)", "--store", sqlite_lake)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1


def test_a_missing_lake_is_one_line(tmp_path: Path) -> None:
    res = run_cli("runs", "--store", _sqlite_url(tmp_path))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "tracekit lake init" in res.stderr


def _ingest_procs(url: str, batches: list[list[Path]]) -> list[subprocess.Popen[str]]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_STORE"}
    return [subprocess.Popen([sys.executable, "-c", "from tracekit.cli.main import main; main()", "ingest",
                              *map(str, batch), "--store", url, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for batch in batches]


def _wait_all(procs: list[subprocess.Popen[str]]) -> list[list[dict[str, object]]]:
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr
        out.append(json.loads(stdout))
    return out


def _concurrent_writers(url: str, tmp_path: Path, writers: int, runs_each: int) -> None:
    """``writers`` processes each ingest their own ``runs_each`` traces, and all of them also the
    same one trace, at once: every run exactly once, the shared one once."""
    copies = distinct_copies(tmp_path, writers * runs_each + 1)
    shared, own = copies[0], copies[1:]
    batches = [[shared, *own[i * runs_each:(i + 1) * runs_each]] for i in range(writers)]
    results = _wait_all(_ingest_procs(url, batches))
    created_shared = sum(bool(r[0]["created"]) for r in results)
    assert created_shared == 1  # one writer stored it; the others found it committed
    assert len({r[0]["run_id"] for r in results}) == 1
    n = writers * runs_each + 1
    assert _rows(url, "SELECT count(*), count(DISTINCT run_id) FROM run_meta") == [(n, n)]
    # every run whole: each has the sample's host events, none twice
    per_run = _rows(url, "SELECT count(*) FROM host_events GROUP BY run_id")
    assert len(per_run) == n and len({c for (c,) in per_run}) == 1


def test_sqlite_catalog_takes_several_local_writers(sqlite_lake: str, tmp_path: Path) -> None:
    _concurrent_writers(sqlite_lake, tmp_path, writers=2, runs_each=4)


def test_compaction_merges_files_and_changes_no_row(sqlite_lake: str, tmp_path: Path) -> None:
    _ok(run_cli("ingest", *map(str, distinct_copies(tmp_path, 6)), "--store", sqlite_lake))
    before = {v: _view_rows(sqlite_lake, v) for v in ("runs", "kernels", "ops", "ranks")}
    done = json.loads(_ok(run_cli("lake", "compact", sqlite_lake, "--json")))
    assert done["files_after"] < done["files_before"]
    assert {v: _view_rows(sqlite_lake, v) for v in before} == before


@pytest.fixture(scope="module")
def pg() -> Iterator[tuple[str, int]]:
    from lake_services import postgres

    with postgres() as server:
        yield server


def test_postgresql_catalog_takes_concurrent_writers(pg: tuple[str, int], tmp_path: Path) -> None:
    host, port = pg
    url = f"lake:postgresql://postgres@{host}:{port}/lake?data={tmp_path}/data"
    _ok(run_cli("lake", "init", url))
    _concurrent_writers(url, tmp_path, writers=4, runs_each=3)


def test_a_claim_that_meets_a_concurrently_committed_claim_is_retried(pg: tuple[str, int], tmp_path: Path) -> None:
    """A claim's ``INSERT … ON CONFLICT DO NOTHING`` that waits on another writer's uncommitted
    claim of the same run id fails with "could not serialize access" when that writer commits
    (DuckDB's postgres extension runs it in REPEATABLE READ): the claim must run again and see the
    other writer's claim (``busy``), not end the ingest with a traceback (CI, 4 writers)."""
    import threading

    import duckdb
    from lake_services import _as_postgres, _pg_bin

    from tracekit.lake.catalog import load_extensions
    from tracekit.lake.claims import PostgresClaims
    from tracekit.lake.url import parse_lake_url

    host, port = pg
    _psql(host, port, "createdb", "claims")
    url = parse_lake_url(f"lake:postgresql://postgres@{host}:{port}/claims?data={tmp_path}/data")
    con = duckdb.connect()
    load_extensions(con, url)
    claims = PostgresClaims(con, url)
    claims.create()

    def sql(query: str) -> str:
        return _psql(host, port, "psql", "-d", "claims", "-tAc", query).strip()

    other = subprocess.Popen(_as_postgres([_pg_bin("psql") or "psql", "-h", host, "-p", str(port), "-U", "postgres",
                                           "-d", "claims", "-v", "ON_ERROR_STOP=1"]),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert other.stdin is not None
    other.stdin.write("BEGIN; INSERT INTO tracekit_claims VALUES ('r1', 'claimed', 'other', "
                      "extract(epoch from clock_timestamp()));\n")
    other.stdin.flush()
    def until(query: str, what: str) -> None:
        deadline = time.monotonic() + 300  # a bound against a hang, not a timing assumption
        while sql(query) != "1":
            assert other.poll() is None, f"psql ended: {other.stderr.read() if other.stderr else ''}"
            assert time.monotonic() < deadline, f"never saw {what}"
            time.sleep(0.05)

    until("SELECT count(*) FROM pg_stat_activity WHERE datname = 'claims' AND state = 'idle in transaction'",
          "the other writer holding its uncommitted claim")
    verdicts: list[object] = []
    claimer = threading.Thread(target=lambda: verdicts.append(_verdict_or_error(claims, "r1")))
    claimer.start()
    until("SELECT count(*) FROM pg_stat_activity WHERE datname = 'claims' AND wait_event_type = 'Lock'",
          "our claim waiting on the other writer's row")
    other.stdin.write("COMMIT;\n")
    other.stdin.close()
    assert other.wait(timeout=60) == 0, other.stderr.read() if other.stderr else ""
    claimer.join(timeout=120)
    assert verdicts == ["busy"]  # the other writer holds it, alive: wait for it
    assert sql("SELECT state || ' ' || writer FROM tracekit_claims WHERE run_id = 'r1'") == "claimed other"
    con.close()


def test_only_postgresqls_own_concurrency_errors_are_retried() -> None:
    """The postgres extension's error quotes the statement before PostgreSQL's message: a claim's
    ``ON CONFLICT`` (or a writer id with "busy" in its host name) must not make a permission error
    or a missing table retried for a minute; a serialization failure or a deadlock is retried."""
    import duckdb

    from tracekit.lake.claims import _concurrent_update

    def failed(sql: str, error: str) -> duckdb.Error:
        return duckdb.Error(f'Failed to execute query "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ;\n{sql}": '
                            f"ERROR:  {error}\n")

    insert = ("INSERT INTO tracekit_claims VALUES ('r1', 'claimed', 'busy-host:1:ab', 1) "
              "ON CONFLICT (run_id) DO NOTHING")
    assert _concurrent_update(failed(insert, "could not serialize access due to concurrent update"))
    assert _concurrent_update(failed(insert, "deadlock detected"))
    assert not _concurrent_update(failed(insert, "permission denied for table tracekit_claims"))
    assert not _concurrent_update(failed(insert, 'relation "tracekit_claims" does not exist'))
    assert not _concurrent_update(duckdb.Error("IO Error: Unable to connect to Postgres (retry later)"))


def _verdict_or_error(claims: object, run_id: str) -> object:
    try:
        return claims.claim(run_id, "me", 600.0)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - the test shows what went wrong
        return repr(exc)


def _psql(host: str, port: int, *args: str) -> str:
    """Run PostgreSQL's client program ``args[0]`` against the test server; its output."""
    from lake_services import _as_postgres, _pg_bin

    return subprocess.run(_as_postgres([_pg_bin(args[0]) or args[0], "-h", host, "-p", str(port), "-U", "postgres",
                                        *args[1:]]), check=True, capture_output=True, text=True, timeout=60).stdout


def test_the_dashboard_attaches_again_when_its_catalog_connection_is_killed(
        pg: tuple[str, int], tmp_path: Path) -> None:
    """The dashboard keeps its lake attached between pages; when PostgreSQL ends its catalog
    session (a restart, an idle timeout) the next page still renders, and when the attached
    connection cannot read at all the pool drops it and attaches again instead of showing an
    error."""
    from tracekit.dashboard import app

    host, port = pg
    _psql(host, port, "createdb", "killed")
    url = f"lake:postgresql://postgres@{host}:{port}/killed?data={tmp_path}/data"
    _ok(run_cli("lake", "init", url))
    [trace] = distinct_copies(tmp_path, 1)
    _ok(run_cli("ingest", str(trace), "--store", url))
    [(run,)] = _rows(url, "SELECT run_id FROM run_meta")
    assert run in str(app.render_page(url, "/", ""))
    killed = _psql(host, port, "psql", "-d", "postgres", "-tAc",
                   "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                   "WHERE datname = 'killed'")
    assert int(killed) >= 1  # the dashboard's catalog session(s) ended under it
    page = str(app.render_page(url, "/", ""))  # DuckDB's postgres extension opens a new session
    assert "tk-error" not in page and run in page
    dead = app.LAKE_READERS.attached(url)
    assert dead is not None
    dead.close()  # a connection that can no longer read at all: its cursors fail on BEGIN
    page = str(app.render_page(url, "/", ""))
    assert "tk-error" not in page and run in page
    assert app.LAKE_READERS.attached(url) not in (None, dead)  # dropped and attached again
    app.LAKE_READERS.close()


def test_postgresql_catalog_with_data_on_s3(pg: tuple[str, int], tmp_path: Path) -> None:
    from lake_services import s3

    host, port = pg
    with s3("lake") as env:
        url = f"lake:postgresql://postgres@{host}:{port}/lake_s3?data=s3://lake/tracekit/"
        subprocess.run(["runuser", "-u", "postgres", "--", "createdb", "-h", host, "-p", str(port), "lake_s3"]
                       if os.geteuid() == 0 else ["createdb", "-h", host, "-p", str(port), "-U", "postgres", "lake_s3"],
                       check=True, capture_output=True)
        assert run_cli("lake", "init", url, env=env).returncode == 0
        copies = distinct_copies(tmp_path, 3)
        ids = json.loads(_ok(run_cli("ingest", *map(str, copies), "--store", url, "--json", env=env)))
        assert len({r["run_id"] for r in ids}) == 3
        res = run_cli("query", "SELECT count(*) AS n_runs FROM runs", "--store", url, env=env)
        assert res.returncode == 0 and "3" in res.stdout


def test_dashboard_pages_render_from_a_lake_as_from_a_file(sqlite_lake: str, tmp_path: Path) -> None:
    from tracekit.dashboard.app import render_page

    file_store = tmp_path / "file.duckdb"
    copies = distinct_copies(tmp_path, 2)
    for store in (sqlite_lake, str(file_store)):
        _ok(run_cli("ingest", *map(str, copies), "--store", store, "--workload", "w"))
    a, b = (r[0] for r in _rows(str(file_store), "SELECT run_id FROM run_meta ORDER BY run_id"))
    for page, search in (("/", ""), ("/weekly", ""), ("/run", f"?run={a}"), ("/compare", f"?a={a}&b={b}")):
        on_lake, on_file = (str(render_page(store, page, search)) for store in (sqlite_lake, file_store))
        assert "tk-error" not in on_lake and (page == "/weekly" or a in on_lake), page
        assert on_lake.replace(sqlite_lake, "S") == on_file.replace(str(file_store), "S"), page


def test_the_dashboard_keeps_one_lake_connection_and_sees_each_new_commit(sqlite_lake: str, tmp_path: Path) -> None:
    """Attaching a lake costs 0.3-1.2 s, so the dashboard attaches once per process and reads each
    page through a cursor in one transaction; a run another process commits in between is on the
    next page (the cursor's transaction starts at the latest snapshot)."""
    from tracekit.dashboard import app

    first, second = distinct_copies(tmp_path, 2)
    _ok(run_cli("ingest", str(first), "--store", sqlite_lake))
    [(a,)] = _rows(sqlite_lake, "SELECT run_id FROM run_meta")
    page = str(app.render_page(sqlite_lake, "/", ""))
    base = app.LAKE_READERS.attached(sqlite_lake)
    assert a in page
    _ok(run_cli("ingest", str(second), "--store", sqlite_lake))  # another process commits
    [(b,)] = _rows(sqlite_lake, f"SELECT run_id FROM run_meta WHERE run_id <> '{a}'")
    assert b not in page
    page = str(app.render_page(sqlite_lake, "/", ""))
    assert a in page and b in page and "tk-error" not in page
    assert str(app.render_page(sqlite_lake, "/run", f"?run={b}")).count(b) >= 1
    assert base is not None and app.LAKE_READERS.attached(sqlite_lake) is base  # attached once
    [idle] = app.LAKE_READERS._lakes[sqlite_lake].idle  # one cursor, reused page after page
    # the Runs page's TEMP table run_hardware went with its page: the next page builds its own
    assert idle.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)


def test_dashboard_pages_rendered_from_several_threads_at_once_read_the_lake_alike(
        sqlite_lake: str, tmp_path: Path) -> None:
    """Dash serves callbacks from several threads: pages rendered at once through the one attached
    lake each get their own cursor and give what a page rendered alone gives."""
    from concurrent.futures import ThreadPoolExecutor

    from tracekit.dashboard import app

    a, b = distinct_copies(tmp_path, 2)
    _ok(run_cli("ingest", str(a), str(b), "--store", sqlite_lake, "--workload", "w"))
    run = _rows(sqlite_lake, "SELECT min(run_id) FROM run_meta")[0][0]
    pages = [("/", ""), ("/weekly", "?workload=w"), ("/run", f"?run={run}")] * 6
    alone = {page: str(app.render_page(sqlite_lake, *page)) for page in set(pages)}
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda page: (page, str(app.render_page(sqlite_lake, *page))), pages))
    assert all(html == alone[page] and "tk-error" not in html for page, html in together)
    assert len(app.LAKE_READERS._lakes[sqlite_lake].idle) <= 4  # cursors reused, at most one per thread
    app.LAKE_READERS.close()


def test_pure_python_kineto_on_duckdb_1_is_refused_not_wrong(tmp_path: Path) -> None:
    """DuckDB 1.x's read_json parses epoch µs through a double: the pure-Python Kineto reader would
    store wrong nanoseconds, so on 1.x it refuses in one line and the store stays absent."""
    import duckdb

    if not duckdb.__version__.startswith("1."):
        pytest.skip(f"DuckDB {duckdb.__version__} reads the pure path's timestamps exactly")
    store = tmp_path / "s.duckdb"
    res = run_cli("ingest", str(SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"), "--store", str(store),
                  env={"TRACEKIT_PURE_PYTHON": "1"})
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: TRACEKIT_PURE_PYTHON: the pure-Python Kineto reader needs DuckDB 2")
    assert not store.exists()


_ROLLUPS = ("n_device_events", "n_host_events", "device_time_ns", "main_rank", "main_device")


def _lake_sql(url: str, *statements: str) -> None:
    from tracekit.store import close, connect

    con = connect(url)
    try:
        for sql in statements:
            con.execute(sql)
    finally:
        close(con)


def test_an_older_writers_run_reads_the_same_in_the_run_list(sqlite_lake: str) -> None:
    """A pre-schema-5 writer's rows land with NULL rollups (it does not know the columns): the run
    list counts such a run's events instead, and prints what the rollups would have said."""
    _ok(run_cli("ingest", str(SAMPLES / "amd_synthetic.rpd"), str(SAMPLES / "amd_synthetic_rocpd"),
                "--store", sqlite_lake))
    before = json.loads(_ok(run_cli("runs", "-f", "json", "--store", sqlite_lake)))
    assert all(r["device_events"] > 0 for r in before)
    old = before[0]["run_id"]
    _lake_sql(sqlite_lake, f"UPDATE run_meta SET {', '.join(c + ' = NULL' for c in _ROLLUPS)} WHERE run_id = '{old}'")
    assert _rows(sqlite_lake, "SELECT count(*) FROM runs WHERE n_device_events IS NULL") == [(1,)]
    assert json.loads(_ok(run_cli("runs", "-f", "json", "--store", sqlite_lake))) == before


def test_a_schema_4_lake_is_migrated_by_its_next_writer(sqlite_lake: str) -> None:
    """A lake written at schema 4 gains the rollup columns (schema 5) and the request sessions and
    server metrics (schema 6), additively and recorded in the lake, when the next writer first
    commits, with the rollups of the runs it held computed."""
    from tracekit.store import SCHEMA_VERSION

    _ok(run_cli("ingest", str(SAMPLES / "amd_synthetic.rpd"), "--store", sqlite_lake))
    _lake_sql(sqlite_lake, *(f"ALTER TABLE run_meta DROP COLUMN {c}" for c in _ROLLUPS),
              *(f"ALTER TABLE request_rows DROP COLUMN {c}" for c in ("session_id", "turn", "cached_tokens")),
              "DROP TABLE server_metric_rows", "UPDATE tracekit_schema SET version = 4")
    _ok(run_cli("ingest", str(SAMPLES / "amd_synthetic_rocpd"), "--store", sqlite_lake))
    assert _rows(sqlite_lake, "SELECT max(version) FROM tracekit_schema") == [(SCHEMA_VERSION,)]
    got = _rows(sqlite_lake, """SELECT r.n_device_events = count(d.run_id), r.device_time_ns = sum(d.dur_ns)
                                FROM runs r JOIN device_activity d USING (run_id) GROUP BY r.run_id, r.n_device_events,
                                r.device_time_ns""")
    assert got == [(True, True), (True, True)]
