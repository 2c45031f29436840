"""launch_idle on real traces: busy/idle over the steady window, the host-wait split (HIP stream 0
and graph replays), kernels per step and the graph saving, each recomputed here in plain Python
from the trace JSON (or, for RPD, from the stored rows with a Python interval union)."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from itertools import pairwise
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS, KINETO, SAMPLES, needs_shared

import tracekit
from tracekit.analysis import analyze_run
from tracekit.analysis.launch_idle import (
    GRAPH_RESIDUAL_GAP_NS,
    KERNEL_WAIT_NS,
    MIN_ROWS_TO_TRIM,
    TRIM_FRACTION,
)

VLLM_GRAPH = KINETO / "tracelens-mi300x-vllm-decode-graph" / "graph_execution.json.gz"
SGLANG = KINETO / "tracelens-mi300x-sglang-qwen3-8b-decode" / "sglang_Qwen3-8B_decode.json.gz"
B200_EAGER = KINETO / "tracelens-b200-vllm-eager-inference-rank0of8" / "eager_trace.json.gz"
RPD = CORPUS / "rocprof" / "rpd" / "vllm_mi300_mytrace.rpd.gz"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
GRAPH_CALLS = re.compile(r"^(cuda|cu|hip)GraphLaunch")
DIRECT_CALLS = re.compile(r"^(cudaLaunchKernel|cuLaunchKernel|hipLaunchKernel|hipModuleLaunchKernel|hipExtModuleLaunchKernel)")


# ---- independent reference implementation over the JSON events -------------------------------

def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as fh:
        return list(json.loads(fh.read())["traceEvents"])


def _device_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"s": float(e["ts"]) * 1000, "e": (float(e["ts"]) + float(e.get("dur", 0))) * 1000,
         "corr": e.get("args", {}).get("correlation"), "cat": e["cat"], "stream": e.get("args", {}).get("stream")}
        for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS
    ]


def _calls(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            out[e["args"]["correlation"]] = {"name": e["name"], "s": float(e["ts"]) * 1000,
                                             "e": (float(e["ts"]) + float(e["dur"])) * 1000}
    return out


def _window(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Trim k rows by count at each end (the documented steady-window rule)."""
    n = len(rows)
    k = max(1, int(n * TRIM_FRACTION)) if n >= MIN_ROWS_TO_TRIM else 0
    return sorted(r["s"] for r in rows)[k], sorted((r["e"] for r in rows), reverse=True)[k]


def _islands(rows: list[dict[str, Any]], lo: float, hi: float) -> list[dict[str, Any]]:
    """Union of the intervals clipped to [lo, hi]; each island keeps the row that opens it."""
    clipped = sorted(
        ({**r, "s": max(r["s"], lo), "e": min(r["e"], hi)} for r in rows if min(r["e"], hi) > max(r["s"], lo)),
        key=lambda r: (r["s"], r["e"]),
    )
    out: list[dict[str, Any]] = []
    for r in clipped:
        if out and r["s"] <= out[-1]["e"]:
            out[-1]["e"] = max(out[-1]["e"], r["e"])
        else:
            out.append({"s": r["s"], "e": r["e"], "first": r})
    return out


def _idle_split(rows: list[dict[str, Any]], calls: dict[int, dict[str, Any]]) -> dict[str, float]:
    lo, hi = _window(rows)
    isl = _islands(rows, lo, hi)
    first_of_graph: dict[Any, float] = {}
    for r in rows:
        c = calls.get(r["corr"])
        if c and GRAPH_CALLS.match(c["name"]):
            first_of_graph[r["corr"]] = min(first_of_graph.get(r["corr"], r["s"]), r["s"])
    out = {"window": hi - lo, "busy": sum(i["e"] - i["s"] for i in isl), "host_wait": 0.0,
           "between": 0.0, "other": 0.0, "launch_gap": 0.0}
    for prev, cur in pairwise(isl):
        gap, first = cur["s"] - prev["e"], cur["first"]
        c = calls.get(first["corr"])
        if c and GRAPH_CALLS.match(c["name"]):
            submit = c["s"] if first["s"] <= first_of_graph[first["corr"]] else None
        else:
            submit = c["e"] if c else None
        if submit is not None and submit > prev["e"]:
            out["host_wait"] += gap
        elif gap < KERNEL_WAIT_NS:
            out["between"] += gap
            if c and DIRECT_CALLS.match(c["name"]):
                out["launch_gap"] += max(0.0, gap - GRAPH_RESIDUAL_GAP_NS)
        else:
            out["other"] += gap
    return out


