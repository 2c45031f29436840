"""fusion: short kernels and chains of unfused elementwise / norm / reduction kernels.

The math is checked exactly on a small hand-written Kineto trace ingested for real. On the corpus,
every number is recomputed here from the raw trace JSON with the standard library: kernel
durations summed from the events, chains rebuilt by walking each stream in time order, the op of
each kernel found through correlation → runtime call → External id → cpu_op, not read back from
the store. The kernel classes are the documented name rules (``categories.NAME_PATTERNS``)
applied to the names in plain Python."""

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
from conftest import KINETO, SAMPLES, needs_shared
from helpers import library_query

import tracekit
from tracekit.analysis import analyze_run
from tracekit.analysis.base import RUN_SHARE_CRITICAL, RUN_SHARE_INFO, RUN_SHARE_WARNING
from tracekit.analysis.categories import NAME_PATTERNS
from tracekit.analysis.fusion import (
    CHAIN_MAX_GAP_NS,
    KERNEL_FIXED_NS,
    MIN_SAVING_NS,
    SHORT_KERNEL_NS,
    op_bytes,
    short_name,
)

VLLM_GRAPH = KINETO / "tracelens-mi300x-vllm-decode-graph" / "graph_execution.json.gz"
SGLANG = KINETO / "tracelens-mi300x-sglang-qwen3-8b-decode" / "sglang_Qwen3-8B_decode.json.gz"
H100_QWEN = KINETO / "tracelens-h100-qwen05b-inference" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
MI300X_QWEN = KINETO / "tracelens-mi300x-qwen05b-inference" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
B200_EAGER = KINETO / "tracelens-b200-vllm-eager-inference-rank0of8" / "eager_trace.json.gz"
MI210 = KINETO / "tracelens-mi210-gpu-only" / "gpu_only_trace.json.gz"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
EXCLUDED = re.compile(r"splitkreduce|radixsort|onesweep|cub::|rocprim::|mul_mat")
#: HBM bandwidth of each corpus device (GB/s = bytes per ns), as the hardware catalog states it
BW = {H100_QWEN: 3350.0, MI300X_QWEN: 5300.0, B200_EAGER: 7700.0, VLLM_GRAPH: 5300.0, SGLANG: 5300.0, MI210: None}

T = 1_000.0  # µs: trace time origin of the hand-written trace
H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32, "maxThreadsPerMultiprocessor": 2048}]


# ---- running the analyzer ---------------------------------------------------------------------

def _analyze(path: Path, store: Path) -> tuple[str, dict[str, float | None], list[dict[str, Any]]]:
    [run] = tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store))
    try:
        analyze_run(con, run.run_id, ["fusion"])
        metrics = dict(con.execute(
            "SELECT name, value FROM metrics WHERE run_id = ? AND analyzer = 'fusion'", [run.run_id]).fetchall())
        findings = [
            {"severity": s, "title": t, "detail": d, "evidence": json.loads(ev), "saving_ns": sn,
             "saving_fraction": sf}
            for s, t, d, ev, sn, sf in con.execute(
                """SELECT severity, title, detail, evidence, saving_ns, saving_fraction FROM findings
                   WHERE run_id = ? AND analyzer = 'fusion'""", [run.run_id]).fetchall()
        ]
    finally:
        con.close()
    return run.run_id, metrics, findings


_query = library_query


# ---- independent reference over the trace JSON ------------------------------------------------

def _klass(name: str, cat: str) -> str:
    """The documented kernel class of a Kineto device event (rules 1 and 3 of categories.py)."""
    if cat != "kernel":
        return "memcpy"
    low = name.lower()
    return next((c for c, pat in NAME_PATTERNS.items() if re.search(pat, low)), "other")


