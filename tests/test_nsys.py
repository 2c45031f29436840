"""Nsight Systems SQLite exports: the 13 real exports of ``../shared/corpus/nsys`` (2021 → 2026.2)
and the bundled synthetic sample (``tools/make_nsys_sample.py``: CUDA graphs traced node by node,
NVTX step ranges, two ranks).

Every expected number is computed here with sqlite3 straight from the export's tables, or read
from nsys's own ``nsys stats`` output (``nsys-log.txt``), never taken from tracekit's output.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS
from helpers import run_cli, sha256

from tracekit.analysis import library
from tracekit.ingest import ingest
from tracekit.parsers.nsys import redact_args

NSYS = CORPUS / "nsys"
EXPORTS = sorted(NSYS.glob("*/*.sqlite")) if NSYS.is_dir() else []
SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "nsys_synthetic_tp2_graphs.sqlite"
corpus = pytest.mark.skipif(not EXPORTS, reason=f"nsys corpus not found at {NSYS} (only in the project's "
                                                "workspace and CI)")
PID = "((g >> 24) & 16777215)"


# ---------------------------------------------------------------------------------------------
# Independent expectations, straight from the SQLite file


def q(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def tables(db: Path) -> set[str]:
    return {r[0] for r in q(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def device_pids(db: Path) -> set[int]:
    t = tables(db)
    pids: set[int] = set()
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in t:
            pids |= {r[0] for r in q(db, f"SELECT DISTINCT (globalPid >> 24) & 16777215 FROM {table}")}
    return pids


def expected(db: Path) -> dict[str, Any]:
    """What a reader must store: kernels by name (count, ns), copies and memsets (count, ns,
    bytes), CUDA API rows of the processes that ran device work (runtime and driver: count, ns),
    NVTX ranges and marks (count, ns)."""
    t = tables(db)
    out: dict[str, Any] = {"kernels": {}, "memcpy": (0, 0, 0), "memset": (0, 0, 0), "api": {}, "nvtx": (0, 0)}
    if "CUPTI_ACTIVITY_KIND_KERNEL" in t:
        out["kernels"] = {n: (c, d) for n, c, d in q(db, """
            SELECT s.value, count(*), sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN StringIds s ON s.id = k.demangledName GROUP BY 1""")}
    for kind in ("memcpy", "memset"):
        table = f"CUPTI_ACTIVITY_KIND_{kind.upper()}"
        if table in t:
            out[kind] = q(db, f'SELECT count(*), coalesce(sum("end" - start), 0), coalesce(sum(bytes), 0) FROM {table}')[0]
    pids = device_pids(db)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in t:
        rows = q(db, 'SELECT eventClass, (globalTid >> 24) & 16777215, count(*), sum("end" - start) '
                     "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass IN (0, 1) GROUP BY 1, 2")
        for cls, pid, n, dur in rows:
            if not pids or pid in pids:
                key = "driver" if cls == 1 else "runtime"
                c, d = out["api"].get(key, (0, 0))
                out["api"][key] = (c + n, d + dur)
    if "NVTX_EVENTS" in t:
        out["nvtx"] = q(db, """SELECT count(*), coalesce(sum(CASE WHEN eventType = 34 THEN 0 ELSE "end" - start END), 0)
                               FROM NVTX_EVENTS WHERE (eventType IN (59, 60) AND "end" IS NOT NULL) OR eventType = 34""")[0]
    return out


def stored(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out["kernels"] = {n: (c, d) for n, c, d in con.execute(
        "SELECT name, count(*), sum(dur_ns) FROM device_activity WHERE run_id = ? AND category = 'kernel' GROUP BY 1",
        [run_id]).fetchall()}
    for kind in ("memcpy", "memset"):
        out[kind] = con.execute("SELECT count(*), coalesce(sum(dur_ns), 0), coalesce(sum(bytes), 0) FROM device_activity "
                                "WHERE run_id = ? AND category = ?", [run_id, kind]).fetchall()[0]
    out["api"] = {c: (n, d) for c, n, d in con.execute(
        "SELECT category, count(*), sum(dur_ns) FROM host_events WHERE run_id = ? AND category IN ('runtime', 'driver') "
        "GROUP BY 1", [run_id]).fetchall()}
    out["nvtx"] = con.execute("SELECT count(*), coalesce(sum(dur_ns), 0) FROM host_events WHERE run_id = ? "
                              "AND trace_category LIKE 'nvtx%'", [run_id]).fetchall()[0]
    return out


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[Path, str]]:
    if not EXPORTS:
        pytest.skip(f"nsys corpus not found at {NSYS}")
    store = tmp_path_factory.mktemp("nsys") / "store.duckdb"
    results = ingest([str(p) for p in EXPORTS], store)
    return store, {Path(r.source): r.run_id for r in results}


# ---------------------------------------------------------------------------------------------
# The real exports


@corpus
@pytest.mark.parametrize("db", EXPORTS, ids=[f"{p.parent.name}/{p.name}" for p in EXPORTS])
def test_every_export_stores_exactly_what_sqlite_holds(corpus_store: tuple[Path, dict[Path, str]], db: Path) -> None:
    store, runs = corpus_store
    with duckdb.connect(str(store), read_only=True) as con:
        got = stored(con, runs[db])
        fmt = con.execute("SELECT format FROM runs WHERE run_id = ?", [runs[db]]).fetchall()[0][0]
    want = expected(db)
    assert fmt == "nsys"
    assert got["kernels"] == want["kernels"]
    assert tuple(got["memcpy"]) == tuple(want["memcpy"])
    assert tuple(got["memset"]) == tuple(want["memset"])
    assert got["api"] == want["api"]
    assert tuple(got["nvtx"]) == tuple(want["nvtx"])


@corpus
def test_kernel_totals_equal_nsys_stats_own_report(corpus_store: tuple[Path, dict[Path, str]]) -> None:
    """fuser-h100's console log holds nsys's own ``cuda_gpu_kern_sum`` and ``nvtx_sum`` tables."""
    d = NSYS / "fuser-h100-matmul-2024.6"
    log = (d / "nsys-log.txt").read_text()

    def table(report: str) -> list[list[str]]:
        body = log.split(f"Executing '{report}' stats report", 1)[1].split("Executing '", 1)[0]
        return [line.split() for line in body.splitlines() if re.match(r"^\s+\d+\.\d+\s+\d+\s+\d+", line)]

    kern = table("cuda_gpu_kern_sum")
    nvtx = table("nvtx_sum")
    store, runs = corpus_store
    with duckdb.connect(str(store), read_only=True) as con:
        n, total = con.execute("SELECT count(*), sum(dur_ns) FROM device_activity WHERE run_id = ? AND category = 'kernel'",
                               [runs[d / "report1.sqlite"]]).fetchall()[0]
        n_nvtx, t_nvtx = con.execute("SELECT count(*), sum(dur_ns) FROM host_events WHERE run_id = ? "
                                     "AND trace_category LIKE 'nvtx%'", [runs[d / "report1.sqlite"]]).fetchall()[0]
    assert (n, total) == (sum(int(r[2]) for r in kern), sum(int(r[1]) for r in kern)) == (19, 402_301)
    assert (n_nvtx, t_nvtx) == (sum(int(r[2]) for r in nvtx), sum(int(r[1]) for r in nvtx))


@corpus
def test_backtrace_rows_are_not_stored_and_launches_stay_one_to_one(corpus_store: tuple[Path, dict[Path, str]]) -> None:
    """pipit saxpy (2022.2): 38 eventClass-67 rows repeat the correlation id of an API row."""
    db = NSYS / "pipit-a100-saxpy-mpi-2022.2" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    assert q(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 67")[0][0] == 38
    store, runs = corpus_store
    with duckdb.connect(str(store), read_only=True) as con:
        library.install(con)
        per_kernel = con.execute("SELECT count(*), count(DISTINCT correlation_id) FROM launches WHERE run_id = ? "
                                 "AND category = 'kernel'", [runs[db]]).fetchall()[0]
    assert per_kernel == (5, 5)


@corpus
def test_trimmed_window_two_processes_two_ranks_and_kernels_without_a_launch(
        corpus_store: tuple[Path, dict[Path, str]]) -> None:
    db = NSYS / "nsysai-h100x2-fastvideo-sp2-window-2026.2" / "h100_2gpu_1s.sqlite"
    linked = q(db, """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS (
                        SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId
                        AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215))""")[0][0]
    store, runs = corpus_store
    with duckdb.connect(str(store), read_only=True) as con:
        library.install(con)
        ranks = con.execute("SELECT rank, trace_metadata->>'pid' FROM rank_meta WHERE run_id = ? ORDER BY rank",
                            [runs[db]]).fetchall()
        names = con.execute("SELECT DISTINCT name FROM device_meta WHERE run_id = ?", [runs[db]]).fetchall()
        launched = con.execute("SELECT count(*) FROM launches WHERE run_id = ? AND category = 'kernel'",
                               [runs[db]]).fetchall()[0][0]
    assert ranks == [(0, "111"), (1, "112")]
    assert names == [(None,)]  # no TARGET_INFO_GPU in the window: no made-up identity
    assert launched == linked == 3442 - 1810


@corpus
def test_devices_follow_the_cuda_device_map(corpus_store: tuple[Path, dict[Path, str]]) -> None:
    """cloverleaf lists 4 A100s whose nsys ids differ from their CUDA ids (kernels on CUDA device 0)."""
    db = NSYS / "pipit-a100-cloverleaf-2024.5" / "perlmutter-cloverleaf-cuda.sqlite"
    bus, sms, bw = q(db, "SELECT busLocation, smCount, memoryBandwidth FROM TARGET_INFO_GPU WHERE cuDevice = 0")[0]
    store, runs = corpus_store
    with duckdb.connect(str(store), read_only=True) as con:
        row = con.execute("SELECT device, name, compute_units, memory_bandwidth_gbps, arch, properties->>'busLocation' "
                          "FROM device_meta WHERE run_id = ?", [runs[db]]).fetchall()
    assert row == [(0, "NVIDIA A100-SXM4-80GB", sms, bw / 1e9, "sm_80", bus)]


@corpus
def test_capture_without_kernel_tables_is_an_empty_run(corpus_store: tuple[Path, dict[Path, str]]) -> None:
    db = NSYS / "weatherbench2-rtx4060-nokernels-2025.5" / "report1.sqlite"
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in tables(db)
    store, runs = corpus_store
    with duckdb.connect(str(store), read_only=True) as con:
        kernels = con.execute("SELECT count(*) FROM device_activity WHERE run_id = ? AND category = 'kernel'",
                              [runs[db]]).fetchall()[0][0]
    assert kernels == 0


@corpus
def test_a_directory_with_report_and_export_is_one_run_from_the_export(tmp_path: Path) -> None:
    d = NSYS / "fuser-h100-matmul-2024.6"
    (result,) = ingest([str(d)], tmp_path / "s.duckdb")
    assert result.n_files == 1
    assert result.run_id == ingest([str(d / "report1.sqlite")], tmp_path / "t.duckdb")[0].run_id


# ---------------------------------------------------------------------------------------------
# The synthetic sample (no corpus needed)


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("nsys-sample") / "store.duckdb"
    (result,) = ingest([str(SAMPLE)], store)
    return store, result.run_id


def test_sample_stores_exactly_what_sqlite_holds(sample_store: tuple[Path, str]) -> None:
    store, run_id = sample_store
    with duckdb.connect(str(store), read_only=True) as con:
        got = stored(con, run_id)
    want = expected(SAMPLE)
    assert got["kernels"] == want["kernels"]
    assert tuple(got["memcpy"]) == tuple(want["memcpy"])
    assert got["api"] == want["api"]
    # the unclosed range is not stored
    assert tuple(got["nvtx"]) == tuple(want["nvtx"])
    assert q(SAMPLE, 'SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "end" IS NULL')[0][0] == 2


def test_graph_kernels_are_attributed_to_their_graph_launch(sample_store: tuple[Path, str]) -> None:
    per_launch = dict(q(SAMPLE, """SELECT r.correlationId * 100000 + ((r.globalTid >> 24) & 16777215), count(*)
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
             AND ((k.globalPid >> 24) & 16777215) = ((r.globalTid >> 24) & 16777215)
        WHERE s.value = 'cudaGraphLaunch_v10000' AND k.graphNodeId IS NOT NULL GROUP BY 1"""))
    store, run_id = sample_store
    with duckdb.connect(str(store), read_only=True) as con:
        library.install(con)
        rows = con.execute("""SELECT rank, correlation_id, count(*), count(DISTINCT args->>'graphNodeId')
            FROM launches JOIN device_activity USING (run_id, rank, correlation_id, start_ns)
            WHERE run_id = ? AND api_kind = 'graph_launch' GROUP BY ALL""", [run_id]).fetchall()
    assert len(rows) == len(per_launch) == 12  # 6 decode steps x 2 ranks
    assert {n for _r, _c, n, _g in rows} == set(per_launch.values()) == {12}
    assert all(g == 12 for *_x, g in rows)


def test_nvtx_step_ranges_are_steps(sample_store: tuple[Path, str]) -> None:
    store, run_id = sample_store
    with duckdb.connect(str(store), read_only=True) as con:
        library.install(con)
        steps = con.execute("SELECT rank, family, phase, count(*), min(context_tokens) FROM step_markers "
                            "WHERE run_id = ? GROUP BY ALL ORDER BY ALL", [run_id]).fetchall()
        ops = con.execute("SELECT count(*), count(sequence_number), min(name) FROM host_events WHERE run_id = ? "
                          "AND category = 'op'", [run_id]).fetchall()[0]
        nccl = con.execute("SELECT DISTINCT name FROM host_events WHERE run_id = ? AND trace_category = 'nvtx:NCCL'",
                           [run_id]).fetchall()
    assert steps == [(0, "vllm", "decode", 6, 640), (0, "vllm", "prefill", 1, None),
                     (1, "vllm", "decode", 6, 640), (1, "vllm", "prefill", 1, None)]
    n_emit = q(SAMPLE, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'aten::%, seq = %'")[0][0]
    assert ops[0] == ops[1] == n_emit and ops[2].startswith("aten::") and "," not in ops[2]
    assert nccl == [("ncclAllReduce",)]  # text from textId, domain from the NvtxDomainCreate row


def test_ranks_are_processes_with_device_work_on_their_own_gpu(sample_store: tuple[Path, str]) -> None:
    store, run_id = sample_store
    with duckdb.connect(str(store), read_only=True) as con:
        ranks = con.execute("SELECT rank, trace_metadata->>'pid', trace_metadata->'host_only_processes' FROM rank_meta "
                            "WHERE run_id = ? ORDER BY rank", [run_id]).fetchall()
        devices = con.execute("SELECT rank, device, properties->>'busLocation' FROM device_meta WHERE run_id = ? "
                              "ORDER BY rank", [run_id]).fetchall()
        backtraces = con.execute("SELECT count(*) FROM host_events WHERE run_id = ? AND name = 'cudaMemcpyAsync'",
                                 [run_id]).fetchall()[0][0]
    assert [(r, p) for r, p, _h in ranks] == [(0, "4242"), (1, "4244")]
    assert json.loads(ranks[0][2]) == {"4243": 2}  # the launcher's 2 calls: counted, not a rank
    bus = dict(q(SAMPLE, "SELECT g.id, g.busLocation FROM TARGET_INFO_GPU g"))
    gpu_of = dict(q(SAMPLE, "SELECT pid, gpuId FROM TARGET_INFO_CUDA_DEVICE"))
    assert devices == [(0, 0, bus[gpu_of[4242]]), (1, 0, bus[gpu_of[4244]])]
    assert bus[gpu_of[4242]] != bus[gpu_of[4244]]
    assert backtraces == 0


def test_secret_looking_arguments_are_masked() -> None:
    assert redact_args(["vllm", "serve", "--api-key", "sk-1", "--hf-token=abc", "HF_TOKEN=x", "--model", "m"]) == \
        ["vllm", "serve", "--api-key", "***", "--hf-token=***", "HF_TOKEN=***", "--model", "m"]


# ---------------------------------------------------------------------------------------------
# Bad input and reports


def test_truncated_export_is_one_line_and_leaves_the_store_untouched(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    ingest([str(SAMPLE)], store)
    before = sha256(store)
    for cut in (3_000, len(SAMPLE.read_bytes()) // 2):
        bad = tmp_path / f"cut{cut}.sqlite"
        bad.write_bytes(SAMPLE.read_bytes()[:cut])
        r = run_cli("ingest", str(bad), "--store", str(store))
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"error: {bad}: ") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    r = run_cli("ingest", str(other), "--store", str(store))
    assert r.returncode == 2 and "not an Nsight Systems export" in r.stderr, r.stderr
    assert sha256(store) == before


def _stand_in_nsys(bin_dir: Path, export: Path) -> None:
    """A stand-in ``nsys`` (this machine has none): ``nsys export … --output OUT REPORT`` copies
    ``export`` to OUT, as the real export would write it; anything else fails."""
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text(f"""#!/bin/sh
[ "$1" = export ] || exit 3
out=""
while [ $# -gt 0 ]; do [ "$1" = --output ] && out="$2"; shift; done
cp '{export}' "$out"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_report_without_nsys_says_the_export_command(tmp_path: Path) -> None:
    report = tmp_path / "run1.nsys-rep"
    report.write_bytes(b"not really a report")
    store = tmp_path / "s.duckdb"
    r = run_cli("ingest", str(report), "--store", str(store), env={"PATH": os.path.dirname(sys.executable)})
    assert r.returncode == 2
    assert f"nsys export --type sqlite --output run1.sqlite {report}" in r.stderr
    assert r.stderr.count("\n") == 1 and not store.exists()


def test_report_is_exported_with_nsys_when_it_is_on_path(tmp_path: Path) -> None:
    report = tmp_path / "run1.nsys-rep"
    report.write_bytes(b"stand-in report bytes")
    _stand_in_nsys(tmp_path / "bin", SAMPLE)
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    r = run_cli("ingest", str(report), "--store", str(tmp_path / "s.duckdb"), "--json", env=env)
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(r.stdout)
    assert result["format"] == "nsys" and result["n_device_events"] == expected_device_rows(SAMPLE)
    assert not list(tmp_path.glob("run1.sqlite"))  # exported into a temporary directory, removed


def expected_device_rows(db: Path) -> int:
    return sum(q(db, f"SELECT count(*) FROM {t}")[0][0] for t in
               ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))