def _analyze(path: Path, store: Path) -> tuple[dict[str, float | None], list[dict[str, Any]]]:
    [run] = tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store))
    analyze_run(con, run.run_id, ["launch_idle"])
    metrics = dict(con.execute(
        "SELECT name, value FROM metrics WHERE run_id = ? AND analyzer = 'launch_idle'", [run.run_id]).fetchall())
    findings = [
        {"severity": s, "title": t, "evidence": json.loads(ev), "saving_ns": sn, "saving_fraction": sf}
        for s, t, ev, sn, sf in con.execute(
            "SELECT severity, title, evidence, saving_ns, saving_fraction FROM findings WHERE run_id = ?",
            [run.run_id]).fetchall()
    ]
    con.close()
    return metrics, findings


# ---- tests ------------------------------------------------------------------------------------

@needs_shared
def test_vllm_graph_decode_hip_stream0(tmp_path: Path) -> None:
    events = _events(VLLM_GRAPH)
    rows, calls = _device_rows(events), _calls(events)
    assert {r["stream"] for r in rows} == {0}  # HIP default stream: must not be dropped
    ref = _idle_split(rows, calls)
    metrics, findings = _analyze(VLLM_GRAPH, tmp_path / "s.duckdb")
    assert metrics["device_busy_fraction"] == pytest.approx(ref["busy"] / ref["window"], abs=1e-6)
    assert metrics["device_busy_fraction"] > 0.99
    # the one hipGraphLaunch was submitted 11 ms ahead of its kernels: no host wait at all
    assert metrics["idle_host_wait_fraction"] == ref["host_wait"] / ref["window"] == 0
    graph_rows = [r for r in rows if calls.get(r["corr"], {}).get("name") == "hipGraphLaunch"]
    assert metrics["idle_between_kernels_fraction"] == pytest.approx(ref["between"] / ref["window"], abs=1e-6)
    # kernels per step: kernel rows whose launching call starts inside the execute_… annotation
    [step] = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    s0, s1 = float(step["ts"]) * 1000, (float(step["ts"]) + float(step["dur"])) * 1000
    in_step = [r for r in rows if r["cat"] == "kernel" and r["corr"] in calls and s0 <= calls[r["corr"]]["s"] < s1]
    assert metrics["kernels_per_step"] == len(in_step) == 425
    n_kernels = sum(1 for r in rows if r["cat"] == "kernel")
    assert metrics["graph_launched_kernel_fraction"] == pytest.approx(len(graph_rows) / n_kernels)
    [f] = findings
    assert f["severity"] == "info" and f["title"].startswith("graph launches already used: 1 replay(s), 421 of 425")


@needs_shared
def test_sglang_stray_kernel_does_not_make_the_step_idle(tmp_path: Path) -> None:
    events = _events(SGLANG)
    rows, calls = _device_rows(events), _calls(events)
    ref = _idle_split(rows, calls)
    full = _islands(rows, min(r["s"] for r in rows), max(r["e"] for r in rows))
    full_busy = sum(i["e"] - i["s"] for i in full) / (max(r["e"] for r in rows) - min(r["s"] for r in rows))
    assert full_busy < 0.05  # a kernel 0.46 s before the decode step dominates the plain span
    metrics, _ = _analyze(SGLANG, tmp_path / "s.duckdb")
    assert metrics["device_busy_fraction"] == pytest.approx(ref["busy"] / ref["window"], abs=1e-6)
    assert metrics["device_busy_fraction"] > 0.9
    for key, name in [("host_wait", "idle_host_wait_fraction"), ("between", "idle_between_kernels_fraction"),
                      ("other", "idle_other_fraction")]:
        assert metrics[name] == pytest.approx(ref[key] / ref["window"], abs=1e-6), name
    # graph replay: the hipGraphLaunch call (1.6 ms) ends after 73 of its nodes have run, so a
    # "call end > previous end" rule applied to every node would call the 274 µs gap inside the
    # graph a host wait; only the replay's first node can wait for the host
    graph_rows = sorted((r for r in rows if calls.get(r["corr"], {}).get("name") == "hipGraphLaunch"),
                        key=lambda r: r["s"])
    assert sum(1 for a, b in pairwise(graph_rows) if calls[b["corr"]]["e"] > a["e"]) == 73
    in_graph_gaps = [b["s"] - a["e"] for a, b in pairwise(graph_rows)]
    assert max(in_graph_gaps) == pytest.approx(ref["other"], abs=2) and ref["other"] > 250_000
    [step] = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("step[")]
    s0, s1 = float(step["ts"]) * 1000, (float(step["ts"]) + float(step["dur"])) * 1000
    in_step = [r for r in rows if r["cat"] == "kernel" and r["corr"] in calls and s0 <= calls[r["corr"]]["s"] < s1]
    assert metrics["kernels_per_step"] == len(in_step)
    # the step's device time is the steady window, not the 465 ms host annotation
    assert metrics["step_device_time"] == pytest.approx(ref["window"] / 1e6, rel=1e-6)


