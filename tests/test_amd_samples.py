"""The bundled SYNTHETIC AMD samples (``sample_traces/amd_synthetic_*``, made by
``tools/make_amd_samples.py``): one made-up MI300X decode workload written as rocpd SQLite,
rocprofv3 CSV, rocprofv3 JSON and RPD.

Three layers of checks:

1. the files themselves, read here with sqlite3/csv/json only, agree with
   ``amd_synthetic_expected.json`` (so that file can be trusted below), follow the real layouts
   (SDK DDL, CSV headers, JSON schema, RPD DDL: compared with the workspace corpus when present),
   and the generator reproduces them exactly;
2. ``tracekit.ingest`` of each format reproduces the expected totals (kernels, copies, HIP API
   calls, roctx markers, counters, the device);
3. the four ingested runs agree with each other record by record.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS, SAMPLES, TOOLS

import tracekit
from tracekit.parsers import REGISTRY

EXPECTED_PATH = SAMPLES / "amd_synthetic_expected.json"
EXPECTED: dict[str, Any] = json.loads(EXPECTED_PATH.read_text())
PID = EXPECTED["process"]["pid"]
INPUTS: dict[str, Path] = {
    "rocpd": SAMPLES / "amd_synthetic_rocpd" / f"{PID}_results.db",
    "rocprofv3": SAMPLES / "amd_synthetic_csv",
    "rocprofv3_json": SAMPLES / "amd_synthetic_results.json",
    "rpd": SAMPLES / "amd_synthetic.rpd",
}
FORMATS = list(INPUTS)
#: Formats that carry hardware counters and agent properties (RPD has neither).
WITH_COUNTERS = ("rocpd", "rocprofv3", "rocprofv3_json")
#: Formats that give copy sizes (the rocprofv3 CSV has no byte column).
WITH_BYTES = ("rocpd", "rocprofv3_json", "rpd")
#: Formats whose agent records give the memory size (``mem_banks``; agent_info.csv has no such column).
WITH_MEMORY = ("rocpd", "rocprofv3_json")

ROCPROF_CORPUS = CORPUS / "rocprof"
needs_rocprof_corpus = pytest.mark.skipif(
    not ROCPROF_CORPUS.is_dir(),
    reason=f"rocprof corpus not found at {ROCPROF_CORPUS} (only in the project's workspace and CI)",
)

N_KERNELS = EXPECTED["kernel_dispatches"]
PER_KERNEL: dict[str, dict[str, Any]] = EXPECTED["per_kernel"]
COUNTER_SUMS: dict[str, dict[str, float]] = EXPECTED["counters"]["per_kernel"]


def _kernel_table() -> dict[str, tuple[int, int]]:
    return {name: (e["count"], e["total_ns"]) for name, e in PER_KERNEL.items()}


def _rocpd_uuid(con: sqlite3.Connection) -> str:
    return str(con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'uuid'").fetchone()[0])


# --------------------------------------------------------------------------------------------------
# 1. The files, read without tracekit
# --------------------------------------------------------------------------------------------------


def test_expected_file_is_consistent() -> None:
    assert EXPECTED["synthetic"] is True
    assert sum(e["count"] for e in PER_KERNEL.values()) == N_KERNELS
    assert sum(e["total_ns"] for e in PER_KERNEL.values()) == EXPECTED["kernel_time_ns"]
    assert sum(EXPECTED["hip_api_by_function"].values()) == EXPECTED["hip_api_calls"]
    assert EXPECTED["counters"]["rows"] == N_KERNELS * len(EXPECTED["counters"]["names"])
    assert len(EXPECTED["marker_list"]) == EXPECTED["markers"] == EXPECTED["decode_steps"]
    assert EXPECTED["device"]["arch"] == "gfx942" and EXPECTED["device"]["compute_units"] == 304


@pytest.mark.parametrize("fmt", FORMATS)
def test_sample_is_small(fmt: str) -> None:
    path = INPUTS[fmt]
    size = sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size
    assert 0 < size < 200_000, (path, size)


def test_rocpd_file_matches_expected() -> None:
    con = sqlite3.connect(f"file:{INPUTS['rocpd']}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'schema_version'").fetchone() == ("3",)
        uuid = _rocpd_uuid(con)
        assert con.execute(f'SELECT id, string FROM "rocpd_string{uuid}" ORDER BY id LIMIT 1').fetchone() == (1, "")
        kernels = {n: (c, int(t)) for n, c, t in con.execute(
            "SELECT name, count(*), sum(duration) FROM kernels GROUP BY name")}
        assert kernels == _kernel_table()
        assert con.execute("SELECT count(*) FROM rocpd_kernel_dispatch").fetchone() == (N_KERNELS,)
        copies = con.execute("SELECT name, count(*), sum(size), sum(duration) FROM memory_copies GROUP BY name").fetchall()
        assert copies == [(EXPECTED["memory_copy_direction"], EXPECTED["memory_copies"],
                           EXPECTED["memory_copy_bytes"], EXPECTED["memory_copy_time_ns"])]
        api = dict(con.execute(
            "SELECT name, count(*) FROM regions WHERE category = 'HIP_RUNTIME_API_EXT' GROUP BY name").fetchall())
        assert api == EXPECTED["hip_api_by_function"]
        markers = con.execute(
            "SELECT json_extract(extdata, '$.message'), start, duration FROM regions "
            "WHERE category = 'MARKER_CORE_RANGE_API' ORDER BY start").fetchall()
        assert markers == [(m["message"], m["start_ns"], m["dur_ns"]) for m in EXPECTED["marker_list"]]
        sums: dict[str, dict[str, float]] = defaultdict(dict)
        for k, c, v in con.execute("SELECT kernel_name, counter_name, sum(value) FROM counters_collection GROUP BY 1, 2"):
            sums[k][c] = v
        assert sums == COUNTER_SUMS
        assert con.execute("SELECT count(*) FROM rocpd_pmc_event").fetchone() == (
            EXPECTED["counters"]["rocpd_pmc_event_rows"],)
        instances = dict(con.execute(
            "SELECT p.name, count(*) / count(DISTINCT e.event_id) FROM rocpd_pmc_event e "
            "JOIN rocpd_info_pmc p ON p.id = e.pmc_id GROUP BY p.name").fetchall())
        assert instances == EXPECTED["counters"]["instances_per_dispatch"]
        gpu = con.execute(
            "SELECT id, type_index, name, product_name, extdata FROM rocpd_info_agent WHERE type = 'GPU'").fetchall()
        assert len(gpu) == 1
        node, type_index, name, product, ext = gpu[0]
        dev = EXPECTED["device"]
        assert (node, type_index, name, product) == (dev["kfd_node"], dev["hip_index"], dev["arch"], dev["name"])
        ext = json.loads(ext)
        assert (ext["cu_count"], ext["num_xcc"], ext["max_engine_clk_fcompute"]) == (
            dev["compute_units"], dev["xcc_count"], dev["clock_mhz"])
        assert con.execute("SELECT count(*) FROM rocpd_info_agent WHERE type = 'CPU'").fetchone() == (
            EXPECTED["cpu_agents"],)
        # the summary views of the SDK DDL run on the data
        assert con.execute("SELECT sum(total_calls) FROM top_kernels").fetchone() == (N_KERNELS,)
        assert con.execute("SELECT count(*) FROM busy").fetchone()[0] >= 1
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        con.close()


def _csv_rows(name: str) -> list[dict[str, str]]:
    with (INPUTS["rocprofv3"] / f"{PID}_{name}.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_csv_files_match_expected() -> None:
    kernels: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in _csv_rows("kernel_trace"):
        assert r["Agent_Id"] == EXPECTED["device"]["csv_agent_id"]
        kernels[r["Kernel_Name"]][0] += 1
        kernels[r["Kernel_Name"]][1] += int(r["End_Timestamp"]) - int(r["Start_Timestamp"])
        wg = [int(r[f"Workgroup_Size_{a}"]) for a in "XYZ"]
        grid = [-(-int(r[f"Grid_Size_{a}"]) // w) for a, w in zip("XYZ", wg)]
        assert grid in PER_KERNEL[r["Kernel_Name"]]["grids_workgroups"]
        assert wg == PER_KERNEL[r["Kernel_Name"]]["workgroup"]
    assert {k: tuple(v) for k, v in kernels.items()} == _kernel_table()
    copies = _csv_rows("memory_copy_trace")
    assert [(int(c["Start_Timestamp"]), int(c["End_Timestamp"]) - int(c["Start_Timestamp"])) for c in copies] == [
        (c["start_ns"], c["dur_ns"]) for c in EXPECTED["memory_copy_list"]]
    assert {c["Direction"] for c in copies} == {EXPECTED["memory_copy_direction"]}
    assert dict(Counter(r["Function"] for r in _csv_rows("hip_api_trace"))) == EXPECTED["hip_api_by_function"]
    assert [(r["Function"], int(r["Start_Timestamp"])) for r in _csv_rows("marker_api_trace")] == [
        (m["message"], m["start_ns"]) for m in EXPECTED["marker_list"]]
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rows = _csv_rows("counter_collection")
    for r in rows:
        sums[r["Kernel_Name"]][r["Counter_Name"]] += float(r["Counter_Value"])
    assert len(rows) == EXPECTED["counters"]["rows"]
    assert sums == COUNTER_SUMS
    gpus = [a for a in _csv_rows("agent_info") if a["Agent_Type"] == "GPU"]
    assert [(int(a["Node_Id"]), a["Name"], int(a["Cu_Count"]), int(a["Num_Xcc"])) for a in gpus] == [
        (EXPECTED["device"]["kfd_node"], "gfx942", 304, 8)]


def _json_tool() -> dict[str, Any]:
    doc = json.loads(INPUTS["rocprofv3_json"].read_text())
    (tool,) = doc["rocprofiler-sdk-tool"]
    return tool  # type: ignore[no-any-return]


def test_json_file_matches_expected() -> None:
    tool = _json_tool()
    kinds = {i: e for i, e in enumerate(tool["strings"]["buffer_records"])}
    symbols = {s["kernel_id"]: s["formatted_kernel_name"] for s in tool["kernel_symbols"][1:]}
    br = tool["buffer_records"]
    kernels: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in br["kernel_dispatch"]:
        assert kinds[r["kind"]]["kind"] == "KERNEL_DISPATCH"
        assert kinds[r["kind"]]["operations"][r["operation"]] == "KERNEL_DISPATCH_COMPLETE"
        name = symbols[r["dispatch_info"]["kernel_id"]]
        kernels[name][0] += 1
        kernels[name][1] += r["end_timestamp"] - r["start_timestamp"]
    assert {k: tuple(v) for k, v in kernels.items()} == _kernel_table()
    assert [(c["start_timestamp"], c["end_timestamp"] - c["start_timestamp"], c["bytes"]) for c in br["memory_copy"]] == [
        (c["start_ns"], c["dur_ns"], c["bytes"]) for c in EXPECTED["memory_copy_list"]]
    assert {kinds[c["kind"]]["operations"][c["operation"]] for c in br["memory_copy"]} == {
        EXPECTED["memory_copy_direction"]}
    functions = Counter(kinds[r["kind"]]["operations"][r["operation"]] for r in br["hip_api"])
    assert dict(functions) == EXPECTED["hip_api_by_function"]
    messages = {m["key"]: m["value"] for m in tool["strings"]["marker_api"]}
    assert sorted((r["start_timestamp"], messages[r["correlation_id"]["internal"]]) for r in br["marker_api"]) == [
        (m["start_ns"], m["message"]) for m in EXPECTED["marker_list"]]
    names = {c["id"]["handle"]: c["name"] for c in tool["counters"]}
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for rec in tool["callback_records"]["counter_collection"]:
        kernel = symbols[rec["dispatch_data"]["dispatch_info"]["kernel_id"]]
        for v in rec["records"]:
            sums[kernel][names[v["counter_id"]["handle"]]] += v["value"]
    assert sums == COUNTER_SUMS
    gpu = [a for a in tool["agents"] if a["type"] == 2]
    assert [(a["id"]["handle"], a["node_id"], a["name"], a["cu_count"]) for a in gpu] == [
        (EXPECTED["device"]["json_agent_handle"], EXPECTED["device"]["kfd_node"], "gfx942", 304)]


def test_rpd_file_matches_expected() -> None:
    con = sqlite3.connect(f"file:{INPUTS['rpd']}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'schema_version'").fetchone() == ("2",)
        kernels = {n: (c, t) for n, c, t in con.execute(
            "SELECT kernelName, count(*), sum(duration) FROM kernel GROUP BY kernelName")}
        assert kernels == _kernel_table()
        assert {(g, q) for g, q in con.execute("SELECT DISTINCT gpuId, queueId FROM op")} == {
            (EXPECTED["device"]["hip_index"], 0)}
        for name, gx, gy, gz, wx, wy, wz in con.execute(
                "SELECT kernelName, gridX, gridY, gridZ, workgroupX, workgroupY, workgroupZ FROM kernel"):
            assert [gx, gy, gz] in PER_KERNEL[name]["grids_workgroups"]
            assert [wx, wy, wz] == PER_KERNEL[name]["workgroup"]
        copies = con.execute("SELECT start, duration, size FROM copyop ORDER BY start").fetchall()
        assert copies == [(c["start_ns"], c["dur_ns"], c["bytes"]) for c in EXPECTED["memory_copy_list"]]
        assert con.execute("SELECT DISTINCT opType FROM op WHERE description = ''").fetchall() == [
            (EXPECTED["memory_copy_rpd_op_type"],)]
        api = dict(con.execute("SELECT apiName, count(*) FROM api WHERE apiName != 'UserMarker' GROUP BY 1").fetchall())
        assert api == EXPECTED["hip_api_by_function"]
        markers = con.execute("SELECT args, start, end - start FROM api WHERE apiName = 'UserMarker' ORDER BY start")
        assert markers.fetchall() == [(m["message"], m["start_ns"], m["dur_ns"]) for m in EXPECTED["marker_list"]]
    finally:
        con.close()


def _sqlite_master(path: Path) -> list[tuple[str, str, str]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [(t, n, s) for t, n, s in con.execute("SELECT type, name, sql FROM sqlite_master")
                if s is not None and n != "sqlite_sequence"]
    finally:
        con.close()


@needs_rocprof_corpus
def test_rocpd_ddl_is_the_sdk_ddl() -> None:
    """Same statements, in the same order, as the corpus database (its UUID swapped for ours)."""
    corpus = ROCPROF_CORPUS / "rocpd-v3-sample" / "vllm_mi300x_decode_results.db"
    con = sqlite3.connect(f"file:{corpus}?mode=ro", uri=True)
    theirs_uuid = _rocpd_uuid(con)
    theirs_guid = con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'guid'").fetchone()[0]
    con.close()
    con = sqlite3.connect(f"file:{INPUTS['rocpd']}?mode=ro", uri=True)
    ours_uuid = _rocpd_uuid(con)
    ours_guid = con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'guid'").fetchone()[0]
    con.close()
    assert ours_uuid != theirs_uuid and ours_uuid == "_" + ours_guid.replace("-", "_")
    theirs = [(t, n.replace(theirs_uuid, ours_uuid), s.replace(theirs_uuid, ours_uuid).replace(theirs_guid, ours_guid))
              for t, n, s in _sqlite_master(corpus)]
    assert _sqlite_master(INPUTS["rocpd"]) == theirs


@needs_rocprof_corpus
def test_rpd_ddl_is_rocmprofiledata_ddl() -> None:
    assert _sqlite_master(INPUTS["rpd"]) == _sqlite_master(ROCPROF_CORPUS / "rpd" / "matmul_result.rpd")


@needs_rocprof_corpus
def test_csv_headers_are_rocprofv3_headers() -> None:
    corpus = ROCPROF_CORPUS / "rocpd-v3-sample" / "vllm_mi300x_decode_csv"
    for f in sorted(INPUTS["rocprofv3"].iterdir()):
        kind = f.name.split("_", 1)[1]
        (theirs,) = corpus.glob(f"*_{kind}")
        assert f.read_text().splitlines()[0] == theirs.read_text().splitlines()[0], kind


def _schema_errors(schema: dict[str, Any], doc: Any, path: str = "$") -> list[str]:
    """The subset of JSON-Schema draft 7 that the rocprofv3 results schema uses: type, required,
    properties, items. (jsonschema is not a dependency of the project.)"""
    types: dict[str, type | tuple[type, ...]] = {
        "object": dict, "array": list, "string": str, "integer": int, "number": (int, float), "boolean": bool,
    }
    errors: list[str] = []
    t = schema.get("type")
    if isinstance(t, str) and t in types and not isinstance(doc, types[t]):
        return [f"{path}: expected {t}, got {type(doc).__name__}"]
    if isinstance(doc, dict):
        errors += [f"{path}: missing {k!r}" for k in schema.get("required", []) if k not in doc]
        for k, sub in schema.get("properties", {}).items():
            if k in doc and isinstance(sub, dict):
                errors += _schema_errors(sub, doc[k], f"{path}.{k}")
    if isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(doc):
            errors += _schema_errors(schema["items"], item, f"{path}[{i}]")
    return errors


@needs_rocprof_corpus
def test_json_follows_the_results_schema() -> None:
    schema = json.loads((ROCPROF_CORPUS / "rocprofv3-docs-samples" / "rocprofv3-results-json-schema.json").read_text())
    doc = json.loads(INPUTS["rocprofv3_json"].read_text())
    assert _schema_errors(schema, doc) == []
    corpus = json.loads((ROCPROF_CORPUS / "rocpd-v3-sample" / "482913_results.json").read_text())
    ours, theirs = doc["rocprofiler-sdk-tool"][0], corpus["rocprofiler-sdk-tool"][0]
    assert list(ours) == list(theirs)
    assert list(ours["buffer_records"]) == list(theirs["buffer_records"])
    assert [e["kind"] for e in ours["strings"]["buffer_records"]] == [e["kind"] for e in theirs["strings"]["buffer_records"]]
    for kind in ("HIP_RUNTIME_API_EXT", "KERNEL_DISPATCH", "MEMORY_COPY", "MARKER_CORE_RANGE_API"):
        ops = {e["kind"]: e["operations"] for e in theirs["strings"]["buffer_records"]}[kind]
        assert {e["kind"]: e["operations"] for e in ours["strings"]["buffer_records"]}[kind] == ops
    for key in ("kernel_dispatch", "hip_api", "memory_copy", "marker_api"):
        assert set(ours["buffer_records"][key][0]) <= set(theirs["buffer_records"][key][0]), key


def _dump(path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def test_generator_reproduces_the_samples(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(TOOLS / "make_amd_samples.py"), "--outdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    for rel in ("amd_synthetic_results.json", "amd_synthetic_expected.json",
                *(f"amd_synthetic_csv/{f.name}" for f in INPUTS["rocprofv3"].iterdir())):
        assert (tmp_path / rel).read_bytes() == (SAMPLES / rel).read_bytes(), rel
    for rel in (f"amd_synthetic_rocpd/{PID}_results.db", "amd_synthetic.rpd"):
        assert _dump(tmp_path / rel) == _dump(SAMPLES / rel), rel
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["amd_synthetic_rocpd", "amd_synthetic_csv", "amd_synthetic_results.json", "amd_synthetic.rpd",
         "amd_synthetic_expected.json"])


# --------------------------------------------------------------------------------------------------
# 2. tracekit ingest of each format reproduces the expected totals
# --------------------------------------------------------------------------------------------------


def _ingest(store: Path, fmt: str) -> tuple[str, duckdb.DuckDBPyConnection]:
    (res,) = tracekit.ingest([INPUTS[fmt]], store=store)
    assert res.created
    assert res.format == REGISTRY[fmt].run_format, (res.format, fmt)
    return res.run_id, duckdb.connect(str(store), read_only=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ingest_matches_expected(store: Path, fmt: str) -> None:
    run_id, con = _ingest(store, fmt)
    try:
        def q(sql: str) -> list[Any]:
            return con.execute(sql, [run_id]).fetchall()

        kernels = {n: (c, int(t)) for n, c, t in q(
            "SELECT name, count(*), sum(dur_ns) FROM kernels WHERE run_id = ? AND category = 'kernel' GROUP BY name")}
        assert kernels == _kernel_table()
        assert q("SELECT DISTINCT device FROM kernels WHERE run_id = ?") == [(EXPECTED["device"]["hip_index"],)]
        assert q("SELECT DISTINCT rank FROM kernels WHERE run_id = ?") == [(0,)]
        grids: dict[str, set[tuple[int, ...]]] = defaultdict(set)
        for name, gx, gy, gz, bx, by, bz in q(
                "SELECT name, grid_x, grid_y, grid_z, block_x, block_y, block_z FROM kernels "
                "WHERE run_id = ? AND category = 'kernel'"):
            grids[name].add((gx, gy, gz))
            assert [bx, by, bz] == PER_KERNEL[name]["workgroup"], name
        assert {k: sorted(v) for k, v in grids.items()} == {
            k: [tuple(g) for g in e["grids_workgroups"]] for k, e in PER_KERNEL.items()}

        copies = q("SELECT start_ns, dur_ns, bytes FROM kernels WHERE run_id = ? AND category = 'memcpy' ORDER BY start_ns")
        assert [(s, d) for s, d, _ in copies] == [(c["start_ns"], c["dur_ns"]) for c in EXPECTED["memory_copy_list"]]
        want_bytes = [c["bytes"] if fmt in WITH_BYTES else None for c in EXPECTED["memory_copy_list"]]
        assert [b for _, _, b in copies] == want_bytes
        assert q("SELECT count(*) FROM kernels WHERE run_id = ? AND category NOT IN ('kernel', 'memcpy')") == [(0,)]

        api = dict(q("SELECT name, count(*) FROM runtime_calls WHERE run_id = ? GROUP BY name"))
        assert api == EXPECTED["hip_api_by_function"]
        assert q("SELECT count(*) FROM runtime_calls WHERE run_id = ? AND correlation_id IS NULL") == [(0,)]
        # every kernel and copy links to the HIP call that launched it
        launched = dict(q("SELECT kernel_name, api_name FROM launches WHERE run_id = ? AND category = 'kernel'"))
        assert launched == EXPECTED["kernel_launch_functions"]
        assert q("SELECT count(*) FROM launches WHERE run_id = ?") == [(EXPECTED["launches_with_device_work"],)]

        markers = q("SELECT name, start_ns, dur_ns FROM annotations WHERE run_id = ? ORDER BY start_ns")
        assert markers == [(m["message"], m["start_ns"], m["dur_ns"]) for m in EXPECTED["marker_list"]]

        counters = q("SELECT kernel_name, counter, sum(value), count(*), count(DISTINCT dispatch_id) "
                     "FROM counters WHERE run_id = ? GROUP BY 1, 2")
        if fmt not in WITH_COUNTERS:
            assert counters == []
        else:
            sums: dict[str, dict[str, float]] = defaultdict(dict)
            for kernel, counter, total, n, n_dispatch in counters:
                sums[kernel][counter] = total
                assert n == n_dispatch == PER_KERNEL[kernel]["count"], (kernel, counter)
            assert sums == COUNTER_SUMS
            assert q("SELECT DISTINCT device, pass FROM counters WHERE run_id = ?") == [
                (EXPECTED["device"]["hip_index"], None)]

        devices = q("SELECT device, vendor, arch, name, compute_units, warp_size, xcc_count, simd_per_cu, "
                    "max_waves_per_cu, clock_mhz, memory_bytes FROM devices WHERE run_id = ?")
        if fmt in WITH_COUNTERS:
            dev = EXPECTED["device"]
            assert devices == [(dev["hip_index"], "amd", dev["arch"], dev["name"], dev["compute_units"],
                                dev["wave_front_size"], dev["xcc_count"], dev["simd_per_cu"], dev["max_waves_per_cu"],
                                dev["clock_mhz"], dev["memory_bytes"] if fmt in WITH_MEMORY else None)]
        ranks = q("SELECT rank, rank_source, n_trace_events FROM ranks WHERE run_id = ?")
        assert [(r, s) for r, s, _ in ranks] == [(0, "process")]
        assert ranks[0][2] > 0
    finally:
        con.close()


# --------------------------------------------------------------------------------------------------
# 3. The four runs agree with each other
# --------------------------------------------------------------------------------------------------


def test_formats_agree(store: Path) -> None:
    results = tracekit.ingest([INPUTS[f] for f in FORMATS], store=store)
    runs = {fmt: r.run_id for fmt, r in zip(FORMATS, results)}
    assert len(set(runs.values())) == len(FORMATS)
    con = duckdb.connect(str(store), read_only=True)
    try:
        def per_run(sql: str, formats: tuple[str, ...] | list[str] = FORMATS) -> dict[str, list[tuple[Any, ...]]]:
            return {f: sorted(con.execute(sql, [runs[f]]).fetchall()) for f in formats}

        def agree(values: dict[str, list[tuple[Any, ...]]]) -> None:
            first, *rest = values
            for other in rest:
                assert values[other] == values[first], (first, other)

        kernels = per_run("SELECT name, start_ns, dur_ns, device, grid_x, grid_y, grid_z, block_x, block_y, block_z "
                          "FROM kernels WHERE run_id = ? AND category = 'kernel'")
        assert len(kernels["rocpd"]) == N_KERNELS
        agree(kernels)
        agree(per_run("SELECT start_ns, dur_ns, device FROM kernels WHERE run_id = ? AND category = 'memcpy'"))
        agree(per_run("SELECT start_ns, bytes FROM kernels WHERE run_id = ? AND category = 'memcpy'", WITH_BYTES))
        agree(per_run("SELECT category, CASE WHEN category = 'kernel' THEN kernel_name END, api_name, start_ns "
                      "FROM launches WHERE run_id = ?"))  # copies are named by direction, differently per format
        agree(per_run("SELECT name, start_ns, dur_ns FROM runtime_calls WHERE run_id = ?"))
        agree(per_run("SELECT name, start_ns, dur_ns FROM annotations WHERE run_id = ?"))
        # the three rocprofv3 outputs share dispatch ids, correlation ids, counters and devices
        agree(per_run("SELECT dispatch_id, correlation_id, name, start_ns, queue_id, stream, shared_mem_bytes "
                      "IS NOT NULL, scratch_bytes, vgpr_count, accum_vgpr_count, sgpr_count FROM kernels "
                      "WHERE run_id = ? AND category = 'kernel'", WITH_COUNTERS))
        counters = per_run("SELECT dispatch_id, correlation_id, kernel_name, counter, value, device FROM counters "
                           "WHERE run_id = ?", WITH_COUNTERS)
        assert len(counters["rocpd"]) == EXPECTED["counters"]["rows"]
        agree(counters)
        devices = per_run("SELECT device, arch, name, compute_units, xcc_count, clock_mhz, warp_size FROM devices "
                          "WHERE run_id = ?", WITH_COUNTERS)
        assert devices["rocpd"] == [(0, "gfx942", "AMD Instinct MI300X", 304, 8, 2100.0, 64)]
        agree(devices)
    finally:
        con.close()