def test_stand_in_nsys_failure_is_one_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text("#!/bin/sh\necho 'ERROR: report is corrupt' >&2\nexit 1\n")
    (bin_dir / "nsys").chmod(0o755)
    report = tmp_path / "bad.nsys-rep"
    report.write_bytes(b"x")
    r = run_cli("ingest", str(report), "--store", str(tmp_path / "s.duckdb"),
                env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert r.returncode == 2 and r.stderr.strip() == f"error: {report}: nsys export failed (exit 1): ERROR: report is corrupt"


def test_sample_is_what_its_script_writes(tmp_path: Path) -> None:
    out = tmp_path / "again.sqlite"
    import subprocess

    subprocess.run([sys.executable, str(SAMPLE.parent.parent / "tools" / "make_nsys_sample.py"), "--out", str(out)],
                   check=True, capture_output=True)
    for table in sorted(tables(SAMPLE)):
        assert q(out, f'SELECT * FROM "{table}"') == q(SAMPLE, f'SELECT * FROM "{table}"'), table
    assert tables(out) == tables(SAMPLE)


def test_hostile_values_are_dropped_or_nulled_not_a_traceback(tmp_path: Path) -> None:
    """Values of the wrong type where nsys writes integers: the row is not stored (no integer
    time) or the value becomes NULL; never a traceback, never a half-written run."""
    import shutil

    db = tmp_path / "hostile.sqlite"
    shutil.copyfile(SAMPLE, db)
    with sqlite3.connect(db) as con:
        k = "CUPTI_ACTIVITY_KIND_KERNEL"
        con.execute(f"UPDATE {k} SET start = 'soon' WHERE rowid = 1")  # text time: not stored
        con.execute(f'UPDATE {k} SET "end" = start - 5 WHERE rowid = 2')  # negative duration: dropped
        con.execute(f"UPDATE {k} SET gridX = 1e30, registersPerThread = 'x' WHERE rowid = 3")  # -> NULL
        con.execute(f"UPDATE {k} SET demangledName = 999999, shortName = 999999 WHERE rowid = 4")  # no string
        con.execute(f"UPDATE {k} SET globalPid = NULL WHERE rowid = 5")  # no process: not stored
        con.execute("UPDATE NVTX_EVENTS SET text = CAST(x'ff00fe' AS BLOB) WHERE rowid = 10")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 'c' WHERE rowid = 3")
    store = tmp_path / "s.duckdb"
    r = run_cli("ingest", str(db), "--store", str(store), "--json")
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(r.stdout)
    n_kernels = q(SAMPLE, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    with duckdb.connect(str(store), read_only=True) as con:
        stored = con.execute("SELECT count(*), count(grid_x), count(registers_per_thread), "
                             "count(*) FILTER (WHERE name = '') FROM device_activity WHERE category = 'kernel'"
                             ).fetchall()[0]
        skipped = con.execute("SELECT sum(n_other_skipped), sum(n_invalid_events) FROM ranks").fetchall()[0]
    assert stored[0] == n_kernels - 3  # the text time, the negative duration, the process-less row
    assert stored[1] == stored[2] == stored[0] - 1 and stored[3] == 1
    assert result["n_invalid_events"] >= 1 and skipped[0] >= 2


@corpus
def test_sync_records_are_named_by_their_api_call_and_placed_on_their_context_s_device(
        corpus_store: tuple[Path, dict[Path, str]]) -> None:
    """syncType's numbering differs between exports (Rodinia's 8,190 cudaThreadSynchronize records
    are syncType 1, CloverLeaf's cudaDeviceSynchronize too, crossentropy's is 4); deviceId is 0 on
    both GPUs of the 2-GPU windows."""
    store, runs = corpus_store
    rodinia = NSYS / "rodinia-rtx3090-gaussian-2022.4" / "report3.sqlite"
    mfu = NSYS / "nsysai-h100x2-mfu-train-window-2026.2" / "mfu_2gpu_before.sqlite"
    want_dev = dict(q(mfu, f"""SELECT {PID.replace('g', 'globalPid')}, min(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL
                               GROUP BY 1"""))
    assert set(q(mfu, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")) == {(0,)}
    with duckdb.connect(str(store), read_only=True) as con:
        names = con.execute("SELECT name, args->>'api', count(*) FROM host_events WHERE run_id = ? "
                            "AND category = 'sync' GROUP BY ALL", [runs[rodinia]]).fetchall()
        devices = con.execute("SELECT pid, min(device), max(device), count(*) FILTER (WHERE stream IS NULL) "
                              "FROM host_events WHERE run_id = ? AND category = 'sync' GROUP BY pid ORDER BY pid",
                              [runs[mfu]]).fetchall()
        domains = con.execute("SELECT count(*) FROM host_events WHERE run_id = ? AND trace_category = 'nvtx:domain1'",
                              [runs[mfu]]).fetchall()[0][0]
    assert names == [("Context Sync", "cudaThreadSynchronize_v3020", 8190)]
    assert [(int(p), lo, hi) for p, lo, hi, _n in devices] == [(p, d, d) for p, d in sorted(want_dev.items())]
    assert {d for _p, d in want_dev.items()} == {0, 1}
    no_stream = q(mfu, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE streamId = 4294967295")[0][0]
    assert sum(n for *_x, n in devices) == no_stream > 0
    # the NCCL ranges of the window lost their NvtxDomainCreate record: named by their domain id
    assert domains == q(mfu, "SELECT count(*) FROM NVTX_EVENTS WHERE domainId = 1")[0][0] > 0


def test_tensorrt_llm_step_ranges_are_steps(tmp_path: Path) -> None:
    """The sample written with TensorRT-LLM's NVTX step ranges (PyExecutor's
    ``[Executor] _forward_step N: C ctx reqs, T ctx tokens, G gen reqs`` in its own domain)."""
    import subprocess

    db = tmp_path / "trtllm.sqlite"
    subprocess.run([sys.executable, str(SAMPLE.parent.parent / "tools" / "make_nsys_sample.py"), "--out", str(db),
                    "--engine", "trtllm"], check=True, capture_output=True)
    store = tmp_path / "s.duckdb"
    (run,) = ingest([str(db)], store)
    with duckdb.connect(str(store), read_only=True) as con:
        library.install(con)
        steps = con.execute("SELECT rank, family, phase, batch_size, new_tokens, decode_seqs, prefill_tokens, count(*), "
                            "count(*) FILTER (WHERE n_kernels > 0) FROM steps WHERE run_id = ? GROUP BY ALL "
                            "ORDER BY ALL", [run.run_id]).fetchall()
        domain = con.execute("SELECT DISTINCT trace_category FROM host_events WHERE run_id = ? AND name LIKE "
                             "'[Executor]%'", [run.run_id]).fetchall()
    assert domain == [("nvtx:TensorRT-LLM",)]
    assert steps == [(r, "trtllm", "decode", 8, 8, 8, 0, 6, 6) for r in (0,)] + [(0, "trtllm", "prefill", 1, 512, 0, 512, 1, 1)] \
        + [(1, "trtllm", "decode", 8, 8, 8, 0, 6, 6), (1, "trtllm", "prefill", 1, 512, 0, 512, 1, 1)]