def _reference(path: Path) -> dict[str, Any]:
    """Short-kernel time, chains and their saving, from the JSON events alone.

    Chains: per (device, stream), device events in (start, end) order; an elementwise / norm /
    reduction kernel (not a library-internal pass) continues the chain of the event before it when
    that one is such a kernel too and ended at most CHAIN_MAX_GAP_NS before it. Saving per chain
    of ≥ 2: with op shapes (the kernel's runtime call → External id → cpu_op) and a known device
    bandwidth, Σ dur − max(bytes read by the first costed op + bytes written by the last / bw,
    KERNEL_FIXED_NS); otherwise Σ min(dur, fixed) − min(longest, fixed)."""
    with gzip.open(path) as fh:
        events = json.loads(fh.read())["traceEvents"]
    bw = BW[path]
    ext_of = {e["args"]["correlation"]: e["args"].get("External id") for e in events
              if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    op_of = {e["args"]["External id"]: e for e in events
             if e.get("ph") == "X" and e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    rows = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in DEVICE_CATS:
            continue
        s, d = float(e["ts"]) * 1000, max(float(e["dur"]) * 1000, 0.0)
        cls = _klass(e["name"], e["cat"])
        op = op_of.get(ext_of.get(e["args"].get("correlation")))
        rw = None
        if op is not None and bw is not None and "Input Dims" in op["args"]:
            rw = op_bytes(op["name"], op["args"]["Input Dims"], op["args"].get("Input type", []))
        rows.append({"s": s, "e": s + d, "d": d, "cat": e["cat"], "cls": cls, "name": e["name"], "rw": rw,
                     "op": op["name"] if op else None,
                     "key": (e["args"].get("device"), e["args"].get("stream", e.get("tid"))),
                     "fusable": e["cat"] == "kernel" and cls in ("elementwise", "norm", "reduction")
                     and not EXCLUDED.search(e["name"].lower())})
    kernels = [r for r in rows if r["cat"] == "kernel" and r["cls"] not in ("communication", "memcpy")]
    by_stream: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_stream[r["key"]].append(r)
    chains: list[list[dict[str, Any]]] = []
    for stream_rows in by_stream.values():
        stream_rows.sort(key=lambda r: (r["s"], r["e"]))
        prev = None
        for r in stream_rows:
            if r["fusable"]:
                if prev is not None and prev["fusable"] and r["s"] - prev["e"] <= CHAIN_MAX_GAP_NS:
                    chains[-1].append(r)
                else:
                    chains.append([r])
            prev = r
    chains = [c for c in chains if len(c) >= 2]
    saving = 0.0
    for c in chains:
        t = sum(r["d"] for r in c)
        costed = [r for r in c if r["rw"] is not None]
        if costed:
            ideal = max((costed[0]["rw"][0] + costed[-1]["rw"][1]) / bw, KERNEL_FIXED_NS)
            saving += max(t - ideal, 0.0)
        else:
            saving += sum(min(r["d"], KERNEL_FIXED_NS) for r in c) - min(max(r["d"] for r in c), KERNEL_FIXED_NS)
    return {
        "kernel_ns": sum(r["d"] for r in kernels),
        "short_ns": sum(r["d"] for r in kernels if r["d"] < SHORT_KERNEL_NS),
        "window_ns": max(r["e"] for r in rows) - min(r["s"] for r in rows),  # one capture session
        "chains": chains, "chain_ns": sum(r["d"] for c in chains for r in c), "saving_ns": saving,
        "elementwise_ns": sum(r["d"] for r in rows if r["cls"] == "elementwise"),
        "device_ns": sum(r["d"] for r in rows),
        "events": events,
    }


# ---- the model's building blocks ----------------------------------------------------------------

def test_op_bytes_split_reads_and_writes() -> None:
    bf16, mb = "c10::BFloat16", 1024 * 1024
    # residual add: reads x and r, writes the sum
    assert op_bytes("aten::add", [[1024, 1024], [1024, 1024], []], [bf16, bf16, "Scalar"]) == (4 * mb, 2 * mb)
    # broadcast mul by a weight row: reads both, writes the broadcast shape
    assert op_bytes("aten::mul", [[1024], [1024, 1024]], [bf16, bf16]) == (2 * mb + 2048, 2 * mb)
    # in place: reads and writes the first tensor
    assert op_bytes("aten::add_", [[1024, 1024], [1024, 1024], []], [bf16, bf16, "Scalar"]) == (4 * mb, 2 * mb)
    # custom op whose first argument is the output buffer: silu_and_mul(out [M, N], x [M, 2N])
    assert op_bytes("_C::silu_and_mul", [[8, 1024], [8, 2048]], [bf16, bf16]) == (8 * 2048 * 2, 8 * 1024 * 2)
    # vLLM fused_add_rms_norm(input, residual, weight): rewrites input and residual
    assert op_bytes("_C::fused_add_rms_norm", [[8, 1024], [8, 1024], [1024], []],
                    [bf16, bf16, bf16, "double"]) == (2 * 8 * 1024 * 2 + 2048, 2 * 8 * 1024 * 2)
    assert op_bytes("aten::copy_", [[8], [8], []], [bf16, bf16, "Scalar"]) is None  # no cost rule
    assert op_bytes("aten::add", [[8, 8], []], ["long int", "Scalar"]) is None  # index arithmetic


def test_short_names() -> None:
    assert short_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
                      "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
                      "std::array<char*, 3ul>)") == "add"
    assert short_name("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
                      "float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
                      "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)") == "mean"
    assert short_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
                      "namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(…)") == "CatArrayBatchedCopy"
    assert short_name("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                      "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)") == "fused_add_rms_norm"
    assert short_name("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_"
                      "diiiiiiib") == "add_rmsnorm_quant"
    assert short_name("triton_poi_fused_0") == "triton_poi_fused_0"


