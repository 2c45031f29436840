"""What a profiler engineer relies on beyond totals, checked on real traces against the JSON itself:
graph launches, Triton cpu_ops, AMD stream 0, sub-µs kernels, the 2021 schema, ranks, devices."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import KINETO, needs_shared

import tracekit

pytestmark = needs_shared


def _events(path: Path) -> list[dict[str, Any]]:
    return json.loads(gzip.open(path).read())["traceEvents"]


def _one(set_name: str) -> Path:
    return next((KINETO / set_name).glob("*.json.gz"))


def _ingest(store: Path, path: Path) -> tuple[duckdb.DuckDBPyConnection, str]:
    run_id = tracekit.ingest([path], store=store)[0].run_id
    return duckdb.connect(str(store), read_only=True), run_id


def test_hip_graph_launch_maps_one_call_to_many_kernels(store: Path) -> None:
    path = _one("tracelens-mi300x-vllm-decode-graph")
    evs = _events(path)
    graph_corr = {e["args"]["correlation"] for e in evs if e.get("cat") == "cuda_runtime" and e["name"] == "hipGraphLaunch"}
    want = Counter(e["args"]["correlation"] for e in evs
                   if e.get("cat") == "kernel" and e["args"].get("correlation") in graph_corr)
    assert graph_corr and max(want.values()) > 1
    con, run_id = _ingest(store, path)
    got = dict(con.execute("SELECT correlation_id, n_kernels FROM graph_launches WHERE run_id = ?", [run_id]).fetchall())
    assert set(got) == graph_corr
    assert {c: n for c, n in got.items() if n} == dict(want)
    kinds = dict(con.execute("SELECT api_kind, count(*) FROM launches WHERE run_id = ? GROUP BY ALL", [run_id]).fetchall())
    assert kinds["graph_launch"] == sum(want.values())
    assert con.execute("SELECT vendor, device_name FROM runs").fetchone()[0] == "amd"
    # HIP's default stream is 0, and every kernel is on it in this trace
    assert con.execute("SELECT DISTINCT stream FROM kernels WHERE category = 'kernel'").fetchall() == [("0",)]


def test_cuda_graph_launch_on_a100(store: Path) -> None:
    path = _one("hta-a100-train-rank0of16")
    evs = _events(path)
    graph_corr = {e["args"]["correlation"] for e in evs if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"}
    behind = Counter(e["cat"] for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                     and e["args"].get("correlation") in graph_corr)
    con, _ = _ingest(store, path)
    n, kernels, copies = con.execute(
        "SELECT count(*), sum(n_kernels), sum(n_copy_set_nodes) FROM graph_launches").fetchone()
    assert n == len(graph_corr)
    assert kernels == behind["kernel"] > n  # many kernels behind each graph launch
    assert copies == behind["gpu_memcpy"] + behind["gpu_memset"] > 0
    dev = con.execute("SELECT name, compute_units, warp_size, arch, memory_bytes FROM devices WHERE device = 0").fetchone()
    assert dev == ("NVIDIA A100-SXM4-80GB", 108, 32, "sm_80", 84990623744)
    assert con.execute("SELECT vendor, device_name FROM runs").fetchone() == ("nvidia", "NVIDIA A100-SXM4-80GB")
    rank = con.execute("SELECT rank, world_size, rank_source FROM ranks").fetchone()
    assert rank == (0, 16, "distributedInfo")


def test_triton_cpu_op_with_stream_is_host_time_not_device_time(store: Path) -> None:
    path = _one("hta-a100-triton-tiny")
    evs = _events(path)
    triton = [e for e in evs if e.get("cat") == "cpu_op" and "stream" in e.get("args", {})]
    kernel = [e for e in evs if e.get("cat") == "kernel"]
    assert len(triton) == 1 and len(kernel) == 1
    con, _ = _ingest(store, path)
    assert con.execute("SELECT count(*), sum(dur_ns) FROM kernels").fetchone() == (1, round(kernel[0]["dur"] * 1000))
    row = con.execute("SELECT dur_ns, triton_stream FROM ops WHERE name = ?", [triton[0]["name"]]).fetchone()
    assert row == (round(triton[0]["dur"] * 1000), str(triton[0]["args"]["stream"]))
    # The kernel was launched by cuLaunchKernel, which must count as a kernel launch.
    assert con.execute("SELECT api_name, api_kind FROM launches").fetchall() == [("cuLaunchKernel", "kernel_launch")]


def test_sub_microsecond_kernels_keep_their_nanoseconds(store: Path) -> None:
    path = _one("tracelens-mi300x-qwen05b-inference")
    device = [e for e in _events(path) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    short = [e for e in device if e["dur"] < 1.0]
    assert short, "the MI300X inference trace has sub-µs device events"
    con, _ = _ingest(store, path)
    got = sorted(r[0] for r in con.execute("SELECT dur_ns FROM kernels WHERE dur_ns < 1000").fetchall())
    assert got == sorted(round(e["dur"] * 1000) for e in short)
    first = min(device, key=lambda e: e["ts"])
    assert con.execute("SELECT min(start_ns) FROM kernels").fetchone() == (round(first["ts"] * 1000),)


def test_2021_schema_categories_and_lowercase_external_id(store: Path) -> None:
    path = _one("kineto-v100-resnet50-train-2021")
    evs = _events(path)
    ext = Counter(e["args"]["external id"] for e in evs if e.get("cat") == "Kernel")
    con, _ = _ingest(store, path)
    got = Counter(dict(con.execute("SELECT external_id, count(*) FROM kernels WHERE trace_category = 'Kernel' GROUP BY ALL").fetchall()))
    assert got == ext
    n_ops = sum(1 for e in evs if e.get("cat") == "Operator" and e.get("ph") == "X")
    assert con.execute("SELECT count(*) FROM ops WHERE trace_category = 'Operator'").fetchone() == (n_ops,)
    n_rt = sum(1 for e in evs if e.get("cat") == "Runtime")
    assert con.execute("SELECT count(*) FROM runtime_calls WHERE trace_category = 'Runtime'").fetchone() == (n_rt,)
    # every 2021 kernel is linked to its cudaLaunchKernel through the correlation id
    n_kernels = sum(ext.values())
    assert con.execute("SELECT count(*) FROM launches WHERE category = 'kernel'").fetchone() == (n_kernels,)


def test_amd_launch_names_are_kernel_launches(store: Path) -> None:
    path = _one("hta-mi250-train-tiny")
    evs = _events(path)
    names = Counter(e["name"] for e in evs if e.get("cat") == "cuda_runtime" and "Launch" in e["name"])
    assert {"hipLaunchKernel", "hipExtModuleLaunchKernel"} <= set(names)
    con, _ = _ingest(store, path)
    got = dict(con.execute("SELECT name, count(*) FROM runtime_calls WHERE api_kind = 'kernel_launch' GROUP BY ALL").fetchall())
    assert got == {k: v for k, v in names.items() if k in got} and set(got) >= {"hipLaunchKernel", "hipExtModuleLaunchKernel"}
    n_kernels = sum(1 for e in evs if e.get("cat") == "kernel")
    assert con.execute("SELECT count(*) FROM launches WHERE api_kind = 'kernel_launch' AND category = 'kernel'").fetchone() == (n_kernels,)
    assert con.execute("SELECT vendor FROM runs").fetchone() == ("amd",)


def test_two_rank_directory_is_one_run(store: Path) -> None:
    set_dir = KINETO / "hta-train-2ranks-of128-sampled"
    res = tracekit.ingest([set_dir], store=store)
    assert len(res) == 1 and res[0].n_files == 2
    con = duckdb.connect(str(store), read_only=True)
    ranks = con.execute("SELECT rank, world_size, rank_source, path FROM ranks ORDER BY rank").fetchall()
    assert [(r[0], r[1], r[2]) for r in ranks] == [(0, 128, "distributedInfo"), (1, 128, "distributedInfo")]
    assert ranks[0][3].endswith("sampled_rank-0.json.gz") and ranks[1][3].endswith("sampled_rank-1.json.gz")
    for rank, path in ((0, "sampled_rank-0.json.gz"), (1, "sampled_rank-1.json.gz")):
        n = sum(1 for e in _events(set_dir / path) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
        assert con.execute("SELECT count(*) FROM kernels WHERE rank = ?", [rank]).fetchone() == (n,)
    assert con.execute("SELECT n_ranks, n_files FROM runs").fetchone() == (2, 2)


def test_mtia_device_events_and_vendor(store: Path) -> None:
    path = _one("hta-mtia-inference")
    evs = _events(path)
    n_ccp = sum(1 for e in evs if e.get("cat") == "mtia_ccp_events")
    con, _ = _ingest(store, path)
    assert con.execute("SELECT count(*) FROM kernels WHERE category = 'mtia_ccp'").fetchone() == (n_ccp,)
    assert con.execute("SELECT count(*) FROM kernels WHERE category <> 'mtia_ccp'").fetchone() == (0,)
    assert con.execute("SELECT vendor, device_name FROM runs").fetchone() == ("other", "ARTEMIS")


@pytest.mark.parametrize("set_name,vendor,device", [
    ("tracelens-h100-owlv2-inference", "nvidia", "NVIDIA H100 80GB HBM3"),
    ("tracelens-mi300x-owlv2-inference", "amd", "AMD Instinct MI300X VF"),
    ("tracelens-b200-vllm-eager-inference-rank0of8", "nvidia", "NVIDIA B200"),
])
def test_vendor_and_device_from_the_trace(store: Path, set_name: str, vendor: str, device: str) -> None:
    con, _ = _ingest(store, _one(set_name))
    assert con.execute("SELECT vendor, device_name FROM runs").fetchone() == (vendor, device)


def test_skipped_events_are_accounted_for(store: Path) -> None:
    path = _one("tracelens-mi300x-sglang-qwen3-8b-prefilldecode")
    evs = _events(path)
    n_py = sum(1 for e in evs if e.get("cat") == "python_function")
    n_flow = sum(1 for e in evs if e.get("ph") in ("s", "f", "t"))
    con, _ = _ingest(store, path)
    row = con.execute("SELECT n_trace_events, n_python_events, n_flow_events, n_other_skipped FROM ranks").fetchone()
    kept = con.execute("SELECT (SELECT count(*) FROM kernels) + (SELECT count(*) FROM host_events)").fetchone()[0]
    assert row[0] == len(evs) and row[1] == n_py and row[2] == n_flow
    assert row[3] == len(evs) - n_py - n_flow - kept
    n_x_other = sum(1 for e in evs if e.get("ph") != "X" and e.get("ph") not in ("s", "f", "t"))
    assert row[3] == n_x_other


def test_unix_epoch_microseconds_convert_to_exact_nanoseconds(store: Path) -> None:
    """ts ~1.7e15 µs: ×1000 in double precision would quantise to 256 ns; tracekit is exact."""
    path = _one("hta-a100-alexnet-cudasync")
    kernels = [e for e in _events(path) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert min(e["ts"] for e in kernels) > 1e15
    con, _ = _ingest(store, path)
    got = sorted(r[0] for r in con.execute("SELECT start_ns FROM kernels").fetchall())
    assert got == sorted(int(e["ts"]) * 1000 for e in kernels)  # integer µs in this trace: exact ns
    assert con.execute("SELECT captured_at::DATE FROM runs").fetchone()[0].isoformat() == "2023-09-27"


def test_vendor_from_cuda_call_names_without_device_properties(store: Path) -> None:
    res = tracekit.ingest([KINETO / "hta-train-2ranks-of128-sampled"], store=store)
    assert res[0].vendor == "nvidia"


def test_2021_profiler_steps_are_annotations(store: Path) -> None:
    path = _one("kineto-v100-resnet50-train-2021")
    steps = sorted(e["name"] for e in _events(path) if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X")
    con, _ = _ingest(store, path)
    got = sorted(r[0] for r in con.execute("SELECT name FROM annotations WHERE is_profiler_step").fetchall())
    assert got == steps and len(steps) == 6


def test_kernels_link_to_their_launching_op(store: Path) -> None:
    """kernel -> runtime call (correlation) -> framework op (External id), as the JSON states it."""
    path = _one("tracelens-h100-qwen05b-inference")
    evs = _events(path)
    ops = {e["args"]["External id"]: e for e in evs if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    runtime = {e["args"]["correlation"]: e for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    want: Counter[str] = Counter()
    for k in (e for e in evs if e.get("cat") == "kernel"):
        r = runtime.get(k["args"]["correlation"])
        op = ops.get(r["args"].get("External id")) if r else None
        if op is not None:
            want[op["name"]] += 1
    assert sum(want.values()) > 1000 and want["aten::mm"] > 0
    con, _ = _ingest(store, path)
    got = Counter(dict(con.execute(
        "SELECT op_name, count(*) FROM kernel_ops WHERE op_name IS NOT NULL AND category = 'kernel' GROUP BY ALL").fetchall()))
    assert got == want
    dims = con.execute("SELECT input_dims FROM kernel_ops WHERE op_name = 'aten::mm' LIMIT 1").fetchone()[0]
    assert json.loads(dims) and all(isinstance(d, list) for d in json.loads(dims))


def test_python_events_are_stored_on_request(tmp_path: Path) -> None:
    path = _one("tracelens-mi300x-sglang-qwen3-8b-prefilldecode")
    n_py = sum(1 for e in _events(path) if e.get("cat") == "python_function")
    assert n_py > 50_000
    store = tmp_path / "py.duckdb"
    tracekit.ingest([path], store=store, python_events=True)
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM host_events WHERE category = 'python'").fetchone() == (n_py,)
    assert con.execute("SELECT n_python_events, n_other_skipped FROM ranks").fetchone()[0] == 0
    con.close()
