"""rocprofv3 CSV and ``<pid>_results.json`` ingest.

Every expected number is computed here from the files themselves (``csv``, ``json``) or read from
the corpus' ``expected_totals.json`` (written by the sample's build script from the same records),
never taken from tracekit's output.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS
from helpers import run_cli, sha256

import tracekit
from tracekit.errors import TraceInputError
from tracekit.parsers import get_parser

ROCPROF = CORPUS / "rocprof"
SAMPLE = ROCPROF / "rocpd-v3-sample"
CSV_DIR = SAMPLE / "vllm_mi300x_decode_csv"
RESULTS_JSON = SAMPLE / "482913_results.json"
LLAMA = ROCPROF / "rocprofv3-llamacpp-gfx1151"
DOCS = ROCPROF / "rocprofv3-docs-samples"

needs_rocprof = pytest.mark.skipif(
    not SAMPLE.is_dir(), reason=f"rocprof corpus not found at {ROCPROF} (only in the workspace and CI)"
)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _q(store: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _expected() -> dict[str, Any]:
    with (SAMPLE / "expected_totals.json").open() as f:
        data: dict[str, Any] = json.load(f)
    return data


def _gpu_index_by_agent(agent_info: Path) -> dict[str, int]:
    """'Agent <logical node id>' -> HIP device index (GPU agents in logical-node order)."""
    gpus = sorted(int(r["Logical_Node_Id"]) for r in _rows(agent_info) if r["Agent_Type"] == "GPU")
    return {f"Agent {n}": i for i, n in enumerate(gpus)}


# ---------------------------------------------------------------------------------------------
# The vLLM decode sample: CSV folder and results.json against expected_totals.json


@needs_rocprof
@pytest.mark.parametrize("source", ["csv", "json"])
def test_vllm_sample_reproduces_expected_totals(store: Path, source: str) -> None:
    exp = _expected()
    path = CSV_DIR if source == "csv" else RESULTS_JSON
    res = tracekit.ingest([path], store=store)[0]
    assert res.format == "rocprofv3" and res.vendor == "amd"
    run = res.run_id

    per_kernel = _q(
        store,
        "SELECT name, count(*), sum(dur_ns) FROM kernels WHERE run_id = ? AND category = 'kernel' GROUP BY 1",
        [run],
    )
    assert {n: (c, d) for n, c, d in per_kernel} == {
        n: (k["dispatches"], k["total_duration_ns"]) for n, k in exp["per_kernel"].items()
    }
    assert sum(c for _, c, _ in per_kernel) == exp["kernel_dispatches"]
    assert sum(d for _, _, d in per_kernel) == exp["kernel_time_ns"]

    copies = _q(
        store,
        "SELECT name, count(*), sum(bytes) FROM kernels WHERE run_id = ? AND category = 'memcpy' GROUP BY 1",
        [run],
    )
    assert {n: c for n, c, _ in copies} == exp["memory_copies_by_direction"]
    if source == "json":
        assert {n: b for n, _, b in copies} == exp["memory_copy_bytes_by_direction"]
    else:  # the CSV has no copy sizes
        assert all(b is None for _, _, b in copies)

    api = dict(_q(store, "SELECT name, count(*) FROM runtime_calls WHERE run_id = ? GROUP BY 1", [run]))
    assert api == exp["hip_api_by_function"]
    markers = dict(_q(store, "SELECT name, count(*) FROM annotations WHERE run_id = ? GROUP BY 1", [run]))
    assert markers == exp["marker_by_message"]

    # every dispatch links to the HIP call that launched it (graph kernels to hipGraphLaunch)
    assert _q(store, "SELECT count(*) FROM launches WHERE run_id = ?", [run])[0][0] == (
        exp["kernel_dispatches"] + exp["memory_copies"]
    )
    graph = _q(store, "SELECT sum(n_kernels) FROM graph_launches WHERE run_id = ?", [run])[0][0]
    assert graph == exp["graph_launched_dispatches"]

    sums = _q(
        store,
        "SELECT kernel_name, counter, sum(value), count(DISTINCT dispatch_id), count(*) FROM counters "
        "WHERE run_id = ? GROUP BY 1, 2",
        [run],
    )
    got = {(k, c): v for k, c, v, _, _ in sums}
    want = {(k, c): v for k, info in exp["per_kernel"].items() for c, v in info["counters_sum"].items()}
    assert got == pytest.approx(want)
    assert _q(store, "SELECT count(DISTINCT dispatch_id), count(*) FROM counters WHERE run_id = ?", [run])[
        0
    ] == (
        exp["dispatches_with_counters"],
        exp["counter_collection_csv_rows"],
    )
    assert _q(store, "SELECT DISTINCT pass FROM counters WHERE run_id = ?", [run]) == [(None,)]

    # All GPU work is on "Agent 3" = HIP device 2 (GPU agents numbered by logical node id).
    kernel_agents = {r["Agent_Id"] for r in _rows(CSV_DIR / "482913_kernel_trace.csv")}
    assert len(kernel_agents) == 1
    want_device = _gpu_index_by_agent(CSV_DIR / "482913_agent_info.csv")[kernel_agents.pop()]
    assert _q(store, "SELECT DISTINCT device FROM kernels WHERE run_id = ?", [run]) == [(want_device,)]
    assert _q(store, "SELECT DISTINCT device FROM counters WHERE run_id = ?", [run]) == [(want_device,)]
    gpus = [r for r in _rows(CSV_DIR / "482913_agent_info.csv") if r["Agent_Type"] == "GPU"]
    devices = _q(
        store,
        "SELECT device, name, arch, compute_units, warp_size, xcc_count, clock_mhz FROM devices "
        "WHERE run_id = ? ORDER BY device",
        [run],
    )
    assert [d[0] for d in devices] == list(range(len(gpus)))
    g = gpus[want_device]
    assert devices[want_device][1:] == (
        g["Product_Name"],
        g["Name"],
        int(g["Cu_Count"]),
        int(g["Wave_Front_Size"]),
        int(g["Num_Xcc"]),
        float(g["Max_Engine_Clk_Fcompute"]),
    )
    assert res.device_name == g["Product_Name"]

    ranks = _q(store, "SELECT rank, rank_source, runtime, n_trace_events FROM ranks WHERE run_id = ?", [run])
    n_records = exp["kernel_dispatches"] + exp["memory_copies"] + exp["hip_api_calls"] + exp["marker_ranges"]
    assert ranks == [(0, "process", "hip", n_records)]
    assert _q(store, "SELECT DISTINCT pid FROM device_activity WHERE run_id = ?", [run]) == [
        (str(exp["pid"]),)
    ]


@needs_rocprof
def test_vllm_csv_and_json_store_the_same_rows(store: Path) -> None:
    """Both renderings of one run give identical rows, except what only one format has:
    copy sizes and copy threads (JSON), and the LDS size (CSV: the symbol's static LDS rounded
    to the allocation granule; JSON: the dispatch's group segment, dynamic LDS included)."""
    csv_run = tracekit.ingest([CSV_DIR], store=store)[0].run_id
    json_run = tracekit.ingest([RESULTS_JSON], store=store)[0].run_id
    device_cols = (
        "rank, device, stream, category, name, start_ns, dur_ns, correlation_id, external_id, trace_category, "
        "pid, grid_x, grid_y, grid_z, block_x, block_y, block_z, kind, dispatch_id, queue_id, scratch_bytes, "
        "vgpr_count, accum_vgpr_count, sgpr_count, CASE WHEN category = 'kernel' THEN tid END"
    )
    host_cols = (
        "rank, pid, tid, category, trace_category, name, start_ns, dur_ns, correlation_id, external_id"
    )
    counter_cols = "rank, device, correlation_id, dispatch_id, kernel_name, counter, value, pass"
    for table, cols in (
        ("device_activity", device_cols),
        ("host_events", host_cols),
        ("counter_values", counter_cols),
    ):
        a = sorted(_q(store, f"SELECT {cols} FROM {table} WHERE run_id = ?", [csv_run]), key=repr)
        b = sorted(_q(store, f"SELECT {cols} FROM {table} WHERE run_id = ?", [json_run]), key=repr)
        assert a and a == b, table


# ---------------------------------------------------------------------------------------------
# llama.cpp on gfx1151: kernel trace, HIP API and two counter collections from separate runs


def _kernel_totals(path: Path) -> tuple[int, dict[str, tuple[int, int]]]:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    rows = _rows(path)
    for r in rows:
        per[r["Kernel_Name"]][0] += 1
        per[r["Kernel_Name"]][1] += int(r["End_Timestamp"]) - int(r["Start_Timestamp"])
    return len(rows), {k: (v[0], v[1]) for k, v in per.items()}


def _counter_sums(path: Path) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = defaultdict(float)
    for r in _rows(path):
        out[(r["Kernel_Name"], r["Counter_Name"])] += float(r["Counter_Value"])
    return dict(out)


@needs_rocprof
def test_llamacpp_decode_with_separate_counter_runs(store: Path, tmp_path: Path) -> None:
    names = ["kernel_trace", "hip_api_trace", "stall_counter_collection", "fetch_counter_collection"]
    run_dir = tmp_path / "decode"
    run_dir.mkdir()
    for n in names:
        shutil.copy(LLAMA / f"decode_{n}.csv", run_dir)
    res = tracekit.ingest([run_dir], store=store)[0]
    run = res.run_id
    assert res.format == "rocprofv3" and res.n_files == 4

    n_kernels, per_kernel = _kernel_totals(LLAMA / "decode_kernel_trace.csv")
    got = _q(store, "SELECT name, count(*), sum(dur_ns) FROM kernels WHERE run_id = ? GROUP BY 1", [run])
    assert {n: (c, d) for n, c, d in got} == per_kernel
    assert sum(c for _, c, _ in got) == n_kernels
    api_rows = _rows(LLAMA / "decode_hip_api_trace.csv")
    assert _q(store, "SELECT count(*) FROM runtime_calls WHERE run_id = ?", [run])[0][0] == len(api_rows)

    # The files name three processes (three separate rocprofv3 executions): ranks by pid, and each
    # counter collection keeps its own pass name, so the two never mix.
    pids = {
        "decode": int(api_rows[0]["Process_Id"]),
        "decode_stall": int(_rows(LLAMA / "decode_stall_counter_collection.csv")[0]["Process_Id"]),
        "decode_fetch": int(_rows(LLAMA / "decode_fetch_counter_collection.csv")[0]["Process_Id"]),
    }
    assert len(set(pids.values())) == 3
    ranks = _q(
        store, "SELECT rank, trace_metadata->>'prefix' FROM ranks WHERE run_id = ? ORDER BY rank", [run]
    )
    assert [p for _, p in ranks] == sorted(pids, key=lambda p: pids[p])
    for kind in ("stall", "fetch"):
        want = _counter_sums(LLAMA / f"decode_{kind}_counter_collection.csv")
        got_c = _q(
            store,
            "SELECT kernel_name, counter, sum(value) FROM counters WHERE run_id = ? AND pass = ? GROUP BY 1, 2",
            [run, f"decode_{kind}"],
        )
        assert {(k, c): v for k, c, v in got_c} == pytest.approx(want)
    assert _q(store, "SELECT count(*) FROM counters WHERE run_id = ? AND pass IS NULL", [run])[0][0] == 0
    # no agent_info: the one GPU agent seen ("Agent 1") is HIP device 0
    assert _q(store, "SELECT DISTINCT device FROM kernels WHERE run_id = ?", [run]) == [(0,)]


@needs_rocprof
def test_llamacpp_prefill_kernel_trace(store: Path) -> None:
    path = LLAMA / "prefill_kernel_trace.csv"
    run = tracekit.ingest([path], store=store)[0].run_id
    n_kernels, per_kernel = _kernel_totals(path)
    got = _q(store, "SELECT name, count(*), sum(dur_ns) FROM kernels WHERE run_id = ? GROUP BY 1", [run])
    assert {n: (c, d) for n, c, d in got} == per_kernel
    assert sum(c for _, c, _ in got) == n_kernels
    # grid in workgroups, block = workgroup size; Stream_Id is the stream
    rows = _rows(path)
    want = Counter(
        (
            math.ceil(int(r["Grid_Size_X"]) / int(r["Workgroup_Size_X"])),
            int(r["Workgroup_Size_X"]),
            r["Stream_Id"],
            int(r["VGPR_Count"]),
            int(r["SGPR_Count"]),
            int(r["Dispatch_Id"]),
        )
        for r in rows
    )
    got_geom = Counter(
        _q(
            store,
            "SELECT grid_x, block_x, stream, vgpr_count, sgpr_count, dispatch_id FROM kernels WHERE run_id = ?",
            [run],
        )
    )
    assert got_geom == want


# ---------------------------------------------------------------------------------------------
# The SDK's documentation samples: one small file of every CSV type


DOCS_SKIPPED = {
    "hip_api_stats.csv",
    "hip_domain_stats.csv",
    "memory_allocation_trace.csv",
    "scratch_memory_trace.csv",
}
DOCS_PC_SAMPLES = ("pc_sampling_host_trap.csv", "pc_sampling_host_trap_debug.csv", "pc_sampling_stochastic_debug.csv")


@needs_rocprof
def test_docs_samples_every_csv_type_ingests_or_is_skipped_with_a_reason(store: Path) -> None:
    csvs = sorted(DOCS.glob("*.csv"))
    parser = get_parser("rocprofv3")
    assert all(parser.sniff(p) for p in csvs), [p.name for p in csvs if not parser.sniff(p)]
    assert not get_parser("rocprofv3_json").sniff(DOCS / "rocprofv3-results-json-schema.json")

    # unrelated samples, recorded days apart: refused as one directory unless asked for
    with pytest.raises(TraceInputError, match="separate captures"):
        tracekit.ingest([DOCS], store=store)
    res = tracekit.ingest([DOCS], store=store, one_run=True)[0]
    run = res.run_id
    assert res.n_files == len(csvs)
    skipped: dict[str, str] = {}
    for (meta,) in _q(store, "SELECT trace_metadata FROM ranks WHERE run_id = ?", [run]):
        skipped.update(json.loads(meta)["skipped_files"])
    assert set(skipped) == DOCS_SKIPPED
    assert all(reason for reason in skipped.values())

    headers = {p.name: list(_rows(p)[0]) if _rows(p) else [] for p in csvs}
    kernel_files = [n for n, h in headers.items() if "Kind" in h and "Kernel_Name" in h]
    api_files = [n for n, h in headers.items() if "Domain" in h and "Function" in h]
    counter_files = [n for n, h in headers.items() if "Counter_Name" in h]
    copy_files = [n for n, h in headers.items() if "Direction" in h]
    assert sorted(kernel_files) == ["kernel_trace.csv", "kernel_trace_truncated.csv"]

    def cut(name: str) -> int:
        """1 when the file's last row has no newline after it: it may be cut inside its last
        field, so it is dropped and counted (docs/security.md), else 0."""
        return int(bool(_rows(DOCS / name)) and not (DOCS / name).read_bytes().endswith(b"\n"))

    def count(names: Iterable[str]) -> int:
        return sum(len(_rows(DOCS / n)) - cut(n) for n in names)

    assert _q(store, "SELECT count(*) FROM kernels WHERE run_id = ? AND category = 'kernel'", [run])[0][
        0
    ] == count(kernel_files)
    assert _q(store, "SELECT count(*) FROM kernels WHERE run_id = ? AND category = 'memcpy'", [run])[0][
        0
    ] == count(copy_files)
    assert _q(store, "SELECT count(*) FROM host_events WHERE run_id = ?", [run])[0][0] == count(api_files)
    want_counters = sum(float(r["Counter_Value"]) for n in counter_files
                        for r in _rows(DOCS / n)[: len(_rows(DOCS / n)) - cut(n)])
    assert _q(store, "SELECT sum(value) FROM counters WHERE run_id = ?", [run])[0][0] == pytest.approx(
        want_counters
    )
    # PC samples are stored (view pc_samples); stochastic rows carry a stall reason
    assert _q(store, "SELECT count(*), count(stall_reason) FROM pc_samples WHERE run_id = ?", [run])[0] == (
        count(DOCS_PC_SAMPLES), count(["pc_sampling_stochastic_debug.csv"]))
    n_skipped_records = count(n for n in DOCS_SKIPPED if "stats" not in n)
    n_cut = sum(cut(p.name) for p in csvs)  # rows of every file are checked, skipped files' too
    assert n_cut == 6  # the docs' counter_collection, marker_api_trace, pc_sampling_host_trap, …
    assert _q(store, "SELECT n_skipped_events, n_invalid_events FROM runs WHERE run_id = ?", [run])[0] == (
        n_skipped_records + n_cut, n_cut)


@needs_rocprof
def test_docs_kernel_trace_alone(store: Path) -> None:
    path = DOCS / "kernel_trace.csv"
    run = tracekit.ingest([path], store=store)[0].run_id
    n, per_kernel = _kernel_totals(path)
    got = _q(store, "SELECT name, count(*), sum(dur_ns) FROM kernels WHERE run_id = ? GROUP BY 1", [run])
    assert {k: (c, d) for k, c, d in got} == per_kernel and n == sum(c for _, c, _ in got)
    # Agent 4 is the only GPU agent seen and there is no agent_info: device 0
    assert _q(
        store,
        "SELECT DISTINCT device, json_extract_string(args, '$.agent') FROM kernels WHERE run_id = ?",
        [run],
    ) == [(0, "Agent 4")]


# ---------------------------------------------------------------------------------------------
# Layout variants (small files written here)


def _write(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(header)
        w.writerows(rows)
    return path


AGENT_HEADER = [
    "Node_Id",
    "Logical_Node_Id",
    "Agent_Type",
    "Cu_Count",
    "Wave_Front_Size",
    "Name",
    "Product_Name",
]
AGENTS = [
    [0, 0, "CPU", 0, 0, "cpu", "EPYC"],
    [2, 1, "GPU", 104, 64, "gfx90a", "AMD Instinct MI210"],
    [3, 2, "GPU", 104, 64, "gfx90a", "AMD Instinct MI210"],
]


def test_rocm6_layout_integer_agent_ids(store: Path, tmp_path: Path) -> None:
    """SDK 0.5 (ROCm 6.3): integer node-id Agent_Id, Private/Group_Segment_Size, no Stream_Id."""
    header = [
        "Kind",
        "Agent_Id",
        "Queue_Id",
        "Thread_Id",
        "Dispatch_Id",
        "Kernel_Id",
        "Kernel_Name",
        "Correlation_Id",
        "Start_Timestamp",
        "End_Timestamp",
        "Private_Segment_Size",
        "Group_Segment_Size",
        "Workgroup_Size_X",
        "Workgroup_Size_Y",
        "Workgroup_Size_Z",
        "Grid_Size_X",
        "Grid_Size_Y",
        "Grid_Size_Z",
    ]
    rows = [
        ["KERNEL_DISPATCH", 3, 7, 11, 1, 5, "k(int)", 1, 1000, 1500, 16, 2048, 256, 1, 1, 1000, 4, 1],
        ["KERNEL_DISPATCH", 2, 7, 11, 2, 5, "k(int)", 2, 2000, 2600, 0, 0, 64, 1, 1, 64, 1, 1],
    ]
    d = tmp_path / "out"
    _write(d / "4242_kernel_trace.csv", header, rows)
    _write(d / "4242_agent_info.csv", AGENT_HEADER, AGENTS)
    run = tracekit.ingest([d], store=store)[0].run_id
    got = _q(
        store,
        "SELECT dispatch_id, device, stream, queue_id, grid_x, grid_y, block_x, shared_mem_bytes, scratch_bytes, "
        "dur_ns, json_extract(args, '$.agent_node_id')::INT FROM kernels WHERE run_id = ? ORDER BY 1",
        [run],
    )
    assert got == [(1, 1, "7", "7", 4, 4, 256, 2048, 16, 500, 3), (2, 0, "7", "7", 1, 1, 64, 0, 0, 600, 2)]
    assert _q(store, "SELECT name FROM devices WHERE run_id = ?", [run]) == [("AMD Instinct MI210",)] * 2


def test_counter_passes_and_rocpd_convert_columns(store: Path, tmp_path: Path) -> None:
    """pmc_N folders become the pass; ``rocpd convert`` output (leading Guid) reads the same."""
    header = [
        "Guid",
        "Correlation_Id",
        "Dispatch_Id",
        "Agent_Id",
        "Queue_Id",
        "Process_Id",
        "Thread_Id",
        "Grid_Size",
        "Kernel_Id",
        "Kernel_Name",
        "Workgroup_Size",
        "LDS_Block_Size",
        "Scratch_Size",
        "VGPR_Count",
        "Accum_VGPR_Count",
        "SGPR_Count",
        "Counter_Name",
        "Counter_Value",
        "Start_Timestamp",
        "End_Timestamp",
    ]
    d = tmp_path / "prof"
    for i, (pid, counter) in enumerate(((100, "SQ_WAVES"), (101, "GRBM_GUI_ACTIVE")), start=1):
        _write(
            d / f"pmc_{i}" / "node1" / f"{pid}_counter_collection.csv",
            header,
            [
                ["g", 1, 1, "Agent 2", 1, pid, pid, 64, 1, "k", 64, 0, 0, 8, 0, 16, counter, 10.5 * i, 5, 9],
                ["g", 2, 2, "Agent 2", 1, pid, pid, 64, 1, "k", 64, 0, 0, 8, 0, 16, counter, 1.5, 10, 19],
            ],
        )
        _write(d / f"pmc_{i}" / "node1" / f"{pid}_agent_info.csv", AGENT_HEADER, AGENTS)
    run = tracekit.ingest([d], store=store)[0].run_id
    got = _q(
        store,
        "SELECT rank, pass, counter, device, sum(value), count(*) FROM counters WHERE run_id = ? GROUP BY ALL ORDER BY 1",
        [run],
    )
    assert got == [(0, "pmc_1", "SQ_WAVES", 1, 12.0, 2), (1, "pmc_2", "GRBM_GUI_ACTIVE", 1, 22.5, 2)]


def test_type_comes_from_header_not_name(store: Path, tmp_path: Path) -> None:
    path = _write(
        tmp_path / "whatever.csv",
        [
            "Domain",
            "Function",
            "Process_Id",
            "Thread_Id",
            "Correlation_Id",
            "Start_Timestamp",
            "End_Timestamp",
        ],
        [
            ["HIP_RUNTIME_API_EXT", "hipLaunchKernel", 9, 9, 1, 100, 130],
            ["MARKER_CORE_RANGE_API", "step", 9, 9, 2, 90, 200],
        ],
    )
    run = tracekit.ingest([path], store=store)[0].run_id
    assert _q(
        store, "SELECT category, name, dur_ns, pid FROM host_events WHERE run_id = ? ORDER BY 1", [run]
    ) == [("annotation", "step", 110, "9"), ("runtime", "hipLaunchKernel", 30, "9")]


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, store untouched


@pytest.fixture
def populated_store(tmp_path: Path) -> Path:
    store = tmp_path / "populated.duckdb"
    src = _write(
        tmp_path / "seed" / "1_kernel_trace.csv",
        ["Kind", "Agent_Id", "Kernel_Name", "Start_Timestamp", "End_Timestamp"],
        [["KERNEL_DISPATCH", "Agent 1", "k", 1, 2]],
    )
    res = run_cli("ingest", str(src), "--store", str(store))
    assert res.returncode == 0, res.stderr
    return store


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    header = ["Kind", "Agent_Id", "Queue_Id", "Kernel_Name", "Correlation_Id", "End_Timestamp"]
    no_start = _write(tmp / "9_kernel_trace.csv", header, [["KERNEL_DISPATCH", "Agent 1", 1, "k", 1, 5]])
    full = (CSV_DIR / "482913_kernel_trace.csv").read_bytes() if CSV_DIR.is_dir() else b""
    cut_csv = tmp / "cut_kernel_trace.csv"
    cut_csv.write_bytes(
        full[: len(full) // 2]
        if full
        else b'"Kind","Kernel_Name","Start_Timestamp","End_Timestamp"\n"K","k",1'
    )
    cut_json = tmp / "1_results.json"
    whole = (
        RESULTS_JSON.read_bytes()
        if RESULTS_JSON.is_file()
        else b'{"rocprofiler-sdk-tool": [{"metadata": {"pid": 1}}]}'
    )
    cut_json.write_bytes(whole[: len(whole) // 2])
    bad_dir = tmp / "mixed"
    bad_dir.mkdir()
    shutil.copy(no_start, bad_dir / "9_kernel_trace.csv")
    _write(
        bad_dir / "9_hip_api_trace.csv",
        ["Domain", "Function", "Start_Timestamp", "End_Timestamp"],
        [["HIP_RUNTIME_API_EXT", "hipMalloc", 1, 2]],
    )
    return {
        "missing_start": (no_start, "kernel_trace CSV lacks required columns: Start_Timestamp"),
        "truncated_csv": (cut_csv, "malformed CSV at line"),
        "truncated_json": (cut_json, "truncated or malformed JSON"),
        "dir_with_bad_file": (bad_dir, "lacks required columns: Start_Timestamp"),
    }


@pytest.mark.parametrize("case", ["missing_start", "truncated_csv", "truncated_json", "dir_with_bad_file"])
def test_bad_input_one_line_exit_2_store_untouched(tmp_path: Path, populated_store: Path, case: str) -> None:
    path, phrase = _bad_inputs(tmp_path)[case]
    before = sha256(populated_store)
    res = run_cli("ingest", str(path), "--store", str(populated_store))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and phrase in lines[0], lines[0]
    assert "Traceback" not in res.stderr
    assert sha256(populated_store) == before


def test_results_json_without_tool_key_is_not_claimed(tmp_path: Path) -> None:
    p = tmp_path / "1_results.json"
    p.write_text(json.dumps({"agents": [], "rocprofiler-sdk-tool": []}))
    assert not get_parser("rocprofv3_json").sniff(p)
    q = tmp_path / "2_results.json"
    q.write_text('{"rocprofiler-sdk-tool": []}')
    assert get_parser("rocprofv3_json").sniff(q)
    with pytest.raises(TraceInputError, match="holds no process"):
        tracekit.ingest([q], store=tmp_path / "s.duckdb")


@needs_rocprof
def test_results_json_in_a_pass_folder_names_the_pass(store: Path, tmp_path: Path) -> None:
    d = tmp_path / "prof" / "pass_2"
    d.mkdir(parents=True)
    shutil.copy(RESULTS_JSON, d)
    run = tracekit.ingest([tmp_path / "prof"], store=store)[0].run_id
    assert _q(store, "SELECT DISTINCT pass FROM counters WHERE run_id = ?", [run]) == [("pass_2",)]
