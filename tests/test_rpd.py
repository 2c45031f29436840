"""RPD (ROCm/rocmProfileData rpd_tracer SQLite) on the two real corpus traces.

Every expected number is computed here with sqlite3 straight from the RPD tables
(rocpd_op, rocpd_string, rocpd_api, rocpd_api_ops, rocpd_kernelapi, rocpd_copyapi), never taken
from tracekit's output.
"""

from __future__ import annotations

import gzip
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS
from helpers import run_cli, sha256

from tracekit.errors import TraceInputError
from tracekit.ingest import ingest
from tracekit.parsers import get_parser

RPD_DIR = CORPUS / "rocprof" / "rpd"
VLLM_GZ = RPD_DIR / "vllm_mi300_mytrace.rpd.gz"
MATMUL = RPD_DIR / "matmul_result.rpd"
ROCPD_V3 = CORPUS / "rocprof" / "rocpd-v3-sample" / "vllm_mi300x_decode_results.db"

pytestmark = pytest.mark.skipif(
    not VLLM_GZ.is_file() or not MATMUL.is_file(),
    reason=f"RPD corpus not found at {RPD_DIR} (only in the project's workspace and CI)",
)

KERNEL_OPS = "('KernelExecution', 'Task')"


# ---------------------------------------------------------------------------------------------
# Independent expectations, straight from the SQLite file


