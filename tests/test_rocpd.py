"""rocprofv3 rocpd (SQLite, schema 3) ingest, on the rocpd-v3-sample in ../shared/corpus/rocprof.

Every expected number is computed here from the database itself with ``sqlite3`` (reading the
UUID-suffixed physical tables, not tracekit's code path through the views) or read from the
sample's ``expected_totals.json``; none is copied from tracekit's output.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS
from helpers import run_cli, sha256

import tracekit
from tracekit.errors import TraceInputError
from tracekit.parsers.rocpd import RocpdParser

SAMPLE_DIR = CORPUS / "rocprof" / "rocpd-v3-sample"
SAMPLE = SAMPLE_DIR / "vllm_mi300x_decode_results.db"
EXPECTED = SAMPLE_DIR / "expected_totals.json"
RPD_FILE = CORPUS / "rocprof" / "rpd" / "matmul_result.rpd"

needs_rocpd_sample = pytest.mark.skipif(
    not SAMPLE.is_file(), reason=f"rocpd sample not found at {SAMPLE} (only in the workspace and CI)"
)
pytestmark = needs_rocpd_sample

_UUID = re.compile(r"_[0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12}$")


# ---------------------------------------------------------------------------------------------
# The oracle: plain sqlite3 on the suffixed tables


class Oracle:
    def __init__(self, path: Path) -> None:
        self.con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        names = [r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        self.t: dict[str, str] = {}
        for n in names:
            m = _UUID.search(n)
            if m:
                self.t[n[: m.start()]] = f'"{n}"'

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql.format(**self.t)).fetchall()

    def close(self) -> None:
        self.con.close()


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    o = Oracle(SAMPLE)
    yield o
    o.close()


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return dict(json.loads(EXPECTED.read_text()))


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
    store = tmp_path_factory.mktemp("rocpd") / "store.duckdb"
    res = tracekit.ingest([SAMPLE], store=store)[0]
    assert res.created and res.format == "rocpd" and res.vendor == "amd"
    con = duckdb.connect(str(store), read_only=True)
    yield con, res.run_id
    con.close()


def q(con: duckdb.DuckDBPyConnection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return con.execute(sql, list(params)).fetchall()


# ---------------------------------------------------------------------------------------------
# One database


def test_kernel_counts_and_durations(ingested: tuple[duckdb.DuckDBPyConnection, str], oracle: Oracle,
                                     expected: dict[str, Any]) -> None:
    con, run = ingested
    want_n = oracle.rows("SELECT count(*) FROM {rocpd_kernel_dispatch}")[0][0]
    want = {
        name: (n, total)
        for name, n, total in oracle.rows(
            """SELECT s.display_name, count(*), sum(k."end" - k.start)
               FROM {rocpd_kernel_dispatch} k JOIN {rocpd_info_kernel_symbol} s ON s.id = k.kernel_id
               GROUP BY 1"""
        )
    }
    got = {
        name: (n, total)
        for name, n, total in q(con, "SELECT name, count(*), sum(dur_ns) FROM kernels "
                                     "WHERE run_id = ? AND category = 'kernel' GROUP BY 1", run)
    }
    assert sum(n for n, _ in got.values()) == want_n == expected["kernel_dispatches"]
    assert got == want
    assert len(got) == expected["distinct_kernels"]
    assert sum(t for _, t in got.values()) == expected["kernel_time_ns"]
    for name, k in expected["per_kernel"].items():
        assert got[name] == (k["dispatches"], k["total_duration_ns"]), name


def test_dispatch_columns(ingested: tuple[duckdb.DuckDBPyConnection, str], oracle: Oracle) -> None:
    con, run = ingested
    want = {
        r[0]: r[1:]
        for r in oracle.rows(
            """SELECT k.dispatch_id, e.stack_id, k.start, k.queue_id, k.stream_id, k.tid,
                      k.workgroup_size_x, k.workgroup_size_y, k.workgroup_size_z, k.grid_size_x, k.grid_size_y, k.grid_size_z,
                      k.group_segment_size, k.private_segment_size,
                      s.arch_vgpr_count, s.accum_vgpr_count, s.sgpr_count, a.type_index, k.agent_id
               FROM {rocpd_kernel_dispatch} k
               JOIN {rocpd_event} e ON e.id = k.event_id
               JOIN {rocpd_info_kernel_symbol} s ON s.id = k.kernel_id
               JOIN {rocpd_info_agent} a ON a.id = k.agent_id"""
        )
    }
    got = {
        r[0]: r[1:]
        for r in q(
            con,
            """SELECT dispatch_id, correlation_id, start_ns, queue_id, stream, tid, block_x, block_y,
                      block_z, grid_x,
                      grid_y, grid_z, shared_mem_bytes, scratch_bytes, vgpr_count, accum_vgpr_count,
                      sgpr_count, device, args
               FROM device_activity WHERE run_id = ? AND category = 'kernel'""",
            run,
        )
    }
    assert set(got) == set(want)
    for did, w in want.items():
        g = got[did]
        corr, start, queue, stream, tid, wx, wy, wz, gx, gy, gz, lds, scratch, vgpr, agpr, sgpr, dev, agent = w
        assert g[0] == corr and g[1] == start
        assert (g[2], g[3], g[4]) == (str(queue), str(stream), str(tid))
        # rocpd grid sizes are work-items; the store has workgroups
        assert g[5:8] == (wx, wy, wz)
        assert g[8:11] == (math.ceil(gx / wx), math.ceil(gy / wy), math.ceil(gz / wz))
        assert g[11:16] == (lds, scratch, vgpr, agpr, sgpr)
        assert g[16] == dev  # HIP index = the GPU agent's type_index
        assert json.loads(g[17])["agent_id"] == agent


def test_memory_copies(ingested: tuple[duckdb.DuckDBPyConnection, str], oracle: Oracle,
                       expected: dict[str, Any]) -> None:
    con, run = ingested
    want = {
        name: (n, size, dur)
        for name, n, size, dur in oracle.rows(
            """SELECT s.string, count(*), sum(m.size), sum(m."end" - m.start)
               FROM {rocpd_memory_copy} m JOIN {rocpd_string} s ON s.id = m.name_id GROUP BY 1"""
        )
    }
    got = {
        name: (n, size, dur)
        for name, n, size, dur in q(
            con, "SELECT kind, count(*), sum(bytes), sum(dur_ns) FROM kernels "
                 "WHERE run_id = ? AND category = 'memcpy' GROUP BY 1", run)
    }
    assert got == want
    assert {k: v[0] for k, v in got.items()} == expected["memory_copies_by_direction"]
    assert {k: v[1] for k, v in got.items()} == expected["memory_copy_bytes_by_direction"]
    assert sum(v[1] for v in got.values()) == expected["memory_copy_bytes"]


def test_api_calls_markers_and_launch_links(ingested: tuple[duckdb.DuckDBPyConnection, str], oracle: Oracle,
                                            expected: dict[str, Any]) -> None:
    con, run = ingested
    api = dict(q(con, "SELECT name, count(*) FROM runtime_calls WHERE run_id = ? GROUP BY 1", run))
    assert api == expected["hip_api_by_function"]
    want_api = Counter(
        dict(oracle.rows(
            """SELECT s.string, count(*) FROM {rocpd_region} r JOIN {rocpd_event} e ON e.id = r.event_id
               JOIN {rocpd_string} c ON c.id = e.category_id JOIN {rocpd_string} s ON s.id = r.name_id
               WHERE c.string NOT LIKE 'MARKER%' GROUP BY 1"""))
    )
    assert api == want_api
    markers = dict(q(con, "SELECT name, count(*) FROM annotations WHERE run_id = ? GROUP BY 1", run))
    assert markers == expected["marker_by_message"]
    want_markers = Counter(
        json.loads(x)["message"]
        for (x,) in oracle.rows(
            """SELECT e.extdata FROM {rocpd_region} r JOIN {rocpd_event} e ON e.id = r.event_id
               JOIN {rocpd_string} c ON c.id = e.category_id WHERE c.string LIKE 'MARKER%'""")
    )
    assert markers == want_markers
    # HIP API call -> dispatch by correlation id
    via = dict(q(con, "SELECT api_name, count(*) FROM launches WHERE run_id = ? AND category = 'kernel' "
                      "GROUP BY 1", run))
    want_via = dict(oracle.rows(
        """SELECT s.string, count(*) FROM {rocpd_kernel_dispatch} k
           JOIN {rocpd_event} e ON e.id = k.event_id JOIN {rocpd_region} r ON r.id = e.stack_id
           JOIN {rocpd_string} s ON s.id = r.name_id GROUP BY 1"""))
    assert via == want_via
    assert via["hipGraphLaunch"] == expected["graph_launched_dispatches"]
    n_graph = q(con, "SELECT sum(n_kernels) FROM graph_launches WHERE run_id = ?", run)[0][0]
    assert n_graph == expected["graph_launched_dispatches"]


def test_counters(ingested: tuple[duckdb.DuckDBPyConnection, str], oracle: Oracle,
                  expected: dict[str, Any]) -> None:
    con, run = ingested
    got: dict[tuple[str, str], float] = {
        (k, c): v
        for k, c, v in q(con, "SELECT kernel_name, counter, sum(value) FROM counters WHERE run_id = ? "
                              "GROUP BY 1, 2", run)
    }
    want: dict[tuple[str, str], float] = defaultdict(float)
    for name, k in expected["per_kernel"].items():
        for counter, v in k["counters_sum"].items():
            want[(name, counter)] += v
    assert got == want
    n_rows, n_dispatch, n_null_pass = q(
        con, "SELECT count(*), count(DISTINCT dispatch_id), count(*) FILTER (WHERE pass IS NULL) "
             "FROM counters WHERE run_id = ?", run)[0]
    assert n_dispatch == expected["dispatches_with_counters"]
    assert n_rows == n_null_pass == expected["counter_collection_csv_rows"]
    # per (dispatch, counter), against a SUM over the per-instance rows done here
    want_rows = {
        (d, c): v
        for d, c, v in oracle.rows(
            """SELECT k.dispatch_id, i.name, sum(p.value) FROM {rocpd_pmc_event} p
               JOIN {rocpd_kernel_dispatch} k ON k.event_id = p.event_id
               JOIN {rocpd_info_pmc} i ON i.id = p.pmc_id GROUP BY 1, 2""")
    }
    got_rows = {(d, c): v for d, c, v in q(
        con, "SELECT dispatch_id, counter, value FROM counters WHERE run_id = ?", run)}
    assert got_rows == want_rows
    corr = q(con, """SELECT count(*) FROM counters c JOIN kernels k USING (run_id, rank, dispatch_id)
                     WHERE c.run_id = ? AND (c.correlation_id <> k.correlation_id OR c.device <> k.device)""",
             run)[0][0]
    assert corr == 0


def test_devices_and_rank(ingested: tuple[duckdb.DuckDBPyConnection, str], oracle: Oracle,
                          expected: dict[str, Any]) -> None:
    con, run = ingested
    agents = oracle.rows("SELECT type_index, product_name, name, extdata FROM {rocpd_info_agent} "
                         "WHERE type = 'GPU'")
    got = {r[0]: r[1:] for r in q(
        con, "SELECT device, name, vendor, arch, compute_units, warp_size, xcc_count, clock_mhz, "
             "simd_per_cu, max_waves_per_cu, memory_bytes FROM devices WHERE run_id = ?", run)}
    assert set(got) == {a[0] for a in agents}
    for idx, product, gfx, ext_text in agents:
        ext = json.loads(ext_text)
        mem = sum(b["size_in_bytes"] for b in ext["mem_banks"] if b["heap_type"] in (1, 2))
        assert got[idx] == (product, "amd", gfx, ext["cu_count"], ext["wave_front_size"], ext["num_xcc"],
                            float(ext["max_engine_clk_fcompute"]), ext["simd_per_cu"],
                            ext["max_waves_per_cu"], mem)
    # the device every dispatch ran on: the MI300X of the README (gfx942, 304 CU, 8 XCC, 2100 MHz)
    (dev,) = {d for (d,) in q(con, "SELECT DISTINCT device FROM kernels WHERE run_id = ?", run)}
    assert got[dev][2:7] == ("gfx942", 304, 64, 8, 2100.0)
    assert q(con, "SELECT vendor, device_name FROM runs WHERE run_id = ?", run)[0] == ("amd", "AMD Instinct MI300X")

    n_disp = oracle.rows("SELECT count(*) FROM {rocpd_kernel_dispatch}")[0][0]
    n_copy = oracle.rows("SELECT count(*) FROM {rocpd_memory_copy}")[0][0]
    n_reg = oracle.rows("SELECT count(*) FROM {rocpd_region}")[0][0]
    lo, hi = oracle.rows(
        """SELECT min(s), max(e) FROM (SELECT start s, "end" e FROM {rocpd_kernel_dispatch}
           UNION ALL SELECT start, "end" FROM {rocpd_memory_copy}
           UNION ALL SELECT start, "end" FROM {rocpd_region})""")[0]
    pid, host = oracle.rows("SELECT p.pid, n.hostname FROM {rocpd_info_process} p "
                            "JOIN {rocpd_info_node} n ON n.id = p.nid")[0]
    rank = q(con, "SELECT rank, rank_source, host, runtime, n_trace_events, n_other_skipped, first_ns, "
                  "last_ns, trace_id, file_sha256, trace_metadata FROM ranks WHERE run_id = ?", run)
    assert len(rank) == 1
    r = rank[0]
    assert r[:8] == (0, "process", host, "hip", n_disp + n_copy + n_reg, 0, lo, hi)
    assert n_disp + n_copy + n_reg == expected["kernel_dispatches"] + expected["memory_copies"] + expected["regions"]
    assert r[8] == expected["guid"] and r[9] == sha256(SAMPLE)
    meta = json.loads(r[10])
    assert meta["pid"] == pid == expected["pid"] and meta["schema_version"] == expected["schema_version"]
    assert "environment" not in json.dumps(meta)  # the process environment is never copied
    # host events carry the process's pid/tid
    assert q(con, "SELECT DISTINCT pid FROM host_events WHERE run_id = ?", run) == [(str(pid),)]


# ---------------------------------------------------------------------------------------------
# Several processes


def _set_pid(path: Path, pid: int) -> None:
    con = sqlite3.connect(path)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for t in tables:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        if "pid" in cols:
            con.execute(f'UPDATE "{t}" SET pid = ?', (pid,))
        if t.startswith("rocpd_info_process"):
            con.execute(f'UPDATE "{t}" SET id = ?', (pid,))
    con.commit()
    con.close()


def _ranks(store: Path, run: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return q(con, """SELECT r.rank, r.path, r.file_sha256, CAST(json_extract_string(r.trace_metadata, '$.pid') AS BIGINT),
                                (SELECT count(*) FROM kernels k WHERE k.run_id = r.run_id AND k.rank = r.rank
                                   AND k.category = 'kernel'),
                                (SELECT count(DISTINCT pid) FROM host_events h
                                   WHERE h.run_id = r.run_id AND h.rank = r.rank)
                         FROM ranks r WHERE r.run_id = ? ORDER BY r.rank""", run)
    finally:
        con.close()


def test_directory_of_processes_ranked_by_pid(tmp_path: Path, oracle: Oracle) -> None:
    n = oracle.rows("SELECT count(*) FROM {rocpd_kernel_dispatch}")[0][0]
    d = tmp_path / "prof"
    d.mkdir()
    # file-name order (a, b) is the opposite of pid order
    a, b = d / "a_results.db", d / "b_results.db"
    shutil.copyfile(SAMPLE, a)
    shutil.copyfile(SAMPLE, b)
    _set_pid(a, 999_999)
    store = tmp_path / "s.duckdb"
    res = tracekit.ingest([d], store=store)[0]
    assert res.created and res.format == "rocpd" and res.n_files == 2
    ranks = _ranks(store, res.run_id)
    pid_b = oracle.rows("SELECT pid FROM {rocpd_info_process}")[0][0]
    assert [(r[0], Path(r[1]).name, r[2], r[3], r[4], r[5]) for r in ranks] == [
        (0, "b_results.db", sha256(b), pid_b, n, 1),
        (1, "a_results.db", sha256(a), 999_999, n, 1),
    ]


def test_same_pid_twice_keeps_file_order(tmp_path: Path, oracle: Oracle) -> None:
    """Two files of one pid (a copied file, or one pid on two hosts): ranks follow file-name order."""
    n = oracle.rows("SELECT count(*) FROM {rocpd_kernel_dispatch}")[0][0]
    d = tmp_path / "prof"
    d.mkdir()
    for name in ("y_results.db", "x_results.db"):
        shutil.copyfile(SAMPLE, d / name)
    store = tmp_path / "s.duckdb"
    res = tracekit.ingest([d], store=store)[0]
    ranks = _ranks(store, res.run_id)
    assert [(r[0], Path(r[1]).name, r[4]) for r in ranks] == [(0, "x_results.db", n), (1, "y_results.db", n)]


# ---------------------------------------------------------------------------------------------
# Recognition and refusals


def _make_sqlite(path: Path, *statements: str) -> Path:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()
    return path


def test_schema_4_refused(tmp_path: Path) -> None:
    p = _make_sqlite(
        tmp_path / "123_results.db",
        "CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT)",
        "INSERT INTO rocpd_metadata (tag, value) VALUES ('schema_version', '4.0.0')",
        "CREATE TABLE rocpd_timestamp (id INTEGER PRIMARY KEY, timestamp BIGINT)",
    )
    assert RocpdParser().sniff(p)
    with pytest.raises(TraceInputError, match=r"rocpd schema version 4\.0\.0 is not supported yet"):
        tracekit.ingest([p], store=tmp_path / "s.duckdb")
    assert not (tmp_path / "s.duckdb").exists()


def test_sniff(tmp_path: Path) -> None:
    parser = RocpdParser()
    assert parser.sniff(SAMPLE)
    rpd_like = _make_sqlite(
        tmp_path / "trace.db",
        "CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY, tag TEXT, value TEXT)",
        "CREATE TABLE rocpd_op (id INTEGER PRIMARY KEY, gpuId INTEGER)",
    )
    assert not parser.sniff(rpd_like)
    if RPD_FILE.is_file():
        assert not parser.sniff(RPD_FILE)
    other = _make_sqlite(tmp_path / "other.db", "CREATE TABLE t (a)")
    assert not parser.sniff(other)
    with pytest.raises(TraceInputError, match="neither rocpd nor RPD"):
        tracekit.ingest([other], store=tmp_path / "s.duckdb")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all")
    assert not parser.sniff(junk)
    with pytest.raises(TraceInputError, match="not a SQLite database"):
        tracekit.ingest([junk], store=tmp_path / "s.duckdb")


def test_corrupt_db_cli_one_line_exit_2_store_untouched(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    tracekit.ingest([SAMPLE], store=store)
    before = sha256(store)
    data = SAMPLE.read_bytes()
    bad = tmp_path / "482913_results.db"
    bad.write_bytes(data[: len(data) // 10])
    res = run_cli("ingest", str(bad), "--store", str(store))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: {bad}: ") and "SQLite" in lines[0], lines[0]
    assert sha256(store) == before
    # next to a good file in a directory it is not silently skipped
    d = tmp_path / "prof"
    d.mkdir()
    shutil.copyfile(SAMPLE, d / "1_results.db")
    shutil.copyfile(bad, d / "2_results.db")
    with pytest.raises(TraceInputError, match="2_results.db"):
        tracekit.ingest([d], store=store)
    assert sha256(store) == before


def _merged_db(tmp: Path, pid: int) -> Path:
    """One file holding two processes, as ``rocpd merge`` makes: the sample's tables plus a copy
    of them under another UUID suffix, guid and pid; no unsuffixed views (the reader unions the
    suffixed tables itself)."""
    other = tmp / "other.db"
    shutil.copyfile(SAMPLE, other)
    con = sqlite3.connect(other)
    for (v,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        con.execute(f'DROP VIEW "{v}"')
    old = next(_UUID.search(n).group(0) for (n,) in con.execute("SELECT name FROM sqlite_master")
               if _UUID.search(n))
    new = "_11111111_2222_7333_8444_555555555555"
    for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        if t.endswith(old):
            con.execute(f'ALTER TABLE "{t}" RENAME TO "{t[: -len(old)] + new}"')
    con.commit()
    con.close()
    _set_pid(other, pid)
    con = sqlite3.connect(other)
    for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        if "guid" in [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]:
            con.execute(f'UPDATE "{t}" SET guid = ?', (new[1:].replace("_", "-"),))
    con.commit()
    con.close()
    merged = tmp / "merged_results.db"
    shutil.copyfile(SAMPLE, merged)
    con = sqlite3.connect(merged)
    for (v,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        con.execute(f'DROP VIEW "{v}"')
    con.execute("ATTACH DATABASE ? AS o", (str(other),))
    for (t,) in con.execute("SELECT name FROM o.sqlite_master WHERE type = 'table'").fetchall():
        if t.endswith(new):
            con.execute(f'CREATE TABLE "{t}" AS SELECT * FROM o."{t}"')
    con.commit()
    con.close()
    other.unlink()
    return merged


def test_merged_database_one_rank_per_process(tmp_path: Path, oracle: Oracle, expected: dict[str, Any]) -> None:
    n = oracle.rows("SELECT count(*) FROM {rocpd_kernel_dispatch}")[0][0]
    total = oracle.rows("SELECT sum(\"end\" - start) FROM {rocpd_kernel_dispatch}")[0][0]
    pid = oracle.rows("SELECT pid FROM {rocpd_info_process}")[0][0]
    merged = _merged_db(tmp_path, 111)
    store = tmp_path / "s.duckdb"
    res = tracekit.ingest([merged], store=store)[0]
    ranks = _ranks(store, res.run_id)
    assert [(r[0], r[2], r[3], r[4], r[5]) for r in ranks] == [
        (0, sha256(merged), 111, n, 1), (1, sha256(merged), pid, n, 1)]
    con = duckdb.connect(str(store), read_only=True)
    try:
        per_rank = q(con, """SELECT rank, count(*), sum(dur_ns), count(DISTINCT name) FROM kernels
                             WHERE category = 'kernel' GROUP BY 1 ORDER BY 1""")
        assert per_rank == [(0, n, total, expected["distinct_kernels"]), (1, n, total, expected["distinct_kernels"])]
        counters = q(con, "SELECT rank, count(*) FROM counters GROUP BY 1 ORDER BY 1")
        assert counters == [(0, expected["counter_collection_csv_rows"]), (1, expected["counter_collection_csv_rows"])]
        assert q(con, "SELECT rank, count(*) FROM devices GROUP BY 1 ORDER BY 1") == [(0, 8), (1, 8)]
    finally:
        con.close()
