"""memory_bound_decode on real captures: TPU v6e op costs, MI300X SGLang and vLLM decode, the CPU
decoder sample. Every expected number is recomputed here from the trace files (json, jax's own
XSpace reader) or from the store's ``op_costs`` view, never from the analyzer's own queries."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS, KINETO, SAMPLES, needs_shared

import tracekit
from tracekit.analysis import library
from tracekit.analysis.base import analyze_run
from tracekit.analysis.memory_bound_decode import gemm_cost

TPU_FILE = CORPUS / "xplane" / "xprof_tpu_v6e_inference" / "tpu_inference_2.xplane.pb"
SGLANG = KINETO / "tracelens-mi300x-sglang-qwen3-8b-decode" / "sglang_Qwen3-8B_decode.json.gz"
VLLM = KINETO / "tracelens-mi300x-vllm-decode-graph" / "graph_execution.json.gz"
CPU = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
MI300X_RIDGE = 1307.4e12 / 5300e9  # AMD's published bf16 dense peak ÷ HBM bandwidth (hardware.toml R-300)


def _analyze(path: Path, store: Path) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    [run] = tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store))
    try:
        analyze_run(con, run.run_id, ["memory_bound_decode"])
        findings = [
            {"severity": s, "title": t, "detail": d, "evidence": json.loads(e)}
            for s, t, d, e in con.execute(
                "SELECT severity, title, detail, evidence FROM findings WHERE analyzer = 'memory_bound_decode'"
            ).fetchall()
        ]
        metrics = dict(con.execute(
            "SELECT name, value FROM metrics WHERE analyzer = 'memory_bound_decode'").fetchall())
    finally:
        con.close()
    return findings, metrics


def _events(path: Path) -> list[dict[str, Any]]:
    return list(json.load(gzip.open(path))["traceEvents"])


def _decode_kernel_time_ns(events: list[dict[str, Any]], window: tuple[float, float]) -> float:
    """Σ kernel dur (ns) of the kernels whose launching runtime call starts inside ``window`` (µs)."""
    call_ts = {e["args"]["correlation"]: e["ts"] for e in events
               if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    lo, hi = window
    return sum(float(e["dur"]) * 1000 for e in events if e.get("cat") == "kernel"
               and lo <= float(call_ts.get(e["args"].get("correlation"), e["ts"])) <= hi)


# ------------------------------------------------------------------------------------------------ TPU


@pytest.mark.skipif(not TPU_FILE.is_file(), reason=f"TPU capture not found at {TPU_FILE} (workspace/CI only)")
def test_tpu_roofline_class_and_achieved_rates(store: Path) -> None:
    from jax.profiler import ProfileData

    findings, metrics = _analyze(TPU_FILE, store)
    # device time of every op execution, by (device, HLO text), from XLA's own reader
    dur_ps: dict[tuple[int, str], float] = defaultdict(float)
    runs: dict[tuple[int, str], int] = defaultdict(int)
    for plane in ProfileData.from_file(str(TPU_FILE)).planes:
        if not plane.name.startswith("/device:TPU:"):
            continue
        dev = int(plane.name.split(":")[2])
        for line in plane.lines:
            if line.name == "XLA Ops":
                for e in line.events:
                    stats = dict(e.stats)
                    dur_ps[(dev, e.name)] += stats["device_duration_ps"]
                    runs[(dev, e.name)] += 1
    con = duckdb.connect(str(store), read_only=True)
    costs = con.execute(
        """SELECT device, hlo_text, name, hlo_category, flops, hbm_read_bytes + hbm_write_bytes
           FROM op_costs WHERE flops IS NOT NULL AND hbm_read_bytes + hbm_write_bytes > 0
             AND hlo_category NOT IN ('copy-start', 'copy-done')"""
    ).fetchall()
    peak_tflops, peak_gbps = con.execute("SELECT max(peak_tflops), max(peak_hbm_gbps) FROM devices").fetchall()[0]
    con.close()
    ridge = peak_tflops * 1e12 / (peak_gbps * 1e9)
    assert round(ridge, 2) == 560.44
    flops = hbm = secs = 0.0
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for dev, text, name, _cat, f, b in costs:
        n = runs[(dev, text)]
        flops += f * n
        hbm += b * n
        secs += dur_ps[(dev, text)] / 1e12
        by_name[name][0] += f * n
        by_name[name][1] += b * n
    assert secs > 0 and len(by_name) == 5
    con = duckdb.connect(str(store), read_only=True)
    library.install(con)
    busy_ns, window_ns = con.execute("SELECT sum(busy_ns), sum(window_ns) FROM run_window").fetchall()[0]
    con.close()
    # figures of the costed ops, named as such; the run's own mbu/mfu are never stored from them
    assert metrics["costed_achieved_tflops"] == pytest.approx(flops / secs / 1e12, rel=1e-6)
    assert metrics["costed_achieved_hbm_gbps"] == pytest.approx(hbm / secs / 1e9, rel=1e-6)
    assert metrics["costed_mbu"] == pytest.approx(hbm / secs / (peak_gbps * 1e9), rel=1e-6)
    assert metrics["costed_mfu"] == pytest.approx(flops / secs / (peak_tflops * 1e12), rel=1e-6)
    assert metrics["costed_arithmetic_intensity"] == pytest.approx(flops / hbm, rel=1e-9)
    assert "mbu" not in metrics and "mfu" not in metrics
    # they cover 3.5 % of device busy time (XProf: 4.35 % HBM utilisation over the whole run)
    assert metrics["cost_coverage"] == pytest.approx(secs * 1e9 / busy_ns, rel=1e-6)
    assert 0.03 < (metrics["cost_coverage"] or 0) < 0.04
    # run-wide lower bound: Σ costed bytes ÷ (Σ device windows × peak)
    assert metrics["mbu_lower_bound"] == pytest.approx(hbm / (window_ns / 1e9 * peak_gbps * 1e9), rel=1e-6)
    assert (metrics["mbu_lower_bound"] or 1) < 0.0435
    [f] = findings
    assert "3.5% of device busy time with op costs" in f["title"] and "run-wide HBM use ≥ 2.2%" in f["title"]
    assert f["severity"] == "info" and "decode" not in f["title"]
    ops = {o["name"]: o for o in f["evidence"]["ops"]}
    assert set(ops) == set(by_name)
    for name, (fl, by) in by_name.items():
        want = "memory-bound" if fl / by < ridge else "compute-bound"
        assert ops[name]["roofline_class"] == want, name
        assert ops[name]["arithmetic_intensity"] == pytest.approx(fl / by, rel=1e-9)
    # a host-offload stress test: every counted op is memory-bound (AI ≤ 0.125 FLOP/B)
    assert metrics["costed_memory_bound_time_fraction"] == 1.0
    assert f["evidence"]["time_base"].startswith("device_dur_ns")
    assert "no decode is claimed" in f["detail"].lower()
    assert "decode_step_time_ms" not in metrics


# ------------------------------------------------------------------------------------------- MI300X


@needs_shared
def test_sglang_decode_is_memory_bound_with_its_numbers(store: Path) -> None:
    events = _events(SGLANG)
    [dec] = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("step[DECODE")]
    execute = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    bs = int(re.search(r"bs=(\d+)", dec["name"]).group(1))  # type: ignore[union-attr]
    lo = min(float(e["ts"]) for e in [dec, *execute])
    hi = max(float(e["ts"]) + float(e["dur"]) for e in [dec, *execute])
    want_ns = _decode_kernel_time_ns(events, (lo, hi))
    findings, metrics = _analyze(SGLANG, store)
    [f] = findings
    ev = f["evidence"]
    # graph-replayed decode: nothing is costed, so no saving can be computed: info, with the bound named
    assert f["severity"] == "info" and "memory-bound by structure" in f["title"] and "(bound)" in f["title"]
    assert ev["tokens_per_step"] == bs == 32 and ev["decode_steps"] == 1
    assert ev["decode_kernel_time_ns"] == pytest.approx(want_ns, abs=len(events))  # µs→ns rounding
    # the step time is the GPU span of the step's work minus the 463 ms blocking copy inside it
    # (steps.step_time_ns), not the sum of its kernels (9.77 ms)
    assert metrics["decode_step_time_ms"] == pytest.approx(10.4545, abs=1e-3)
    # bf16 hipBLASLt GEMMs (…_BBS_…): AI < 2·M/2 B whatever N and K are
    assert ev["weight_bytes_per_element"] == 2.0
    assert metrics["decode_arithmetic_intensity_bound"] == 2 * bs / 2
    assert ev["ridge_flop_per_byte"] == pytest.approx(MI300X_RIDGE)
    assert metrics["decode_batching_headroom_bound"] == pytest.approx(MI300X_RIDGE / bs)
    assert metrics["decode_batching_headroom"] is None  # no measured AI: only the bound
    # graph-replayed kernels carry no shapes: MBU/MFU are missing and the finding says why
    assert metrics["decode_mbu"] is None and metrics["decode_mfu"] is None
    assert metrics["decode_cost_coverage"] == 0.0
    assert ev["decode_graph_replay_time_ns"] > 0.95 * ev["decode_kernel_time_ns"]
    assert "launched by graph replay, which records no op shapes" in f["detail"]


@needs_shared
def test_vllm_decode_graph_costs_the_one_gemm_with_shapes(store: Path) -> None:
    events = _events(VLLM)
    [ann] = [e for e in events if e.get("cat") == "user_annotation"]
    gen = int(re.search(r"_generation_(\d+)\(", ann["name"]).group(1))  # type: ignore[union-attr]
    [mm] = [e for e in events if e.get("name") == "aten::mm"]
    (m, k), (_, n) = mm["args"]["Input Dims"]
    flops = 2.0 * m * n * k
    nbytes = 2.0 * (m * k + k * n + m * n)  # bf16 operands and output
    calls = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"
             and e["args"].get("External id") == mm["args"]["External id"]}
    mm_ns = sum(float(e["dur"]) * 1000 for e in events if e.get("cat") == "kernel"
                and e["args"].get("correlation") in calls)
    total_ns = _decode_kernel_time_ns(events, (float(ann["ts"]), float(ann["ts"]) + float(ann["dur"])))
    findings, metrics = _analyze(VLLM, store)
    [f] = findings
    ev = f["evidence"]
    assert "memory-bound" in f["title"] and ev["tokens_per_step"] == gen == m == 32
    assert "costed ops cover 2.6% of decode time" in f["title"]
    assert ev["decode_flops"] == flops and ev["decode_bytes"] == nbytes
    assert ev["decode_costed_time_ns"] == pytest.approx(mm_ns, abs=1)
    assert ev["decode_costed_bytes_per_s"] == pytest.approx(nbytes / (mm_ns / 1e9), rel=1e-6)
    assert ev["decode_costed_mbu"] == pytest.approx(nbytes / (mm_ns / 1e9) / 5300e9, rel=1e-6)
    assert ev["decode_costed_ai"] == pytest.approx(flops / nbytes) and flops / nbytes < MI300X_RIDGE
    assert metrics["decode_cost_coverage"] == pytest.approx(mm_ns / total_ns, rel=1e-4)
    # 3 % coverage: no decode MBU/MFU metric, and the finding names what is missing
    assert metrics["decode_mbu"] is None and "has no FLOP or byte count" in f["detail"]
    assert "figures of those ops only" in f["detail"]
    assert metrics["decode_step_time_ms"] == pytest.approx(10.7432, abs=1e-3)  # steps.step_time_ns
    # the MoE GEMMs are mxfp4 (_matmul_ogs_…mxfp4…): the bound uses 0.5-byte weights
    assert metrics["decode_arithmetic_intensity_bound"] == 2 * 32 / 0.5
    assert ev["decode_ops"][0]["roofline_class"] == "memory-bound"
    assert metrics["decode_batching_headroom_bound"] == pytest.approx(MI300X_RIDGE / 128)


# ---------------------------------------------------------------------------------------------- CPU


_CPU_POINTWISE = {"aten::mul": 1, "aten::add": 1, "aten::sub": 1, "aten::div": 1, "aten::div_": 1,
                  "aten::pow": 1, "aten::rsqrt": 1, "aten::silu": 1, "aten::softmax": 5, "aten::_softmax": 5}


def _by_hand(e: dict[str, Any]) -> tuple[float, float]:
    """(FLOPs, bytes) of one float32 op of the CPU sample, written out for the ops it runs."""
    name, dims = e["name"], e["args"]["Input Dims"]
    tensors = [d for d, t in zip(dims, e["args"]["Input type"]) if d and t == "float"]
    if name in ("aten::mm", "aten::addmm", "aten::bmm"):
        a, b = (dims[1], dims[2]) if name == "aten::addmm" else (dims[0], dims[1])
        batch = a[0] if len(a) == 3 else 1
        m, k, n = a[-2], a[-1], b[-1]
        bias = dims[0][0] if name == "aten::addmm" else 0
        return 2.0 * batch * m * n * k, 4.0 * (batch * (m * k + k * n + m * n) + bias)
    elements = [math.prod(t) for t in tensors]
    # the sample's broadcasts stretch size-1 dimensions only: the output is the largest operand,
    # except in-place div_, whose output is its first operand
    out = elements[0] if name.endswith("_") else max(elements)
    return float(_CPU_POINTWISE[name] * out), 4.0 * (sum(elements) + out)


def test_cpu_sample_decode_costs_from_shapes_and_no_device(store: Path) -> None:
    events = _events(CPU)
    windows = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
               if e.get("cat") == "user_annotation" and e["name"].startswith("decode_step_")]
    costed = [e for e in events if e.get("cat") == "cpu_op"
              and e["name"] in ("aten::mm", "aten::addmm", "aten::bmm", *_CPU_POINTWISE)]
    # an op enclosing another costed op (aten::softmax around aten::_softmax) is not counted twice
    leaves = [e for e in costed if not any(
        o is not e and o["tid"] == e["tid"] and float(o["ts"]) >= float(e["ts"])
        and float(o["ts"]) + float(o["dur"]) <= float(e["ts"]) + float(e["dur"]) for o in costed)]
    assert {e["name"] for e in costed} - {e["name"] for e in leaves} == {"aten::softmax"}
    flops = nbytes = gemm_flops = gemm_bytes = 0.0
    for e in leaves:
        if not any(lo <= float(e["ts"]) <= hi for lo, hi in windows):
            continue
        fl, b = _by_hand(e)
        flops, nbytes = flops + fl, nbytes + b
        if e["name"] in ("aten::mm", "aten::addmm", "aten::bmm"):
            gemm_flops, gemm_bytes = gemm_flops + fl, gemm_bytes + b
    findings, metrics = _analyze(CPU, store)
    [f] = findings
    ev = f["evidence"]
    con = duckdb.connect(str(store), read_only=True)
    library.install(con)
    n_decode = con.execute("SELECT count(*) FROM steps WHERE phase = 'decode'").fetchall()[0][0]
    con.close()
    assert ev["device"] is None and f["severity"] == "info" and "not identified" in f["detail"]
    if n_decode == 0:
        # the steps view does not (yet) read record_function("decode_step_<i>") as a decode marker:
        # phases come only from it, so no decode is claimed and the costed ops are summarised whole
        assert ev["has_decode"] is False and "decode_step_time_ms" not in metrics
        all_flops = sum(_by_hand(e)[0] for e in leaves)
        all_bytes = sum(_by_hand(e)[1] for e in leaves)
        assert metrics["costed_arithmetic_intensity"] == pytest.approx(all_flops / all_bytes)
        assert "no decode is claimed" in f["detail"]
        return
    assert ev["decode_steps"] == len(windows) == n_decode == 16
    assert ev["decode_flops"] == flops and ev["decode_bytes"] == nbytes
    assert nbytes > gemm_bytes and flops > gemm_flops  # elementwise, norm and softmax traffic counted
    assert metrics["decode_arithmetic_intensity"] == pytest.approx(flops / nbytes)
    # no device timeline: the step time is the median host span of the decode_step_<i> annotations
    assert metrics["decode_step_time_ms"] == pytest.approx(
        sorted(hi - lo for lo, hi in windows)[len(windows) // 2 - 1:len(windows) // 2 + 1][0] / 1e3, rel=0.2)
    kinds = {o["kind"] for o in ev["decode_ops"]}
    assert "aten::mm" in kinds or "aten::addmm" in kinds
    assert metrics["decode_mbu"] is None


def test_helpers() -> None:
    assert gemm_cost("aten::mm", [[32, 2880], [2880, 201088]], ["c10::BFloat16"] * 2) == (
        2.0 * 32 * 2880 * 201088, 2.0 * (32 * 2880 + 2880 * 201088 + 32 * 201088), 32)
    assert gemm_cost("aten::bmm", [[8, 1, 49], [8, 49, 32]], ["float", "float"]) == (
        2.0 * 8 * 49 * 32, 4.0 * 8 * (49 + 49 * 32 + 32), 1)
    assert gemm_cost("aten::mm", [[2, 3], [4, 5]], ["float", "float"]) is None  # K mismatch


H100_QWEN = KINETO / "tracelens-h100-qwen05b-inference" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@needs_shared
def test_h100_attention_and_elementwise_costs_from_recorded_shapes(store: Path) -> None:
    """Flash attention (causal, Sq = Sk = 559) and SiLU of a real HF transformers run: FLOPs, bytes
    and kernel time of each op recomputed from the JSON."""
    events = _events(H100_QWEN)
    corr = defaultdict(set)
    for e in events:
        if e.get("cat") == "cuda_runtime" and "External id" in e.get("args", {}):
            corr[e["args"]["External id"]].add(e["args"]["correlation"])
    kernel_ns: defaultdict[Any, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "kernel":
            kernel_ns[e["args"]["correlation"]] += float(e["dur"]) * 1000

    def expected(name: str) -> tuple[float, float, float, int]:
        flops = nbytes = t = 0.0
        n = 0
        for e in events:
            if e.get("cat") != "cpu_op" or e["name"] != name:
                continue
            a = e["args"]
            dims = a["Input Dims"]
            if name == "aten::_flash_attention_forward":  # q, k, v [B, S, H, D]
                (b, sq, h, d), sk = dims[0], dims[1][1]
                assert a["Concrete Inputs"][8] == "True" and sq == sk  # is_causal
                flops += 4 * b * h * sq * sk * d / 2
                nbytes += 2 * (math.prod(dims[0]) + math.prod(dims[1]) + math.prod(dims[2]) + b * sq * h * d)
            else:  # aten::silu, bf16: one FLOP per element, read once, written once
                flops += math.prod(dims[0])
                nbytes += 2 * 2 * math.prod(dims[0])
            t += sum(kernel_ns[c] for c in corr[a["External id"]])
            n += 1
        return flops, nbytes, t, n

    findings, _ = _analyze(H100_QWEN, store)
    [f] = findings
    ops = f["evidence"]["ops"]
    for name in ("aten::_flash_attention_forward", "aten::silu"):
        flops, nbytes, t, n = expected(name)
        rows = [o for o in ops if o["kind"] == name]
        assert n == sum(o["count"] for o in rows) == 24
        assert sum(o["flops"] for o in rows) == pytest.approx(flops, rel=1e-12)
        assert sum(o["bytes"] for o in rows) == pytest.approx(nbytes, rel=1e-12)
        assert sum(o["time_ns"] for o in rows) == pytest.approx(t, abs=n)
    [att] = [o for o in ops if o["kind"] == "aten::_flash_attention_forward"]
    # AI = 2·559/8 = 139.75 FLOP/B < the H100 ridge (989.4 TFLOP/s ÷ 3350 GB/s = 295.3)
    assert att["arithmetic_intensity"] == pytest.approx(2 * 559 / 8) and att["roofline_class"] == "memory-bound"


def test_attention_and_elementwise_cost_formulas() -> None:
    from tracekit.analysis.memory_bound_decode import attention_cost, elementwise_cost, op_cost

    bf16 = "c10::BFloat16"
    # SDPA [B, H, S, D] with GQA (8 kv heads for 32 q heads), decode: Sq = 1, Sk = 4096, not causal
    q, kv = [4, 32, 1, 128], [4, 8, 4096, 128]
    assert attention_cost("aten::scaled_dot_product_attention", [q, kv, kv, [], [], [], [], []],
                          [bf16] * 3 + [""] * 5, ["", "", "", "", "0.", "False", "", "False"]) == (
        4.0 * 4 * 32 * 1 * 4096 * 128, 2.0 * (4 * 32 * 128 + 2 * 4 * 8 * 4096 * 128 + 4 * 32 * 128), False)
    # causal with Sq = Sk halves the FLOPs; an unknown flag (no Concrete Inputs) does not
    qs = [1, 16, 256, 64]
    full = 4.0 * 16 * 256 * 256 * 64
    causal = attention_cost("aten::_scaled_dot_product_flash_attention", [qs, qs, qs], [bf16] * 3,
                            ["", "", "", "0.", "True", "False", ""])
    unknown = attention_cost("aten::_scaled_dot_product_flash_attention", [qs, qs, qs], [bf16] * 3)
    assert causal is not None and unknown is not None
    assert causal[0] == full / 2 and unknown[0] == full
    # fp32 layer norm without weights: 4 FLOPs per element; reads x, writes y
    assert elementwise_cost("aten::layer_norm", [[2, 8, 64], [], [], [], []], ["float", "ScalarList", "", "", "Scalar"]) == (
        4.0 * 1024, 4.0 * 2 * 1024)
    # vLLM fused_add_rms_norm rewrites input and residual in place
    assert elementwise_cost("_C::fused_add_rms_norm", [[32, 4096], [32, 4096], [4096], []], [bf16] * 3 + ["Scalar"]) == (
        5.0 * 32 * 4096, 2.0 * (32 * 4096 * 4 + 4096))
    # silu_and_mul(out [T, d], x [T, 2d]): 2 FLOPs per output element, every buffer moves once
    assert op_cost("sgl_kernel::silu_and_mul", [[15, 128], [15, 256]], [bf16, bf16]) == (
        2.0 * 15 * 128, 2.0 * 15 * 384, None)
    # broadcast output; integer index arithmetic and shapes that do not broadcast get no cost
    assert elementwise_cost("aten::mul", [[2, 48, 128], [2, 48, 1]], ["float", "float"]) == (
        2 * 48 * 128, 4.0 * (2 * 48 * 128 + 2 * 48 + 2 * 48 * 128))
    assert elementwise_cost("aten::sub", [[32], [], []], ["int", "long int", "Scalar"]) is None
    assert elementwise_cost("aten::add", [[3, 4], [5]], ["float", "float"]) is None


# ------------------------------------------------------------------------------ corpus: no false decode

NO_DECODE = ("tracelens-mi300x-sd35-inference", "tracelens-h100-owlv2-inference", "tracelens-mi300x-owlv2-inference",
             "kineto-v100-resnet50-train-2021", "hta-train-2ranks-of128-sampled",
             "tracelens-mi300x-sglang-qwen3-8b-decode-graph-capture", "tracelens-mi300x-vllm-decode-full-graph-capture",
             "tracelens-mi300x-vllm-prefilldecode-piecewise-graph-capture")
DECODE_METRICS = ("decode_step_time_ms", "decode_arithmetic_intensity", "decode_arithmetic_intensity_bound",
                  "decode_mbu", "decode_mfu", "decode_cost_coverage", "decode_batching_headroom",
                  "decode_batching_headroom_bound")


@needs_shared
@pytest.mark.parametrize("label", NO_DECODE)
def test_no_decode_claimed_on_diffusion_vision_training_and_graph_capture(store: Path, tmp_path: Path,
                                                                           label: str) -> None:
    """Diffusion (SD3.5), vision (OWLv2 ×2), training (ResNet-50, the recsys run whose annotation
    ``## decoder fp8 None ##`` names no decode step) and graph-capture runs: no decode finding, no
    decode metric, no batching advice; a roofline summary, when there is one, states its coverage."""
    from corpus_runs import run_path

    findings, metrics = _analyze(run_path(label, tmp_path), store)
    for f in findings:
        assert "decode" not in f["title"].lower(), f["title"]
        assert "batch" not in f["detail"].lower() and "speculative" not in f["detail"].lower()
        assert f["severity"] == "info" and f["evidence"]["has_decode"] is False
        assert "of device busy time with op costs" in f["title"]
    for name in DECODE_METRICS:
        assert metrics.get(name) is None, name
    assert "mbu" not in metrics and "mfu" not in metrics
    if findings:
        assert 0 < (metrics["cost_coverage"] or 0) <= 1


@needs_shared
@pytest.mark.parametrize("label", ["rocpd-vllm-mi300x-decode", "rocprofv3-json-vllm-mi300x-decode"])
def test_rocprof_decode_step_time_is_the_median_step(store: Path, tmp_path: Path, label: str) -> None:
    """Five vLLM decode_step markers on MI300X: decode_step_time_ms is the median steps.step_time_ns;
    graph-replayed kernels without shapes: the finding says what share is uncosted and why."""
    from corpus_runs import run_path

    findings, metrics = _analyze(run_path(label, tmp_path), store)
    con = duckdb.connect(str(store), read_only=True)
    library.install(con)
    times = sorted(t for (t,) in con.execute("SELECT step_time_ns FROM steps WHERE phase = 'decode'").fetchall())
    con.close()
    assert len(times) == 5
    assert metrics["decode_step_time_ms"] == pytest.approx(times[2] / 1e6)
    [f] = findings
    assert f["severity"] == "info" and "uncosted (graph replay records no op shapes)" in f["title"]
    assert metrics["decode_cost_coverage"] == 0.0 and metrics["decode_mbu"] is None