# ---- a small hand-written trace, every number exact ---------------------------------------------

ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
       "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
       "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)")
SILU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)")
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
FLASH = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4> >(Flash_fwd_params)"
RSQRT = ("void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::"
         "{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::"
         "{lambda(float)#1}, std::array<char*, 2ul>)")
NEG = ("void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda(at::TensorIteratorBase&)::"
       "{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::neg_kernel_cuda(at::TensorIteratorBase&)::"
       "{lambda(float)#1}, std::array<char*, 2ul>)")
EXP = ("void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda(at::TensorIteratorBase&)::"
       "{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::exp_kernel_cuda(at::TensorIteratorBase&)::"
       "{lambda(float)#1}, std::array<char*, 2ul>)")
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
TRITON = "triton_poi_fused_add_mul_0"
RMSNORM = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, long, long, float)"
NCCL = "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BF16 = "c10::BFloat16"


def _k(name: str, start: float, dur: float, corr: int, stream: int, cat: str = "kernel") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": T + start, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr}}


def _launched(name: str, start: float, dur: float, corr: int, op: str | None = None,
              dims: list[Any] | None = None, types: list[str] | None = None) -> list[dict[str, Any]]:
    """A kernel on stream 7 launched by cudaLaunchKernel inside the op ``op`` (External id = corr)."""
    ev = [_k(name, start, dur, corr, 7),
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
           "ts": T + start - 20, "dur": 5, "args": {"correlation": corr, "External id": corr, "cbid": 211}}]
    if op is not None:
        args: dict[str, Any] = {"External id": corr}
        if dims is not None:
            args |= {"Input Dims": dims, "Input type": types}
        ev.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 100, "tid": 100, "ts": T + start - 21,
                   "dur": 7, "args": args})
    return ev


def _hand_trace(path: Path) -> Path:
    """Device rows (µs after T). Stream 7, each kernel launched one by one by a PyTorch op:

    gemm 0-60 | add 62-102, mul 103-128, silu 129-154 (chain A: 3 kernels, 90 µs) | flash attention
    156-206 | rsqrt 207-210 (alone: a memcpy follows) | memcpy 211-215 | neg 216-220 (alone: the next
    kernel is 200 µs later) | exp 420-424, fill 425-427 (chain B). Stream 8, one cudaGraphLaunch
    replaying triton_poi 300-303 and vLLM rms_norm 304-305.5 (chain C, no op shapes). Stream 20: an
    NCCL all-reduce 230-235 (a short kernel, but communication: not counted).

    Chain A, shapes (H100 SXM, 3350 GB/s): add([4096,4096] bf16 ×2) reads 64 MiB, silu writes its
    [4096,4096] bf16 output, 32 MiB: 100,663,296 B / 3350 B/ns = 30,048.745 ns; saving 90,000 −
    30,048.745. Chain B: exp([64] float) is the only costed op (512 B → the 2 µs floor): 6,000 −
    2,000. Chain C, launch model: min(3,000, 2,000) + min(1,500, 2,000) − min(3,000, 2,000) = 1,500."""
    big = [[4096, 4096], [4096, 4096], []]
    ev = [
        *_launched(GEMM, 0, 60, 1, "aten::mm", [[4096, 4096], [4096, 4096]], [BF16, BF16]),
        *_launched(ADD, 62, 40, 2, "aten::add", big, [BF16, BF16, "Scalar"]),
        *_launched(MUL, 103, 25, 3, "aten::mul", [[4096, 4096], [4096]], [BF16, BF16]),
        *_launched(SILU, 129, 25, 4, "aten::silu", [[4096, 4096]], [BF16]),
        *_launched(FLASH, 156, 50, 5, "aten::_flash_attention_forward"),
        *_launched(RSQRT, 207, 3, 6, "aten::rsqrt", [[4096, 1]], ["float"]),
        _k("Memcpy DtoD (Device -> Device)", 211, 4, 7, 7, cat="gpu_memcpy"),
        *_launched(NEG, 216, 4, 8, "aten::neg", [[4096, 1]], ["float"]),
        *_launched(EXP, 420, 4, 9, "aten::exp", [[64]], ["float"]),
        *_launched(FILL, 425, 2, 10, "aten::fill_", [[64], []], ["float", "Scalar"]),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100, "ts": T + 250,
         "dur": 10, "args": {"correlation": 900, "cbid": 311}},
        _k(TRITON, 300, 3, 900, 8), _k(RMSNORM, 304, 1.5, 900, 8),
        _k(NCCL, 230, 5, 11, 20),
    ]
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": H100_PROPS, "traceEvents": ev}))
    return path