@needs_shared
def test_b200_eager_is_launch_bound(tmp_path: Path) -> None:
    events = _events(B200_EAGER)
    rows, calls = _device_rows(events), _calls(events)
    ref = _idle_split(rows, calls)
    metrics, findings = _analyze(B200_EAGER, tmp_path / "s.duckdb")
    w = ref["window"]
    assert metrics["device_busy_fraction"] == pytest.approx(ref["busy"] / w, abs=1e-6)
    assert metrics["idle_host_wait_fraction"] == pytest.approx(ref["host_wait"] / w, abs=1e-6)
    assert metrics["idle_between_kernels_fraction"] == pytest.approx(ref["between"] / w, abs=1e-6)
    assert metrics["idle_host_wait_fraction"] > 0.8 and metrics["graph_launched_kernel_fraction"] == 0
    direct = [(r["e"] - r["s"], calls[r["corr"]]) for r in rows
              if r["cat"] == "kernel" and DIRECT_CALLS.match(calls.get(r["corr"], {}).get("name", "~"))]
    kernel_us = statistics.median(d for d, _ in direct) / 1e3
    call_us = statistics.median(c["e"] - c["s"] for _, c in direct) / 1e3
    assert metrics["median_direct_kernel_us"] == pytest.approx(kernel_us, rel=1e-6)
    assert metrics["median_launch_call_us"] == pytest.approx(call_us, rel=1e-6)
    assert kernel_us < call_us
    [f] = findings
    assert f["severity"] == "critical" and f["title"].startswith("launch-bound: 768 kernels launched one by one")
    assert f["saving_ns"] == pytest.approx(ref["host_wait"] + ref["launch_gap"], abs=2)
    assert f["saving_fraction"] == pytest.approx((ref["host_wait"] + ref["launch_gap"]) / w, abs=1e-6)


@needs_shared
def test_one_far_away_stray_kernel_barely_moves_busy_fraction(tmp_path: Path) -> None:
    with gzip.open(VLLM_GRAPH) as fh:
        doc = json.loads(fh.read())
    first = min((e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"),
                key=lambda e: float(e["ts"]))
    stray = json.loads(json.dumps(first))
    stray["ts"] = float(first["ts"]) - 5_000_000  # 5 s before the workload
    stray["args"]["correlation"] = 987654321
    doc["traceEvents"].append(stray)
    modified = tmp_path / "stray.json.gz"
    modified.write_bytes(gzip.compress(json.dumps(doc).encode()))
    base, _ = _analyze(VLLM_GRAPH, tmp_path / "a.duckdb")
    moved, _ = _analyze(modified, tmp_path / "b.duckdb")
    rows = _device_rows(doc["traceEvents"])
    span = max(r["e"] for r in rows) - min(r["s"] for r in rows)
    naive = sum(i["e"] - i["s"] for i in _islands(rows, -1e300, 1e300)) / span
    assert naive < 0.01  # the plain first-to-last span would call the run idle
    assert abs(moved["device_busy_fraction"] - base["device_busy_fraction"]) < 0.01  # type: ignore[operator]
    assert moved["kernels_per_step"] == base["kernels_per_step"]


@pytest.mark.skipif(not RPD.is_file(), reason=f"RPD trace not found at {RPD} (corpus only)")
def test_rpd_graph_task_kernels(tmp_path: Path) -> None:
    """RPD: 20 hipGraphLaunch replays of `Task` kernels on stream 0x0; busy recomputed in Python
    from the stored rows (no SQL window functions), steps = the 22 execute_model ranges."""
    store = tmp_path / "s.duckdb"
    metrics, findings = _analyze(RPD, store)
    con = duckdb.connect(str(store), read_only=True)
    rows = [{"s": float(s), "e": float(e), "corr": None}
            for s, e in con.execute("SELECT start_ns, end_ns FROM kernels").fetchall()]
    n_steps = con.execute("SELECT count(*) FROM annotations WHERE name = 'execute_model'").fetchall()[0][0]
    con.close()
    lo, hi = _window(rows)
    busy = sum(i["e"] - i["s"] for i in _islands(rows, lo, hi)) / (hi - lo)
    assert metrics["device_busy_fraction"] == pytest.approx(busy, abs=1e-6)
    assert n_steps == 22 and metrics["kernels_per_step"] is not None and 380 <= metrics["kernels_per_step"] <= 420
    assert metrics["graph_launched_kernel_fraction"] == pytest.approx(7720 / 8948)
    assert [f["severity"] for f in findings] == ["info"]


def test_cpu_only_run_has_no_device_metrics(tmp_path: Path) -> None:
    metrics, findings = _analyze(SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz", tmp_path / "s.duckdb")
    assert findings == [] and metrics["device_busy_fraction"] is None and metrics["kernels_per_step"] is None