def q(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def expected_kernels(db: Path) -> dict[str, tuple[int, int]]:
    """kernel name -> (dispatches, total ns), direct launches and HIP-graph kernels alike."""
    rows = q(db, f"""SELECT d.string, count(*), sum(o."end" - o.start) FROM rocpd_op o
                     JOIN rocpd_string d ON d.id = o.description_id
                     JOIN rocpd_string t ON t.id = o.opType_id
                     WHERE t.string IN {KERNEL_OPS} GROUP BY d.string""")
    return {name: (n, total) for name, n, total in rows}


def expected_copies(db: Path) -> dict[str, tuple[int, int | None]]:
    """copy opType -> (ops, bytes from rocpd_copyapi.size through rocpd_api_ops)."""
    rows = q(db, """SELECT t.string, count(*), sum(c.size) FROM rocpd_op o
                    JOIN rocpd_string t ON t.id = o.opType_id
                    LEFT JOIN rocpd_api_ops ao ON ao.op_id = o.id
                    LEFT JOIN rocpd_copyapi c ON c.api_ptr_id = ao.api_id
                    WHERE t.string LIKE 'Copy%' GROUP BY t.string""")
    return {t: (n, b) for t, n, b in rows}


def api_names(db: Path) -> dict[str, int]:
    rows = q(db, """SELECT n.string, count(*) FROM rocpd_api a JOIN rocpd_string n ON n.id = a.apiName_id
                    GROUP BY n.string""")
    return dict(rows)


# ---------------------------------------------------------------------------------------------
# The store, ingested once for the module


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("rpd")
    plain = tmp / "vllm_mi300_mytrace.rpd"  # the test's own gunzipped copy for sqlite3
    with gzip.open(VLLM_GZ, "rb") as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    store = tmp / "store.duckdb"
    res = ingest([VLLM_GZ, MATMUL, plain], store)
    runs = {"vllm": res[0].run_id, "matmul": res[1].run_id, "vllm_plain": res[2].run_id}
    assert len(set(runs.values())) == 3
    con = duckdb.connect(str(store), read_only=True)
    try:
        yield {"con": con, "runs": runs, "vllm": plain, "store": store, "results": res}
    finally:
        con.close()


def rows(env: dict[str, Any], run: str, sql: str) -> list[tuple[Any, ...]]:
    return list(env["con"].execute(sql, {"run": env["runs"][run]}).fetchall())


# ---------------------------------------------------------------------------------------------
# vLLM on MI300 (HIP graphs)


@pytest.mark.parametrize("run", ["vllm", "vllm_plain"])
def test_vllm_kernels_include_graph_kernels(env: dict[str, Any], run: str) -> None:
    db = env["vllm"]
    want = expected_kernels(db)
    got = {
        name: (n, total)
        for name, n, total in rows(env, run, """SELECT name, count(*), sum(dur_ns) FROM kernels
                                                WHERE run_id = $run AND category = 'kernel' GROUP BY name""")
    }
    assert got == want
    n_kernels = sum(n for n, _ in want.values())
    # RPD's own `kernel` view (inner join on rocpd_kernelapi) leaves the HIP-graph kernels out
    (view_count,) = q(db, "SELECT count(*) FROM kernel")[0]
    (graph_kernels,) = q(db, f"""SELECT count(*) FROM rocpd_op o
                                 JOIN rocpd_string t ON t.id = o.opType_id
                                 JOIN rocpd_api_ops ao ON ao.op_id = o.id
                                 JOIN rocpd_api a ON a.id = ao.api_id
                                 JOIN rocpd_string n ON n.id = a.apiName_id
                                 WHERE n.string = 'hipGraphLaunch' AND t.string IN {KERNEL_OPS}""")[0]
    assert graph_kernels > 0
    assert view_count < n_kernels
    assert view_count + graph_kernels == n_kernels
    # ... and tracekit links each of them to its hipGraphLaunch call, by the api id
    (linked,) = rows(env, run, """SELECT count(*) FROM launches WHERE run_id = $run
                                  AND api_kind = 'graph_launch' AND category = 'kernel'""")[0]
    assert linked == graph_kernels
    (n_graph_launches,) = q(db, """SELECT count(*) FROM rocpd_api a JOIN rocpd_string n ON n.id = a.apiName_id
                                   WHERE n.string = 'hipGraphLaunch'""")[0]
    per_launch = rows(env, run, "SELECT n_kernels FROM graph_launches WHERE run_id = $run")
    assert len(per_launch) == n_graph_launches
    assert sum(r[0] for r in per_launch) == graph_kernels


@pytest.mark.parametrize("run", ["vllm", "matmul"])
def test_copies_bytes_and_memsets(env: dict[str, Any], run: str) -> None:
    db = env["vllm"] if run == "vllm" else MATMUL
    want = expected_copies(db)
    got = {
        t: (n, b)
        for t, n, b in rows(env, run, """SELECT trace_category, count(*), sum(bytes) FROM kernels
                                         WHERE run_id = $run AND category = 'memcpy' GROUP BY 1""")
    }
    assert got == want
    direction = {"CopyHostToDevice": "MEMORY_COPY_HOST_TO_DEVICE", "CopyDeviceToHost": "MEMORY_COPY_DEVICE_TO_HOST",
                 "CopyDeviceToDevice": "MEMORY_COPY_DEVICE_TO_DEVICE"}
    kinds = rows(env, run, "SELECT DISTINCT trace_category, kind FROM kernels WHERE run_id = $run AND category = 'memcpy'")
    assert kinds and all(direction[t] == k for t, k in kinds)
    (fills,) = q(db, """SELECT count(*) FROM rocpd_op o JOIN rocpd_string t ON t.id = o.opType_id
                        WHERE t.string = 'FillBuffer'""")[0]
    (memsets,) = rows(env, run, "SELECT count(*) FROM kernels WHERE run_id = $run AND category = 'memset'")[0]
    assert memsets == fills


@pytest.mark.parametrize("run", ["vllm", "matmul"])
def test_api_calls_markers_and_correlation(env: dict[str, Any], run: str) -> None:
    db = env["vllm"] if run == "vllm" else MATMUL
    names = api_names(db)
    n_hip = sum(n for name, n in names.items() if name.startswith("hip"))
    (got_calls,) = rows(env, run, "SELECT count(*) FROM runtime_calls WHERE run_id = $run")[0]
    assert got_calls == n_hip
    (got_marks,) = rows(env, run, "SELECT count(*) FROM annotations WHERE run_id = $run")[0]
    assert got_marks == names.get("UserMarker", 0)
    # every op linked through rocpd_api_ops shares the api id with its host call
    (n_linked,) = q(db, "SELECT count(DISTINCT op_id) FROM rocpd_api_ops")[0]
    (got_linked,) = rows(env, run, "SELECT count(*) FROM launches WHERE run_id = $run")[0]
    assert got_linked == n_linked
    # ranks: n_trace_events = ops + api rows; skipped = tracer overhead rows (not hip, not UserMarker)
    (n_ops,) = q(db, "SELECT count(*) FROM rocpd_op")[0]
    n_api = sum(names.values())
    overhead = n_api - n_hip - names.get("UserMarker", 0)
    ((n_events, n_skipped, first_ns, rank_source),) = rows(
        env, run, "SELECT n_trace_events, n_other_skipped, first_ns, rank_source FROM ranks WHERE run_id = $run")
    assert (n_events, n_skipped, rank_source) == (n_ops + n_api, overhead, "process")
    (first,) = q(db, "SELECT min(s) FROM (SELECT min(start) s FROM rocpd_op UNION ALL SELECT min(start) FROM rocpd_api)")[0]
    assert first_ns == first


@pytest.mark.parametrize("run", ["vllm", "matmul"])
def test_grid_in_workgroups(env: dict[str, Any], run: str) -> None:
    db = env["vllm"] if run == "vllm" else MATMUL
    want = {}
    for op_id, api, gx, gy, gz, wx, wy, wz in q(db, """
            SELECT ao.op_id, n.string, k.gridX, k.gridY, k.gridZ, k.workgroupX, k.workgroupY, k.workgroupZ
            FROM rocpd_api_ops ao JOIN rocpd_kernelapi k ON k.api_ptr_id = ao.api_id
            JOIN rocpd_api a ON a.id = ao.api_id JOIN rocpd_string n ON n.id = a.apiName_id"""):
        # hipExtModuleLaunchKernel passes the global size in work-items; the others workgroups
        if api in ("hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"):
            gx, gy, gz = (-(-g // w) for g, w in ((gx, wx), (gy, wy), (gz, wz)))
        want[op_id] = (gx, gy, gz, wx, wy, wz)
    assert want
    got = {
        int(r[0]): tuple(r[1:])
        for r in rows(env, run, """SELECT json_extract(args, '$.op_id'), grid_x, grid_y, grid_z,
                                          block_x, block_y, block_z
                                   FROM kernels WHERE run_id = $run AND grid_x IS NOT NULL""")
    }
    assert got == want


@pytest.mark.parametrize("run", ["vllm", "matmul"])
def test_devices(env: dict[str, Any], run: str) -> None:
    db = env["vllm"] if run == "vllm" else MATMUL
    gpus = sorted(r[0] for r in q(db, "SELECT DISTINCT gpuId FROM rocpd_op"))
    isa = {
        "gfx" + m
        for (name,) in q(db, "SELECT string FROM rocpd_string")
        for m in re.findall(r"_ISA(\d{2,4}[a-f]?)_", name)
    }
    got = rows(env, run, "SELECT device, name, vendor, arch FROM devices WHERE run_id = $run ORDER BY device")
    assert [r[0] for r in got] == gpus
    for device, name, vendor, arch in got:
        assert vendor == "amd" and name == f"AMD GPU (RPD gpuId {device})"
        assert arch == (next(iter(isa)) if len(isa) == 1 else None)
    (run_vendor,) = rows(env, run, "SELECT vendor FROM runs WHERE run_id = $run")[0]
    assert run_vendor == "amd"


def test_matmul_kernels(env: dict[str, Any]) -> None:
    want = expected_kernels(MATMUL)
    got = {
        name: (n, total)
        for name, n, total in rows(env, "matmul", """SELECT name, count(*), sum(dur_ns) FROM kernels
                                                     WHERE run_id = $run AND category = 'kernel' GROUP BY name""")
    }
    assert got == want
    (view_count,) = q(MATMUL, "SELECT count(*) FROM kernel")[0]
    assert sum(n for n, _ in want.values()) == view_count  # no HIP graphs here


def test_monitor_kept_out_of_event_tables(env: dict[str, Any]) -> None:
    import json

    (meta,) = rows(env, "vllm", "SELECT trace_metadata FROM rank_meta WHERE run_id = $run")[0]
    monitor = json.loads(meta)["monitor"]
    want = q(env["vllm"], """SELECT deviceId, monitorType, count(*) FROM rocpd_monitor GROUP BY 1, 2 ORDER BY 1, 2""")
    assert [(m["device_id"], m["monitor_type"], m["n_samples"]) for m in monitor] == [tuple(r) for r in want]
    (n_counter_rows,) = rows(env, "vllm", "SELECT count(*) FROM counters WHERE run_id = $run")[0]
    assert n_counter_rows == 0


# ---------------------------------------------------------------------------------------------
# Sniffing and bad input


def test_sniff_tells_rpd_from_rocpd() -> None:
    parser = get_parser("rpd")
    assert parser.sniff(VLLM_GZ) and parser.sniff(MATMUL)
    if ROCPD_V3.is_file():
        assert not parser.sniff(ROCPD_V3)


@pytest.fixture
def populated_store(tmp_path: Path) -> Path:
    store = tmp_path / "store.duckdb"
    ingest([MATMUL], store)
    return store


def _one_line_error(path: Path, store: Path, phrase: str) -> None:
    before = sha256(store)
    res = run_cli("ingest", str(path), "--store", str(store))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: {path}: "), lines[0]
    assert phrase in lines[0], lines[0]
    assert "Traceback" not in res.stderr
    assert sha256(store) == before
    assert not Path(str(store) + ".wal").exists()


@pytest.mark.parametrize("suffix", [".rpd", ".db"])
def test_other_sqlite_file_is_refused(tmp_path: Path, populated_store: Path, suffix: str) -> None:
    path = tmp_path / f"random{suffix}"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, value REAL)")
    con.execute("INSERT INTO measurements (value) VALUES (1.5)")
    con.commit()
    con.close()
    _one_line_error(path, populated_store, "neither rocpd nor RPD (no rocpd_kernel_dispatch / rocpd_op table)")


def test_truncated_rpd_gz(tmp_path: Path, populated_store: Path) -> None:
    data = VLLM_GZ.read_bytes()
    path = tmp_path / "cut.rpd.gz"
    path.write_bytes(data[: len(data) // 2])
    _one_line_error(path, populated_store, "truncated gzip")


def test_rpd_missing_a_required_table(tmp_path: Path, populated_store: Path) -> None:
    path = tmp_path / "no_api_ops.rpd"
    shutil.copyfile(MATMUL, path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    con.execute("DROP VIEW IF EXISTS kernel")
    con.execute("DROP VIEW IF EXISTS copyop")
    con.execute("DROP TABLE rocpd_api_ops")
    con.commit()
    con.close()
    _one_line_error(path, populated_store, "RPD file lacks required tables: rocpd_api_ops")


def test_not_sqlite_with_rpd_name(tmp_path: Path, populated_store: Path) -> None:
    path = tmp_path / "notes.rpd"
    path.write_text("not a database\n")
    _one_line_error(path, populated_store, "not an SQLite database")


def test_truncated_plain_rpd(tmp_path: Path, populated_store: Path) -> None:
    path = tmp_path / "cut.rpd"
    path.write_bytes(MATMUL.read_bytes()[:50_000])
    _one_line_error(path, populated_store, "truncated or corrupt SQLite database")


def test_directory_of_rpd_files_one_rank_per_process(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copyfile(VLLM_GZ, run_dir / "b_vllm.rpd.gz")
    shutil.copyfile(MATMUL, run_dir / "a_matmul.rpd")
    store = tmp_path / "store.duckdb"
    # two unrelated captures (recorded weeks apart): refused as one directory unless asked for
    with pytest.raises(TraceInputError, match="separate captures"):
        ingest([run_dir], store)
    (res,) = ingest([run_dir], store, one_run=True)
    plain = tmp_path / "vllm.rpd"
    with gzip.open(VLLM_GZ, "rb") as f, plain.open("wb") as out:
        shutil.copyfileobj(f, out)
    pids = {}
    for name, db in (("b_vllm.rpd.gz", plain), ("a_matmul.rpd", MATMUL)):
        (pid,) = q(db, "SELECT DISTINCT pid FROM rocpd_api")[0]
        (n_ops,) = q(db, "SELECT count(*) FROM rocpd_op")[0]
        pids[name] = (pid, n_ops)
    by_pid = sorted(pids.items(), key=lambda kv: kv[1][0])
    con = duckdb.connect(str(store), read_only=True)
    try:
        got = con.execute(
            """SELECT r.rank, r.path, (SELECT count(*) FROM device_activity d
                                       WHERE d.run_id = r.run_id AND d.rank = r.rank)
               FROM ranks r WHERE r.run_id = ? ORDER BY r.rank""", [res.run_id]).fetchall()
    finally:
        con.close()
    assert [(rank, Path(path).name) for rank, path, _ in got] == [(i, name) for i, (name, _) in enumerate(by_pid)]
    assert [n for _, _, n in got] == [n_ops for _, (_, n_ops) in by_pid]  # every op of these files is device work