def test_hand_written_trace_chains_and_short_kernels_exactly(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    run_id, metrics, findings = _analyze(_hand_trace(tmp_path / "t.json"), store)
    kernel_us = 60 + 40 + 25 + 25 + 50 + 3 + 4 + 4 + 2 + 3 + 1.5  # no NCCL, no memcpy
    short_us = 3 + 4 + 4 + 2 + 3 + 1.5
    assert metrics["short_kernel_time_fraction"] == pytest.approx(short_us / kernel_us, abs=1e-12)
    assert metrics["unfused_chain_time_fraction"] == pytest.approx((90 + 6 + 4.5) / kernel_us, abs=1e-12)
    fused = 2 * 4096 * 4096 * 2 + 4096 * 4096 * 2
    saving = (90_000 - fused / 3350) + (6_000 - KERNEL_FIXED_NS) + 1_500
    window = 427_000
    assert metrics["fusion_saving_fraction"] == pytest.approx(saving / window, abs=1e-9)
    [f] = findings
    assert RUN_SHARE_WARNING <= saving / window < RUN_SHARE_CRITICAL and f["severity"] == "warning"
    assert f["saving_ns"] == round(saving) and f["saving_fraction"] == pytest.approx(saving / window, abs=1e-9)
    assert f["title"] == (f"unfused elementwise/norm kernel chains: fusing would save ≈{saving / 1e3:.1f} µs "
                          f"({saving / window:.1%} of the device window); top add → mul → silu ×1 "
                          f"({(90_000 - fused / 3350) / window:.1%})")
    ev = f["evidence"]
    assert (ev["chains"], ev["chain_kernels"], ev["chain_time_ns"]) == (3, 7, 100_500)
    assert (ev["chains_shape_model"], ev["chains_launch_model"]) == (2, 1)
    assert (ev["window_ns"], ev["kernel_time_ns"], ev["short_kernel_time_ns"]) == (window, 217_500, 17_500)
    assert ev["hbm_gbps"] == 3350 and ev["device"] == "NVIDIA H100 SXM" and ev["graph_launch_calls"] == 1
    top = ev["top_chains"]
    assert [t["kernels"] for t in top] == [["add", "mul", "silu"], ["exp", "fill"],
                                           ["triton_poi_fused_add_mul_0", "rms_norm"]]
    assert top[0]["ops"] == ["aten::add", "aten::mul", "aten::silu"] and top[0]["fused_bytes"] == fused
    assert top[0]["saving_ns"] == round(90_000 - fused / 3350)
    assert top[1]["fused_bytes"] == 512 and top[1]["saving_ns"] == 4_000
    assert top[2]["fused_bytes"] is None and top[2]["saving_ns"] == 1_500 and top[2]["ops"] == [None, None]
    assert "CUDA/HIP graphs" in f["detail"] and "torch.compile" in f["detail"]
    # the library views: the lone rsqrt and neg and the exp after the 200 µs gap start chains of one
    rows = _query(store, f"""SELECT stream, n_kernels, time_ns, names FROM kernel_chains({CHAIN_MAX_GAP_NS})
                             WHERE run_id = ? ORDER BY start_ns""", [run_id])
    assert [(s, n, t, [short_name(x) for x in names]) for s, n, t, names in rows] == [
        ("7", 3, 90_000, ["add", "mul", "silu"]), ("8", 2, 4_500, ["triton_poi_fused_add_mul_0", "rms_norm"]),
        ("7", 2, 6_000, ["exp", "fill"])]
    starts = _query(store, f"""SELECT dur_ns, chain_start, gap_before_ns FROM chain_kernels({CHAIN_MAX_GAP_NS})
                               WHERE run_id = ? AND stream = '7' ORDER BY start_ns""", [run_id])
    assert starts == [(40_000, True, 2_000), (25_000, False, 1_000), (25_000, False, 1_000), (3_000, True, 1_000),
                      (4_000, True, 1_000), (4_000, True, 200_000), (2_000, False, 1_000)]


def test_gap_longer_than_the_limit_splits_a_chain(tmp_path: Path) -> None:
    """Two elementwise kernels 150 µs apart are not one chain; 100 µs apart they are."""
    def trace(gap: float) -> Path:
        ev = [*_launched(EXP, 0, 4, 1, "aten::exp", [[64]], ["float"]),
              *_launched(NEG, 4 + gap, 4, 2, "aten::neg", [[64]], ["float"])]
        p = tmp_path / f"g{gap}.json"
        p.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": H100_PROPS, "traceEvents": ev}))
        return p
    _, near, _ = _analyze(trace(CHAIN_MAX_GAP_NS / 1e3), tmp_path / "a.duckdb")
    _, far, _ = _analyze(trace(CHAIN_MAX_GAP_NS / 1e3 + 50), tmp_path / "b.duckdb")
    assert near["unfused_chain_time_fraction"] == 1.0 and far["unfused_chain_time_fraction"] == 0.0


def test_thresholds_are_ordered() -> None:
    assert 0 < RUN_SHARE_INFO < RUN_SHARE_WARNING < RUN_SHARE_CRITICAL < 1
    assert MIN_SAVING_NS > KERNEL_FIXED_NS


def test_cpu_only_run_has_null_metrics(tmp_path: Path) -> None:
    _, metrics, findings = _analyze(SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz",
                                    tmp_path / "s.duckdb")
    assert findings == [] and set(metrics) == {"short_kernel_time_fraction", "unfused_chain_time_fraction",
                                                 "fusion_saving_fraction"}
    assert all(v is None for v in metrics.values())


# ---- the expert's reference numbers ---------------------------------------------------------------

@needs_shared
def test_vllm_decode_short_kernels_are_15_5_percent(tmp_path: Path) -> None:
    """TraceLens' "kernels < 10 µs are 15.5 % of decode GPU time": every kernel of the capture is
    launched inside its one execute_… step (425 kernels, 10.67 ms); the denominator is their
    summed time (the 9 memcpys are not kernels: with them 15.41 %)."""
    ref = _reference(VLLM_GRAPH)
    [step] = [e for e in ref["events"] if e.get("cat") == "user_annotation"]
    assert step["name"].startswith("execute_32_context_0") and len([
        e for e in ref["events"] if e.get("cat") == "kernel"]) == 425
    _, metrics, findings = _analyze(VLLM_GRAPH, tmp_path / "s.duckdb")
    assert metrics["short_kernel_time_fraction"] == pytest.approx(ref["short_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["short_kernel_time_fraction"] == pytest.approx(0.155, abs=0.0005)
    # one graph replay: no shapes, so every chain is costed by launch overhead only (≈ 1.4 %: info)
    assert metrics["unfused_chain_time_fraction"] == pytest.approx(ref["chain_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["fusion_saving_fraction"] == pytest.approx(ref["saving_ns"] / ref["window_ns"], abs=1e-9)
    [f] = findings
    assert f["severity"] == "info" and RUN_SHARE_INFO <= f["saving_fraction"] < RUN_SHARE_WARNING
    assert f["evidence"]["chains_shape_model"] == 0 and f["evidence"]["graph_launch_calls"] == 1
    # the MoE router of every layer: Inductor's pad kernel, triton_kernels' top-k and bitmatrix sum
    assert f["evidence"]["top_chains"][0]["kernels"] == ["triton_poi_fused_constant_pad_nd_moe_forward_0",
                                                         "_topk_forward", "_sum_bitmatrix_rows"]
    assert "vLLM/SGLang" in f["detail"] and "graphs remove the host's launch cost" in f["detail"]


@needs_shared
def test_sglang_decode_short_kernels_are_19_9_percent(tmp_path: Path) -> None:
    """19.9 % = the 555 kernels launched inside the outer execute_… step (the whole capture); the
    inner step[DECODE bs=32] holds 550 of them (the 5 others are launched after it closes: sampling)
    and gives 19.8 %."""
    ref = _reference(SGLANG)
    _, metrics, findings = _analyze(SGLANG, tmp_path / "s.duckdb")
    assert metrics["short_kernel_time_fraction"] == pytest.approx(ref["short_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["short_kernel_time_fraction"] == pytest.approx(0.199, abs=0.0005)
    calls = {e["args"]["correlation"]: float(e["ts"]) for e in ref["events"]
             if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    [decode] = [e for e in ref["events"] if e.get("cat") == "user_annotation" and e["name"].startswith("step[DECODE")]
    inside = [e for e in ref["events"] if e.get("cat") == "kernel"
              and decode["ts"] <= calls.get(e["args"]["correlation"], -1) < decode["ts"] + decode["dur"]]
    inner = sum(e["dur"] for e in inside if e["dur"] < 10) / sum(e["dur"] for e in inside)
    assert len(inside) == 550 and inner == pytest.approx(0.198, abs=0.0005)
    assert metrics["unfused_chain_time_fraction"] == pytest.approx(ref["chain_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["fusion_saving_fraction"] == pytest.approx(ref["saving_ns"] / ref["window_ns"], abs=1e-9)
    assert findings == []  # ≈ 0.06 %: SGLang already fuses; what is left is q/k-norm + rotary (2 µs each)


@needs_shared
def test_h100_hf_qwen_unfused_elementwise(tmp_path: Path) -> None:
    """"Unfused elementwise 60.6 % of the H100 HF Qwen forward" is the elementwise class's share of
    all device time (memsets included); fusion's own measure is the time in chains of ≥ 2 unfused
    kernels (54 % of kernel time) and what fusing each chain would save (≈ 34 % of the window)."""
    ref = _reference(H100_QWEN)
    assert ref["elementwise_ns"] / ref["device_ns"] == pytest.approx(0.606, abs=0.0005)
    store = tmp_path / "s.duckdb"
    run_id, metrics, findings = _analyze(H100_QWEN, store)
    [(share,)] = _query(store, "SELECT time_fraction FROM device_time_by_class WHERE run_id = ? "
                               "AND kernel_class = 'elementwise'", [run_id])
    assert share == pytest.approx(ref["elementwise_ns"] / ref["device_ns"], abs=1e-9)
    assert metrics["short_kernel_time_fraction"] == pytest.approx(ref["short_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["unfused_chain_time_fraction"] == pytest.approx(ref["chain_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["unfused_chain_time_fraction"] == pytest.approx(0.543, abs=0.001)
    assert metrics["fusion_saving_fraction"] == pytest.approx(ref["saving_ns"] / ref["window_ns"], rel=1e-6)
    [f] = findings
    assert f["severity"] == "critical" and f["saving_fraction"] >= RUN_SHARE_CRITICAL
    # HF's RMSNorm: add (residual) → to(float) → pow → mean → add eps → rsqrt → mul → to(bf16) → mul
    # (weight); ideal fused = read x and the residual, write the output: 3 × 16·559·1024 bf16
    norm = next(t for t in f["evidence"]["top_chains"] if t["kernels"][:3] == ["add", "direct_copy",
                                                                               "pow_tensor_scalar"])
    assert norm["ops"] == ["aten::add", "aten::copy_", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt",
                           "aten::mul", "aten::copy_", "aten::mul"]
    assert norm["fused_bytes"] == 3 * 16 * 559 * 1024 * 2 * norm["chains_shape_model"]
    assert f["title"].startswith("unfused elementwise/norm kernel chains: fusing would save ≈")
    assert "torch.compile" in f["detail"]


# ---- three more corpus runs -------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("path, severity", [
    pytest.param(B200_EAGER, None, id="b200-vllm-eager"),
    pytest.param(MI300X_QWEN, "critical", id="mi300x-hf-qwen"),
    pytest.param(MI210, "warning", id="mi210-unidentified-device"),
])
def test_corpus_runs_match_the_json(tmp_path: Path, path: Path, severity: str | None) -> None:
    ref = _reference(path)
    _, metrics, findings = _analyze(path, tmp_path / "s.duckdb")
    assert metrics["short_kernel_time_fraction"] == pytest.approx(ref["short_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["unfused_chain_time_fraction"] == pytest.approx(ref["chain_ns"] / ref["kernel_ns"], abs=1e-9)
    assert metrics["fusion_saving_fraction"] == pytest.approx(ref["saving_ns"] / ref["window_ns"], rel=1e-6)
    assert [f["severity"] for f in findings] == ([severity] if severity else [])
    for f in findings:
        assert f["evidence"]["chains"] == len(ref["chains"])
        assert f["saving_ns"] == pytest.approx(ref["saving_ns"], abs=len(ref["chains"]))
        assert not math.isnan(f["saving_fraction"])
