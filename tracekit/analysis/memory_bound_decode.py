"""memory_bound_decode: put each op with a cost on the roofline, say how much of the run that
covers, and, only where the run decodes, measure the decode step and how far it is from the
bandwidth roof.

Inputs (views): ``run_workload`` (what the run is; decode is claimed only where ``has_decode``:
a serving step marker of phase decode/mixed, or the structural growing-KV evidence), ``steps``
(the one step-marker parser: phases, tokens and ``step_time_ns``), ``run_window`` (each device's
window and busy time), ``kernels`` (device time; XLA cost columns ``flops``, ``hbm_bytes``,
``bytes_accessed``, ``device_dur_ns``), ``runtime_calls`` (the launching call of each kernel:
places it in a step's host window, and says whether it was a graph replay), ``kernel_ops`` (the op
that launched each kernel, with ``input_dims``/``input_types``), ``ops`` (CPU-only runs),
``devices`` (identified with :func:`tracekit.analysis.hardware.identify`; peaks the trace states
win).

Phases come only from ``steps``: a kernel (an op) is in the phase of the step whose host window
holds its launching call (its own start when it has none), as in the ``steps`` view. Nothing
else names a phase: not an annotation that merely contains "decode", not small GEMMs.

Cost model (per op):
* XLA (TPU): ``flops`` and ``hbm_bytes`` (else ``bytes_accessed``) of each execution, time =
  ``device_dur_ns``. Async copy halves (``copy-start``/``copy-done``) are not counted.
* PyTorch GEMMs (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``): FLOPs = 2·M·N·K
  (·batch); bytes = (M·K + K·N + M·N (+ bias)) elements × dtype width; time = Σ ``dur_ns`` of the
  kernels the op launched (CPU-only: the op's own ``dur_ns``).
* PyTorch attention (:data:`ATTENTION_OPS`): FLOPs = 4·B·H·Sq·Sk·D (halved when causal and
  Sq = Sk); bytes = Q + K + V + O (:func:`attention_cost`).
* Elementwise and normalization ops (:data:`ELEMENTWISE_OPS`): FLOPs = output elements × a
  per-element cost; bytes = tensor inputs + output (:func:`elementwise_cost`). A CPU-only run
  leaves out an op that encloses another costed op. vLLM/SGLang attention ops and graph-replayed
  kernels (no op shapes) get no cost: they count in the time the coverage is taken over, never in
  FLOPs or bytes.

Run-level math (every workload): over the costed ops AI = ΣFLOPs ÷ Σbytes, achieved rates
Σ ÷ Σtime, ``costed_mbu``/``costed_mfu`` = those ÷ the peaks: figures of the costed ops only,
stated with ``cost_coverage`` = costed time ÷ device busy time (Σ ``run_window.busy_ns``). The
run's own utilisation is bounded below by ``mbu_lower_bound`` = Σ costed bytes ÷ (Σ
``run_window.window_ns`` × peak HBM B/s) and ``mfu_lower_bound`` (same with FLOPs): uncosted work
only adds. No figure from the costed subset is stored as the run's MBU or MFU.

Decode math (``has_decode`` only): ``decode_step_time_ms`` = median over the decode steps of
``steps.step_time_ns`` ÷ 1e6 (a run without device work: the step's host span). Decode kernel
time = Σ kernels launched inside decode steps; ``decode_cost_coverage`` = costed decode op time ÷
that. Decode AI, MBU and MFU are stored only when the coverage is ≥ ``MIN_COST_COVERAGE``. A
decode weight GEMM with M token rows and w-byte weights has AI < 2·M/w whatever N and K are, so
it is memory-bound by structure when 2·M/w < ridge (ridge = peak bf16 FLOP/s ÷ peak HBM B/s);
M = the steps' new tokens (their batch), w from the GEMM kernel names (else 1 B, the loosest
ceiling). Batching headroom = ridge ÷ measured decode AI; ``decode_batching_headroom_bound`` =
ridge ÷ (2·M/w), a lower bound on the weight GEMMs' headroom (attention's KV reads do not
amortise over the batch).

Severity: what a fix would save as a share of the run's device window: reaching the HBM roof
saves decode kernel time × (1 − decode MBU) (only with measured MBU); ≥ ``SAVING_WARNING`` is a
``warning``, ≥ ``SAVING_CRITICAL`` ``critical``, else (or unknown) ``info``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, replace
from typing import Any

import duckdb

from tracekit.analysis import models
from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding, Metric, Severity
from tracekit.analysis.hardware import DeviceSpec, ridge_point, run_device
from tracekit.analysis.step_costing import MIN_COUNTER_COVERAGE, ModelCosting, model_costing

SAVING_WARNING = 0.10  # share of the device window a fix would save: warning from here
SAVING_CRITICAL = 0.30  # ... critical from here
MIN_COST_COVERAGE = 0.5  # fraction of a phase's kernel time that must carry a cost for MBU/MFU
RIDGE_DTYPE = "bf16"  # the peak the ridge is taken at (TPU planes state only this one)

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
ASYNC_COPY_HALVES = ("copy-start", "copy-done")
#: GEMM kernels by name (hipBLASLt/Tensile, rocBLAS skinny GEMMs, Triton MoE GEMMs, cuBLAS, CUTLASS)
GEMM_KERNEL = r"(?i)(^Cijk_|wvSplitK|_matmul_ogs|gemm|_mm_|cutlass|matmul)"

#: bytes per element by PyTorch dtype name (``input_types``)
DTYPE_BYTES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
    "long int": 8, "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
}
FLOAT_DTYPES = frozenset(k for k in DTYPE_BYTES if k in ("double", "float") or "Half" in k
                         or "BFloat16" in k or "Float8" in k)
#: weight widths read from GEMM kernel names (bytes per element), narrowest first
_NAME_WIDTHS = ((r"mxfp4|fp4", 0.5), (r"fp8|f8|e4m3|e5m2", 1.0), (r"bf16|_BBS_|_HHS_|f16|half", 2.0),
                (r"f32|_SS_|_SSS_", 4.0))





def gemm_cost(op: str, dims: list[Any], types: list[Any]) -> tuple[float, float, int] | None:
    """(FLOPs, bytes, rows M) of one GEMM op from its PyTorch input shapes and dtypes, or None.

    mm ``[M,K]·[K,N]``; addmm ``bias, [M,K], [K,N]``; bmm ``[B,M,K]·[B,K,N]``; baddbmm ``bias, A, B``;
    _scaled_mm ``[M,K]·[K,N]`` (+ scales). FLOPs 2·B·M·N·K; bytes = (A + B + output (+ bias))
    elements × width (output in A's dtype)."""
    first = 1 if op in ("aten::addmm", "aten::baddbmm") else 0
    if len(dims) < first + 2:
        return None
    a, b = dims[first], dims[first + 1]
    if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b) or len(a) not in (2, 3):
        return None
    if not all(isinstance(d, int) for d in a + b):
        return None
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    if b[-2] != k:
        return None
    wa = DTYPE_BYTES.get(str(types[first]) if len(types) > first else "")
    wb = DTYPE_BYTES.get(str(types[first + 1]) if len(types) > first + 1 else "")
    if wa is None or wb is None:
        return None
    nbytes = batch * (m * k * wa + k * n * wb + m * n * wa)
    if first == 1 and isinstance(dims[0], list) and dims[0]:
        wc = DTYPE_BYTES.get(str(types[0]), wa)
        nbytes += math.prod(d for d in dims[0] if isinstance(d, int)) * wc
    return 2.0 * batch * m * n * k, float(nbytes), m


#: Attention ops with recorded shapes: (layout of q/k/v, position of ``is_causal`` in the op's
#: arguments, i.e. in ``Concrete Inputs``; None when the op has no such flag). ``bhsd`` =
#: [batch, heads, seq, head_dim] (the SDPA family), ``bshd`` = [batch, seq, heads, head_dim] (the
#: flash/efficient kernels' own ops). Signatures: ``aten/src/ATen/native/native_functions.yaml``.
ATTENTION_OPS: dict[str, tuple[str, int | None]] = {
    "aten::scaled_dot_product_attention": ("bhsd", 5),
    "aten::_scaled_dot_product_attention_math": ("bhsd", 5),
    "aten::_scaled_dot_product_flash_attention": ("bhsd", 4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("bhsd", 4),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", 6),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", 6),
    "aten::_flash_attention_forward": ("bshd", 8),
    "aten::_efficient_attention_forward": ("bshd", 9),  # custom_mask_type: 0 none, 1/2 causal
}

#: Elementwise and normalization ops: (FLOPs per output element, operand layout).
#: ``map``: output = the broadcast of the tensor inputs, each input read once, the output written
#: once; ``inplace``: the first input is also the output (read and written); ``out_first``: custom
#: ops whose first tensor argument is the output buffer (every tensor argument moves once);
#: ``add_inplace``: vLLM ``fused_add_rms_norm(input, residual, weight)`` rewrites input and residual.
#: Per-element FLOPs: 1 for arithmetic and activations and 5/4 for layer norm with/without affine
#: weights (DeepSpeed flops profiler), 4 for RMS norm (square, sum, scale, weight) and 5 for
#: softmax (max, subtract, exp, sum, divide); +1 for a fused residual add, 2 for silu-and-mul.
ELEMENTWISE_OPS: dict[str, tuple[float, str]] = {
    **{f"aten::{n}": (1.0, "map") for n in (
        "add", "sub", "mul", "div", "neg", "exp", "rsqrt", "sqrt", "pow", "silu", "gelu", "relu",
        "sigmoid", "tanh")},
    **{f"aten::{n}_": (1.0, "inplace") for n in (
        "add", "sub", "mul", "div", "neg", "exp", "rsqrt", "sqrt", "pow", "silu", "gelu", "relu",
        "sigmoid", "tanh")},
    **{f"aten::{n}": (5.0, "map") for n in ("softmax", "_softmax", "log_softmax", "_log_softmax")},
    "aten::layer_norm": (5.0, "map"), "aten::native_layer_norm": (5.0, "map"),
    "aten::rms_norm": (4.0, "map"), "aten::_fused_rms_norm": (4.0, "map"),
    "_C::rms_norm": (4.0, "out_first"), "aiter::rmsnorm": (4.0, "out_first"),
    "_C::fused_add_rms_norm": (5.0, "add_inplace"), "aiter::add_rmsnorm": (5.0, "out_first"),
    "_C::silu_and_mul": (2.0, "out_first"), "sgl_kernel::silu_and_mul": (2.0, "out_first"),
}
_LAYER_NORMS = ("aten::layer_norm", "aten::native_layer_norm")


def _tensors(dims: list[Any], types: list[Any]) -> list[tuple[list[int], int, str]]:
    """(shape, bytes per element, dtype) of each non-scalar tensor argument with a known dtype."""
    out = []
    for i, d in enumerate(dims):
        dtype = str(types[i]) if i < len(types) else ""
        width = DTYPE_BYTES.get(dtype)
        if isinstance(d, list) and d and width is not None and all(isinstance(x, int) for x in d):
            out.append((d, width, dtype))
    return out


def _broadcast(shapes: list[list[int]]) -> list[int] | None:
    """NumPy/PyTorch broadcast of several shapes, or None when they do not broadcast."""
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        sizes = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


def elementwise_cost(op: str, dims: list[Any], types: list[Any]) -> tuple[float, float] | None:
    """(FLOPs, bytes) of an elementwise or normalization op from its PyTorch shapes and dtypes
    (:data:`ELEMENTWISE_OPS`), or None (also when the first tensor is not floating point).
    Scalars and 0-dim tensors are not counted."""
    rule = ELEMENTWISE_OPS.get(op)
    tensors = _tensors(dims, types)
    if rule is None or not tensors or tensors[0][2] not in FLOAT_DTYPES:
        return None  # integer index arithmetic (positions, lengths) is no floating-point work
    per_element, layout = rule
    if op in _LAYER_NORMS and not (len(dims) > 2 and isinstance(dims[2], list) and dims[2]):
        per_element = 4.0  # no affine weight
    moved = sum(math.prod(s) * w for s, w, _ in tensors)
    if layout == "map":
        shape = _broadcast([s for s, _, _ in tensors])
        if shape is None:
            return None
        width = max(tensors, key=lambda t: math.prod(t[0]))[1]
        out = math.prod(shape)
        return per_element * out, float(moved + out * width)
    first, width, _ = tensors[0]
    out = math.prod(first)
    if layout == "inplace":
        return per_element * out, float(moved + out * width)
    if layout == "add_inplace" and len(tensors) >= 2:
        return per_element * out, float(moved + out * width + math.prod(tensors[1][0]) * tensors[1][1])
    return per_element * out, float(moved)  # out_first: every argument moves once


def attention_cost(
    op: str, dims: list[Any], types: list[Any], concrete: list[Any] | None = None
) -> tuple[float, float, bool | None] | None:
    """(FLOPs, bytes, causal) of one attention op from its q/k/v shapes, or None.

    FLOPs = 2·B·H·Sq·Sk·D (QKᵀ) + 2·B·H·Sq·Sk·Dv (PV) = 4·B·H·Sq·Sk·D when Dv = D, halved when
    the op is causal and Sq = Sk (with Sq ≠ Sk the masked share depends on the mask's alignment:
    not halved). Bytes = (Q + K + V + O) elements × their dtype widths, O = B·H·Sq·Dv in Q's dtype,
    each read or written once (K/V with their own head count under GQA). The softmax's FLOPs
    (O(Sq·Sk)) are not counted."""
    spec = ATTENTION_OPS.get(op)
    if spec is None or len(dims) < 3:
        return None
    layout, causal_at = spec
    q, k, v = dims[0], dims[1], dims[2]
    if not all(isinstance(t, list) and len(t) == 4 and all(isinstance(x, int) for x in t) for t in (q, k, v)):
        return None
    widths = [DTYPE_BYTES.get(str(types[i])) if i < len(types) else None for i in range(3)]
    if any(w is None for w in widths):
        return None
    if layout == "bhsd":
        b, h, sq, d = q
        sk, dv = k[2], v[3]
    else:
        b, sq, h, d = q
        sk, dv = k[1], v[3]
    causal: bool | None = None
    if concrete is not None and causal_at is not None and causal_at < len(concrete):
        text = str(concrete[causal_at]).strip()
        if text in ("True", "False"):
            causal = text == "True"
        elif text.isdigit():
            causal = int(text) != 0
    flops = 2.0 * b * h * sq * sk * (d + dv)
    if causal and sq == sk:
        flops /= 2
    wq, wk, wv = (int(w or 0) for w in widths)
    nbytes = math.prod(q) * wq + math.prod(k) * wk + math.prod(v) * wv + b * h * sq * dv * wq
    return flops, float(nbytes), causal


def op_cost(
    op: str, dims: list[Any], types: list[Any], concrete: list[Any] | None = None
) -> tuple[float, float, int | None] | None:
    """(FLOPs, bytes, GEMM rows M or None) of a GEMM, attention, elementwise or normalization op."""
    if op in GEMM_OPS:
        return gemm_cost(op, dims, types)
    if op in ATTENTION_OPS:
        att = attention_cost(op, dims, types, concrete)
        return None if att is None else (att[0], att[1], None)
    ew = elementwise_cost(op, dims, types)
    return None if ew is None else (ew[0], ew[1], None)


def weight_width_from_names(names: list[str]) -> float | None:
    """The narrowest weight width (bytes/element) that GEMM kernel names state, or None."""
    found = [w for pat, w in _NAME_WIDTHS if any(re.search(pat, n, re.IGNORECASE) for n in names)]
    return min(found) if found else None


@dataclass
class Step:
    """One step of the ``steps`` view that names a phase: its host window places kernels and ops."""

    rank: int
    start: int
    end: int
    phase: str
    id: int = 0


@dataclass
class Costed:
    """One op (grouped: same name/shape/phase) with its cost and time."""

    name: str
    kind: str  # hlo_category or the torch op name
    phase: str
    count: int
    flops: float
    nbytes: float
    time_ns: int
    rows: int | None = None
    shape: str | None = None


@dataclass
class Run:
    """What the run is (``run_workload``) and its device window (``run_window``, Σ over devices)."""

    workload: str
    has_decode: bool
    decode_evidence: str | None
    workload_evidence: str
    window_ns: int | None
    busy_ns: int | None


class MemoryBoundDecode(Analyzer, name="memory_bound_decode"):
    summary = "per-op roofline with its coverage; decode step time, MBU/MFU and batching headroom (decode only)"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        spec = self._device(con, run_id)
        ridge = ridge_point(spec, RIDGE_DTYPE) if spec else None
        wl = con.execute(
            """SELECT workload, coalesce(has_decode, decode_evidence IS NOT NULL), decode_evidence, evidence
               FROM run_workload WHERE run_id = ?""", [run_id]).fetchall()
        win = con.execute("SELECT sum(window_ns), sum(busy_ns) FROM run_window WHERE run_id = ?", [run_id]).fetchall()
        workload, has_decode, decode_evidence, wl_evidence = wl[0] if wl else ("host_only", False, None, "")
        run_info = Run(str(workload), bool(has_decode), decode_evidence, str(wl_evidence),
                       int(win[0][0]) if win and win[0][0] else None, int(win[0][1]) if win and win[0][1] else None)
        # steps (the one marker parser); host windows of the steps that name a phase place the work
        srows = con.execute(
            """SELECT rank, step, phase, host_start_ns, host_end_ns, step_time_ns, batch_size, new_tokens,
                      context_tokens, n_kernels
               FROM steps WHERE run_id = ? AND phase IN ('decode', 'prefill', 'mixed') ORDER BY rank, step""",
            [run_id]).fetchall()
        steps = [Step(int(r), int(s), int(e), str(p), i) for i, (r, _, p, s, e, *_rest) in enumerate(srows)]
        decode_rows = [r for r in srows if r[2] == "decode"]
        w_sql, w_params = self._windows_sql(steps)
        has_kernels = con.execute(
            "SELECT count(*) FROM kernels WHERE run_id = ? AND category = 'kernel'", [run_id]
        ).fetchall()[0][0] > 0

        # Kernel time per phase (launch time places the kernel in a step's host window, as the
        # steps view does). The windows of a rank do not overlap, so the latest one starting at or
        # before the launch (an ASOF join) is the only one that can hold it. Written for 1M-kernel
        # runs (benchmarks/bench_analyze.py): launching calls are placed once (many kernels share one
        # graph launch), kernels without one by their own start; the GEMM-name regex runs once per
        # distinct name.
        kt = con.execute(
            f"""WITH {w_sql},
                 calls AS (SELECT rank, correlation_id, min(start_ns) AS api_ns,
                                  bool_or(name ILIKE '%GraphLaunch%') AS graph
                           FROM runtime_calls_in_scope
                           WHERE run_id = ? AND correlation_id IS NOT NULL GROUP BY ALL),
                 placed AS (SELECT c.rank, c.correlation_id, c.graph, {_in_window("c.api_ns", "w.phase")} AS phase
                            FROM calls c ASOF LEFT JOIN w ON w.rank = c.rank AND c.api_ns >= w.ws),
                 k AS (SELECT k.rank, k.name, k.start_ns, coalesce(k.device_dur_ns, k.dur_ns) AS d,
                              p.correlation_id IS NOT NULL AS has_call, coalesce(p.graph, false) AS graph, p.phase
                       FROM kernels k LEFT JOIN placed p USING (rank, correlation_id)
                       WHERE k.run_id = ? AND k.category = 'kernel'),
                 own AS (SELECT k.name, k.d, k.graph, {_in_window("k.start_ns", "w.phase")} AS phase
                         FROM (SELECT * FROM k WHERE NOT has_call) k
                         ASOF LEFT JOIN w ON w.rank = k.rank AND k.start_ns >= w.ws),
                 by_name AS (
                   SELECT phase, name, count(*) AS n, sum(d) AS d, sum(d) FILTER (WHERE graph) AS gd
                   FROM (SELECT name, d, graph, phase FROM k WHERE has_call
                         UNION ALL SELECT name, d, graph, phase FROM own)
                   GROUP BY ALL),
                 gemm AS (SELECT name, regexp_matches(name, ?) AS is_gemm FROM (SELECT DISTINCT name FROM by_name))
               SELECT coalesce(phase, 'unassigned'), sum(n), sum(d), sum(gd),
                      list(DISTINCT name) FILTER (WHERE is_gemm)
               FROM by_name JOIN gemm USING (name)
               GROUP BY ALL""",
            [*w_params, run_id, run_id, GEMM_KERNEL],
        ).fetchall()
        phase_time: dict[str, int] = {}
        phase_graph_time: dict[str, int] = {}
        phase_kernels: dict[str, int] = {}
        gemm_names: dict[str, set[str]] = {}
        for phase, n, d, gd, names in kt:
            phase_time[phase] = int(d or 0)
            phase_graph_time[phase] = int(gd or 0)
            phase_kernels[phase] = int(n)
            gemm_names[phase] = set(names or [])

        costed = self._xla_costs(con, run_id, w_sql, w_params) + self._torch_costs(
            con, run_id, w_sql, w_params, has_kernels
        )
        if not has_kernels:  # CPU-only: the ops' own time is the phase time
            for c in costed:
                phase_time[c.phase] = phase_time.get(c.phase, 0) + c.time_ns
        res = AnalyzerResult()
        # the projection's FLOP ceiling: the best rate a compute-bound GEMM of this run reached
        gemm_rates = [c.flops / (c.time_ns / 1e9) for c in costed
                      if c.kind in GEMM_OPS and c.time_ns >= 1_000_000 and c.nbytes and ridge
                      and c.flops / c.nbytes >= ridge]
        mc = model_costing(con, run_id, spec, phase_time, max(gemm_rates) if gemm_rates else None)
        step_tokens = sorted(int(r[7] or r[6]) for r in srows if (r[7] or r[6]) and r[2] == "decode") or sorted(
            int(r[7]) for r in srows if r[7])
        md0 = mc.phases.get("decode") if mc is not None else None
        tps = (step_tokens[len(step_tokens) // 2] if step_tokens
               else md0.tokens_median if md0 is not None else None)  # else: from the requests
        res.metrics.append(Metric("tokens_per_step", tps, "tokens", "higher"))
        if mc is not None:
            self._model_prefill(res, mc, spec)
        per_op = [self._op_record(c, ridge, spec) for c in costed]
        per_op.sort(key=lambda r: -r["time_ns"])
        run = self._run_level(costed, per_op, spec, ridge, run_info, has_kernels)
        if costed:
            res.metrics += [
                Metric("cost_coverage", run["coverage"], "fraction", "higher"),
                Metric("costed_arithmetic_intensity", run["ai"], "FLOP/B", "higher"),
                Metric("costed_achieved_tflops", run["flops_per_s"] / 1e12 if run["flops_per_s"] is not None
                       else None, "TFLOP/s", "higher"),
                Metric("costed_achieved_hbm_gbps", run["bytes_per_s"] / 1e9 if run["bytes_per_s"] is not None
                       else None, "GB/s", "higher"),
                Metric("costed_mbu", run["mbu"], "fraction", "higher"),
                Metric("costed_mfu", run["mfu"], "fraction", "higher"),
                Metric("costed_memory_bound_time_fraction", run["mb_share"], "fraction", "lower"),
                Metric("mbu_lower_bound", run["mbu_lower_bound"], "fraction", "higher"),
                Metric("mfu_lower_bound", run["mfu_lower_bound"], "fraction", "higher"),
            ]
        device_text = self._device_text(spec, ridge)
        evidence_base: dict[str, Any] = {
            "workload": run_info.workload, "workload_evidence": run_info.workload_evidence,
            "has_decode": run_info.has_decode, "decode_evidence": run_info.decode_evidence,
            "device": spec.name if spec else None,
            "peak_tflops": spec.peak_tflops.get(RIDGE_DTYPE) if spec else None,
            "peak_hbm_gbps": spec.hbm_gbps if spec else None,
            "peak_sources": {k: spec.source(k) for k in (f"peak_tflops.{RIDGE_DTYPE}", "hbm_gbps")} if spec else None,
            "ridge_flop_per_byte": ridge,
            "time_base": "device_dur_ns (XLA device clock)" if any(c.shape is None for c in costed)
            else ("kernel dur_ns of the kernels each op launched" if has_kernels else "op dur_ns (CPU-only run)"),
            "window_ns": run_info.window_ns, "busy_ns": run_info.busy_ns, "run": run,
        }
        if mc is not None:
            evidence_base["model"] = self._model_evidence(mc)
        if run_info.has_decode:
            self._decode(res, DecodeInput(
                costed=costed, per_op=per_op, decode_rows=decode_rows, srows=srows,
                phases=PhaseKernels(phase_time, phase_graph_time, phase_kernels, gemm_names), spec=spec,
                ridge=ridge, device_text=device_text, evidence_base=evidence_base, run_info=run_info,
                has_kernels=has_kernels, mc=mc))
        elif costed:
            res.findings.append(self._run_finding(run, per_op, run_info, device_text, evidence_base, len(costed)))
        if mc is not None:
            text = self._model_prefill_text(mc)
            pc = mc.phases.get("prefill")
            if res.findings and text:
                res.findings[-1].detail += " " + text
                if pc is not None and pc.mfu is not None and not res.findings[-1].title.startswith("decode at "):
                    idle = pc.step_time_ns > 1.2 * pc.busy_ns
                    res.findings[-1].title = (
                        (f"prefill at {_pct(pc.mfu * pc.busy_ns / pc.step_time_ns)} of peak FLOP/s over the "
                         f"{pc.step_time_ns / pc.steps / 1e6:.1f} ms step, {_pct(pc.mfu)} while the device works "
                         f"({mc.model}: {pc.flops / pc.steps / 1e12:.1f} TFLOP per step); " if idle else
                         f"prefill at {_pct(pc.mfu)} of peak FLOP/s ({mc.model}: {pc.flops / pc.steps / 1e12:.1f} "
                         f"TFLOP per step in {pc.busy_ns / pc.steps / 1e6:.1f} ms of kernel time); ")
                        + res.findings[-1].title)
            elif text:
                res.findings.append(Finding("info", text.split(":")[0], text, evidence_base))
        return res

    # ------------------------------------------------------------------------------------------

    def _run_level(self, costed: list[Costed], per_op: list[dict[str, Any]], spec: DeviceSpec | None,
                   ridge: float | None, run_info: Run, has_kernels: bool) -> dict[str, Any]:
        """Roofline figures over the costed ops, their coverage of the device's busy time, and
        run-wide lower bounds (Σ costed FLOPs or bytes ÷ (window × peak): uncosted work only adds)."""
        tot = self._totals(costed, spec, ridge)
        mb_time = sum(r["time_ns"] for r in per_op if r["roofline_class"] == "memory-bound")
        busy = run_info.busy_ns if has_kernels else None
        coverage = min(1.0, tot["time_ns"] / busy) if busy else None
        cap_s = run_info.window_ns / 1e9 if has_kernels and run_info.window_ns else None
        peak_f = spec.peak_tflops.get(RIDGE_DTYPE) if spec else None
        peak_b = spec.hbm_gbps if spec else None
        return {
            **tot, "coverage": coverage, "memory_bound_time_ns": mb_time,
            "mb_share": mb_time / tot["time_ns"] if ridge and tot["time_ns"] else None,
            "mbu_lower_bound": tot["nbytes"] / (cap_s * peak_b * 1e9) if cap_s and peak_b else None,
            "mfu_lower_bound": tot["flops"] / (cap_s * peak_f * 1e12) if cap_s and peak_f else None,
        }

    @staticmethod
    def _coverage_text(run: dict[str, Any]) -> str:
        if run["coverage"] is None:
            return "the costed ops (no device timeline, so their share of device time is unknown)"
        return f"the {_pct(run['coverage'])} of device busy time with op costs"

    def _run_finding(self, run: dict[str, Any], per_op: list[dict[str, Any]], run_info: Run, device_text: str,
                     evidence_base: dict[str, Any], n_costed: int) -> Finding:
        cov = self._coverage_text(run)
        if run["mb_share"] is not None:
            title = (f"{run['mb_share']:.0%} of costed op time is memory-bound, over {cov}: those ops reach "
                     f"{_pct(run['mbu'])} of the HBM roof and {_pct(run['mfu'])} of peak FLOP/s"
                     + (f"; run-wide HBM use ≥ {_pct(run['mbu_lower_bound'])}" if run["mbu_lower_bound"] is not None
                        and run["coverage"] is not None and run["coverage"] < MIN_COST_COVERAGE else ""))
        else:
            title = f"roofline not placed ({device_text.split(',')[0]}), over {cov}"
        bound = ""
        if run["mbu_lower_bound"] is not None:
            bound = (f" Run-wide, the costed ops alone move {_pct(run['mbu_lower_bound'])} of the HBM bandwidth the "
                     f"device window offers and do {_pct(run['mfu_lower_bound'])} of its peak FLOPs (lower bounds: "
                     "uncosted work only adds); the costed-op figures above describe those ops, not the run.")
        detail = (
            f"Workload: {run_info.workload} ({run_info.workload_evidence}); no decode is claimed"
            + (f" ({run_info.decode_evidence})" if run_info.decode_evidence else "") + ". "
            f"Over the {n_costed} costed ops ({run['time_ns'] / 1e6:.3f} ms of {evidence_base['time_base']}"
            + (f", {_pct(run['coverage'])} of the {run_info.busy_ns / 1e6:.3f} ms of device busy time"
               if run["coverage"] is not None and run_info.busy_ns else "")
            + f"): arithmetic intensity {_num(run['ai'])} FLOP/B against {device_text}; achieved "
            f"{_fmt_bw(run['bytes_per_s'])}, {_fmt_flops(run['flops_per_s'])}. Top op: {per_op[0]['name']} "
            f"({per_op[0]['roofline_class']}, AI {_num(per_op[0]['arithmetic_intensity'])}).{bound}"
            + self._lost_text(per_op, run_info.busy_ns)
            + (" The rest of the device time ran kernels with neither op shapes nor XLA costs, which no roofline "
               "figure here covers." if run["coverage"] is not None
               and run["coverage"] < MIN_COST_COVERAGE else ""))
        ev = {**evidence_base, "memory_bound_time_ns": run["memory_bound_time_ns"], "ops": per_op[:20]}
        return Finding(severity="info", title=title, detail=detail, evidence=ev)

    @staticmethod
    def _lost_text(per_op: list[dict[str, Any]], busy_ns: int | None) -> str:
        """The costed ops that lose the most time against their own roof, top 3."""
        lost = sorted((r for r in per_op if r.get("time_lost_ns") and r["time_lost_ns"] > 0),
                      key=lambda r: -float(r["time_lost_ns"]))[:3]
        if not lost:
            return ""
        def one(r: dict[str, Any]) -> str:
            bound = r["roofline_class"] == "compute-bound"
            rate = (f"{r['flops_per_s'] / 1e12:.0f} TFLOP/s" if bound else f"{r['bytes_per_s'] / 1e9:,.0f} GB/s")
            return (f"{r['name']} {r['shape'] or ''} ×{r['count']}: {r['time_ns'] / 1e6:.2f} ms"
                    + (f" ({r['time_ns'] / busy_ns:.0%} of device busy time)" if busy_ns else "")
                    + f" at {rate}, {r['time_lost_ns'] / 1e6:.2f} ms above its "
                    + ("FLOP" if bound else "HBM") + " roof")
        return " Most time lost against the roof (costed ops): " + "; ".join(one(r) for r in lost) + "."

    def _decode(self, res: AnalyzerResult, d: DecodeInput) -> None:
        """The decode finding and metrics: step time, roofline, MBU/MFU and batching headroom."""
        if not d.decode_rows:
            res.metrics += [Metric("decode_step_time_ms", None, "ms", "lower")]
            res.findings.append(self._decode_without_steps(d))
            return
        f = self._decode_facts(d)
        res.metrics += _decode_metrics(f)
        missing = _decode_missing(d, f)
        ev = _decode_evidence(d, f, missing)
        parts = self._decode_parts(d, f, missing)
        sev, gain_frac = _decode_severity(d, f)
        ev["decode_throughput_gain_8x"] = f.gain8
        ev["per_token_saving_fraction_8x"] = gain_frac
        res.findings.append(Finding(severity=sev, title=_decode_title(d, f), detail=" ".join(parts), evidence=ev,
                                    saving_ns=f.saving, saving_fraction=f.saving_frac))

    def _decode_without_steps(self, d: DecodeInput) -> Finding:
        """Decode tokens without a pure decode step: inside mixed (chunked-prefill) steps, or
        found by structure with no marker separating decode from prefill."""
        n_mixed = sum(1 for r in d.srows if r[2] == "mixed")
        why = (f"decode runs only inside {n_mixed} mixed prefill+decode step(s)" if n_mixed else
               "no step marker separates decode from prefill")
        title = f"decode present ({why}): no decode step time or decode roofline"
        detail = (f"Decode evidence: {d.run_info.decode_evidence}. {why[0].upper() + why[1:]}, so decode kernels "
                  "cannot be told from prefill kernels: no decode step time, MBU, MFU or batching headroom is "
                  "computed.")
        if d.costed:
            detail += " " + self._run_finding(d.evidence_base["run"], d.per_op, d.run_info, d.device_text,
                                              d.evidence_base, len(d.costed)).title
            detail += "."
        return Finding("info", title, detail, {**d.evidence_base, "ops": d.per_op[:20]})

    def _decode_facts(self, d: DecodeInput) -> DecodeFacts:
        """The decode figures: step time, cost coverage, tokens per step, weight width, the
        arithmetic-intensity bound and headroom, MBU/MFU (the model's when attached) and saving."""
        # decode step time: the steps view's GPU span of the step's own work, host blocks removed;
        # a run without device work: the step's host span (the ops ran on the CPU inside it)
        st = [int(r[5]) if r[5] is not None else (int(r[4]) - int(r[3]) if not d.has_kernels else None)
              for r in d.decode_rows]
        st_ok = [t for t in st if t is not None]
        dec = [c for c in d.costed if c.phase == "decode"]
        tot = self._totals(dec, d.spec, d.ridge)
        dtime = d.phases.time.get("decode", 0)
        coverage = min(1.0, tot["time_ns"] / dtime) if dtime else None
        enough = coverage is not None and coverage >= MIN_COST_COVERAGE
        tokens = sorted(int(r[7] or r[6]) for r in d.decode_rows if (r[7] or r[6]))
        rows = sorted({c.rows for c in dec if c.rows is not None})
        m = tokens[len(tokens) // 2] if tokens else (max(rows) if rows else None)
        width = weight_width_from_names(sorted(d.phases.gemm_names.get("decode", set())))
        w = width if width is not None else 1.0
        roof = _DecodeRoofline.of(d.ridge, 2.0 * m / w if m else None, tot["ai"] if enough else None)
        md = d.mc.phases.get("decode") if d.mc is not None else None
        model_mbu = md.mbu if md is not None else None
        if model_mbu is not None and md is not None and md.bytes:
            roof = roof.for_model(d.ridge, md.flops / md.bytes)
        # the model's figures cover whole steps; the op costs only the ops with shapes
        mbu = model_mbu if model_mbu is not None else (tot["mbu"] if enough else None)
        saving = int(dtime * (1 - mbu)) if mbu is not None and mbu < 1 else None
        window = d.run_info.window_ns if d.has_kernels else None
        proj = d.mc.projection if d.mc is not None else None
        return DecodeFacts(
            step_times_ns=st, step_ms=statistics.median(st_ok) / 1e6 if st_ok else None, tot=tot, dtime=dtime,
            coverage=coverage, enough=enough, graph_ns=d.phases.graph_time.get("decode", 0), tokens=tokens,
            ctx=sorted(int(r[8]) for r in d.decode_rows if r[8]), rows=rows, m=m,
            m_source="the step markers" if tokens else ("the decode GEMM shapes" if rows else None), w=w,
            width_note=("from the GEMM kernel names" if width is not None
                        else "not stated: 1 B (fp8) assumed, the loosest ceiling"),
            roof=roof, window=window, md=md, model_mbu=model_mbu, proj=proj, mbu=mbu,
            mfu=md.mfu if md is not None and md.mfu is not None else (tot["mfu"] if enough else None),
            mbu_cov=md.coverage if model_mbu is not None and md is not None else (coverage if enough else None),
            mfu_cov=md.coverage if md is not None and md.mfu is not None else (coverage if enough else None),
            saving=saving, saving_frac=saving / window if saving is not None and window else None,
            gain8=proj["points"][-2]["throughput_gain"] if proj else None,  # at 8× the batch
        )

    def _decode_parts(self, d: DecodeInput, f: DecodeFacts, missing: list[str]) -> list[str]:
        """The decode finding's detail, sentence by sentence."""
        tot, r = f.tot, f.roof
        parts = [f"Decode from {d.run_info.decode_evidence}: {len(d.decode_rows)} decode step(s), "
                 + (f"median step time {f.step_ms:.3f} ms ("
                    + ("device span of the step's own work, host blocks removed), " if d.has_kernels
                       else "host span of the step: no device timeline), ") if f.step_ms else "")
                 + f"{f.dtime / 1e6:.3f} ms of decode {'kernel' if d.has_kernels else 'op'} time."]
        if tot["time_ns"] and (f.enough or f.model_mbu is None):
            parts.append(
                f"Costed decode ops cover {_pct(f.coverage)} of that time: AI {_num(tot['ai'])} FLOP/B, "
                f"{_fmt_bw(tot['bytes_per_s'])} ({_pct(tot['mbu'])} of the HBM roof), "
                f"{_fmt_flops(tot['flops_per_s'])} ({_pct(tot['mfu'])} of peak)"
                + ("." if f.enough else f" — figures of those ops only, below the {MIN_COST_COVERAGE:.0%} coverage "
                   "needed to stand for decode."))
        if r.ai_bound is not None and f.model_mbu is None:
            parts.append(f"With {f.m} tokens per step ({f.m_source}) and {f.w:g}-byte weights ({f.width_note}), no "
                         f"decode weight GEMM can exceed 2·M/w = {r.ai_bound:.1f} FLOP/B (the weights alone are N·K·w "
                         "bytes).")
        parts.append(f"Ridge: {d.device_text}.")
        parts += _decode_headroom_text(f)
        if f.md is not None and d.mc is not None:
            parts.append(self._model_decode_text(d.mc, f.md, f.proj, d.spec))
        if f.saving is not None:
            parts.append(f"At the HBM roof (100 % of the datasheet bandwidth) the decode kernels would take "
                         f"{f.saving / 1e6:.3f} ms less"
                         + (f" ({f.saving_frac:.1%} of the {f.window / 1e6:.3f} ms device window)." if f.window and
                            f.saving_frac is not None else "."))
        if missing:
            parts.append("Missing: " + "; ".join(missing) + ".")
        return parts

    @staticmethod
    def _model_evidence(mc: ModelCosting) -> dict[str, Any]:
        return {
            "model": mc.model, "origin": mc.origin, "tensor_parallel": mc.tensor_parallel, "tp_source": mc.tp_source,
            "constants": mc.constants, "uncosted_steps": mc.uncosted_steps, "projection": mc.projection,
            "kernel_classes": mc.classes,
            "bytes_source": {p: pc.bytes_source for p, pc in mc.phases.items()},
            "kernel_formats": mc.formats,
            "phases": {p: {k: v for k, v in pc.__dict__.items() if k != "rows"}
                       | {"steps_detail": [{k: r[k] for k in ("rank", "step", "phase", "tokens", "decode_seqs",
                                                               "prefill_tokens", "context_tokens", "weight_bytes",
                                                               "kv_read_bytes", "bytes", "flops", "busy_ns",
                                                               "step_time_ns")} for r in pc.rows[:50]]}
                       for p, pc in mc.phases.items()},
        }

    @staticmethod
    def _model_decode_text(mc: ModelCosting, md: Any, proj: dict[str, Any] | None, spec: DeviceSpec | None) -> str:
        n = md.steps
        kv = md.kv_read_bytes
        model_b = md.model_bytes if md.bytes_source == "counters" else md.bytes
        moe = float(mc.constants.get("num_experts") or 0) > 0
        text = (f"From the model ({mc.model}, {mc.origin}; TP {mc.tensor_parallel}: {mc.tp_source}): a decode step "
                f"must read {md.weight_bytes / n / 1e9:.2f} GB of weights"
                + (" (the experts its tokens touch under uniform routing: an upper estimate, skewed routing "
                   "touches fewer, so the MBU below is an upper estimate too)" if moe else "")
                + (f" and {kv / n / 1e9:.2f} GB of KV cache" if kv is not None else "")
                + (f" ({model_b / n / 1e9:.2f} GB with the KV written and activations)" if model_b else "")
                + f" and compute {md.flops / n / 1e12:.3f} TFLOP, median {md.tokens_median} tokens per step; over "
                f"{md.busy_ns / n / 1e6:.3f} ms of kernel time per step that is "
                f"{_pct(md.model_mbu if md.bytes_source == 'counters' else md.mbu)} of the HBM roof "
                f"(MBU) and {_pct(md.mfu)} of peak FLOP/s (MFU)"
                + (f"; over the whole step time ({md.step_time_ns / n / 1e6:.3f} ms, idle included) MBU is "
                   f"{_pct(md.mbu_step_time)}" if md.mbu_step_time is not None and md.step_time_ns != md.busy_ns else "")
                + ".")
        if md.tokens_source == "requests":
            text += (" The decode markers state no token counts: the tokens per step are the load driver's requests' "
                     "tokens streamed during the decode steps ÷ the steps (the mean batch), the context their "
                     "prompts plus the tokens before each (request_decode_tokens).")
        if md.bytes_source == "counters" and md.counted:
            text += (f" Measured: the hardware counters ({md.counted['counters']}, over "
                     f"{md.counted['time_fraction']:.0%} of the decode steps' kernel time) count "
                     f"{md.bytes / n / 1e9:.2f} GB per step, so the MBU above is the measured one (the model's "
                     f"{(md.model_bytes or 0) / n / 1e9:.2f} GB would give {_pct(md.model_mbu)}).")
        elif md.counted:
            text += (f" Hardware counters ({md.counted['counters']}) cover only "
                     f"{md.counted['time_fraction']:.0%} of the decode kernel time (< "
                     f"{MIN_COUNTER_COVERAGE:.0%}), so the bytes are the model's.")
        if kv is None and md.bytes_source != "counters":
            text += " The step markers give no context lengths, so the KV-cache reads and the MBU are not computed."
        text += _format_hint(mc)
        costed_cls = [c for c in mc.classes if c["bytes_per_s"] is not None][:3]
        if costed_cls:
            text += (" By kernel group, per step, ranked by the time lost against the HBM roof (at 100 % of the "
                     "datasheet bandwidth; sustained copies reach about 80 %): " + "; ".join(
                f"{c['group']} {c['time_ns'] / 1e6:.2f} ms ({c['share']:.0%} of decode kernel time) moving "
                f"{c['bytes'] / 1e9:.2f} GB at {c['bytes_per_s'] / 1e12:.2f} TB/s "
                f"({_pct(c['hbm_fraction'])} of HBM), {c['time_lost_ns'] / 1e6:.2f} ms above the roof"
                for c in costed_cls) + ".")
        if proj:
            pts = ", ".join(f"{p['batch']}: {p['step_time_ms']:.1f} ms, {p['tokens_per_s']:,.0f} tok/s "
                            f"(×{p['throughput_gain']:.1f}, {p['bound']}-bound)" for p in proj["points"])
            cb = proj["compute_bound_batch"]
            mem = proj["max_batch_in_memory"]
            per_group = proj["time_model"].startswith("per group")
            basis = (f"the bandwidth the weight GEMMs ({proj['weights_bytes_per_s'] / 1e9:,.0f} GB/s) and attention "
                     f"({proj['attention_bytes_per_s'] / 1e9:,.0f} GB/s) achieve now, a FLOP ceiling of "
                     f"{proj['flop_ceiling_source']}, the other kernels' {proj['other_kernels_ns'] / 1e6:.2f} ms and "
                     f"the step's {proj['idle_ns'] / 1e6:.2f} ms of idle kept" if per_group else
                     f"the bandwidth this step achieves ({proj['achieved_bytes_per_s'] / 1e9:,.0f} GB/s), a FLOP "
                     f"ceiling of {proj['flop_ceiling_source']}, the step's {proj['idle_ns'] / 1e6:.2f} ms of idle "
                     "kept")
            text += (
                f" Batching projection at the measured {proj['context_per_seq']:.0f} context tokens per request, "
                f"{basis}: now {proj['now']['batch']} requests, {proj['now']['step_time_ms']:.1f} ms, "
                f"{proj['now']['tokens_per_s']:,.0f} tok/s; requests → step time (= TPOT), throughput: {pts}. "
                "The weights are read once per step whatever the batch, but every request reads its own KV cache, "
                "so the gain flattens as the batch grows, and each user's TPOT rises with it"
                + (f"; the weight GEMMs turn compute-bound at ≈{cb} requests (attention's FLOPs per byte do not grow "
                   "with the batch: it stays memory-bound)" if cb else "; the weight GEMMs stay memory-bound")
                + (f". KV cache per request {proj['kv_bytes_per_seq'] / 1e9:.3f} GB: with "
                   f"{proj['weights_bytes'] / 1e9:.1f} GB of weights per rank at most {mem} requests fit in "
                   f"{proj['hbm_usable']:.0%} of the {proj['hbm_bytes'] / 1e9:.0f} GB" if mem is not None else "")
                + ".")
        return text

    @staticmethod
    def _model_prefill_text(mc: ModelCosting) -> str:
        pc = mc.phases.get("prefill")
        if pc is None:
            if not mc.phases and mc.uncosted_steps:
                return (f"Model {mc.model} attached, but no step marker states its tokens "
                        f"({', '.join(f'{n} {p}' for p, n in sorted(mc.uncosted_steps.items()))} step(s)), so no step "
                        "is costed from the model.")
            return "" if mc.phases else (f"Model {mc.model} attached, but the run has no step marker with a phase "
                                         "and tokens, so no step is costed from the model.")
        n = pc.steps
        hint = "" if "decode" in mc.phases else _format_hint(mc)
        return hint.lstrip() + (" " if hint else "") + (
                f"Prefill from the model ({mc.model}, TP {mc.tensor_parallel}): {n} step(s) with prefill tokens "
                f"(median {pc.tokens_median} tokens per step) compute {pc.flops / n / 1e12:.2f} TFLOP per step in "
                f"{pc.busy_ns / n / 1e6:.3f} ms of kernel time: {_pct(pc.mfu)} of peak FLOP/s (MFU), over "
                f"{_pct(pc.coverage)} of prefill device time (2 × active parameters per token, the LM head once "
                "per sequence, attention over the causal query-key pairs)"
                + (f"; the steps took {pc.step_time_ns / n / 1e6:.3f} ms, so the device idled "
                   f"{1 - pc.busy_ns / pc.step_time_ns:.0%} of them (MFU over the step time "
                   f"{_pct(pc.mfu * pc.busy_ns / pc.step_time_ns)}; the idle's cause is launch_idle's finding)"
                   if pc.mfu is not None and pc.step_time_ns > 1.2 * pc.busy_ns else "") + ".")

    def _model_prefill(self, res: AnalyzerResult, mc: ModelCosting, spec: DeviceSpec | None) -> None:
        pc = mc.phases.get("prefill")
        res.metrics += [
            Metric("prefill_mfu", pc.mfu if pc else None, "fraction", "higher"),
            Metric("prefill_mfu_coverage", pc.coverage if pc and pc.mfu is not None else None, "fraction", "higher"),
        ]

    @staticmethod
    def _windows_sql(steps: list[Step]) -> tuple[str, list[Any]]:
        if not steps:
            return ("w AS (SELECT NULL::INTEGER AS rank, NULL::BIGINT AS ws, NULL::BIGINT AS we, "
                    "NULL::VARCHAR AS phase, NULL::INTEGER AS step WHERE false)"), []
        return (
            ("w AS (SELECT unnest(?::INTEGER[]) AS rank, unnest(?::BIGINT[]) AS ws, unnest(?::BIGINT[]) AS we, "
            "unnest(?::VARCHAR[]) AS phase, unnest(?::INTEGER[]) AS step)"),
            [[s.rank for s in steps], [s.start for s in steps], [s.end for s in steps],
             [s.phase for s in steps], [s.id for s in steps]],
        )

    @staticmethod
    def _device(con: duckdb.DuckDBPyConnection, run_id: str) -> DeviceSpec | None:
        """The spec of the run's busiest device (most device rows), or None."""
        return run_device(con, run_id)[1]

    @staticmethod
    def _xla_costs(con: duckdb.DuckDBPyConnection, run_id: str, w_sql: str, w_params: list[Any]) -> list[Costed]:
        rows = con.execute(
            f"""WITH {w_sql}
               SELECT k.name, k.hlo_category, coalesce({_in_window("k.start_ns", "w.phase")}, 'all'),
                      count(*), sum(k.flops),
                      sum(coalesce(k.hbm_bytes, k.bytes_accessed)), sum(k.device_dur_ns)
               FROM kernels k ASOF LEFT JOIN w ON w.rank = k.rank AND k.start_ns >= w.ws
               WHERE k.run_id = ? AND k.category = 'kernel' AND k.flops IS NOT NULL
                 AND coalesce(k.hbm_bytes, k.bytes_accessed) > 0 AND k.device_dur_ns > 0
                 AND coalesce(k.hlo_category, '') NOT IN {ASYNC_COPY_HALVES}
               GROUP BY ALL""",
            [*w_params, run_id],
        ).fetchall()
        return [Costed(str(n), str(cat or n), str(ph), int(c), float(f), float(b), int(t))
                for n, cat, ph, c, f, b, t in rows]

    @staticmethod
    def _torch_costs(con: duckdb.DuckDBPyConnection, run_id: str, w_sql: str, w_params: list[Any],
                     has_kernels: bool) -> list[Costed]:
        names = [*GEMM_OPS, *ATTENTION_OPS, *ELEMENTWISE_OPS]
        if has_kernels:
            sql = f"""WITH {w_sql},
                  o AS (SELECT rank, external_id, op_start_ns, op_name, input_dims, input_types,
                               concrete_inputs, sum(dur_ns) AS d
                        FROM kernel_ops WHERE run_id = ? AND category = 'kernel' AND op_name IN ?
                          AND input_dims IS NOT NULL GROUP BY ALL)
                  SELECT o.op_name, o.input_dims, o.input_types, o.concrete_inputs,
                         coalesce({_in_window("o.op_start_ns", "w.phase")}, 'all'), count(*), sum(o.d)
                  FROM o ASOF LEFT JOIN w ON w.rank = o.rank AND o.op_start_ns >= w.ws
                  GROUP BY ALL"""
        else:
            # CPU-only: an op's own span is its time, so an op that encloses another costed op
            # (aten::softmax around aten::_softmax, SDPA around its flash kernel op) is left out
            sql = f"""WITH {w_sql},
                  c AS (SELECT rank, tid, name, start_ns, end_ns, dur_ns, input_dims, input_types,
                               concrete_inputs
                        FROM ops WHERE run_id = ? AND name IN ? AND input_dims IS NOT NULL),
                  o AS (SELECT * FROM c WHERE NOT EXISTS (
                          SELECT 1 FROM c i WHERE i.rank = c.rank AND i.tid = c.tid
                             AND i.start_ns >= c.start_ns AND i.end_ns <= c.end_ns
                             AND (i.dur_ns < c.dur_ns OR (i.dur_ns = c.dur_ns AND i.name > c.name))))
                  SELECT o.name, o.input_dims, o.input_types, o.concrete_inputs,
                         coalesce({_in_window("o.start_ns", "w.phase")}, 'all'), count(*), sum(o.dur_ns)
                  FROM o ASOF LEFT JOIN w ON w.rank = o.rank AND o.start_ns >= w.ws
                  GROUP BY ALL"""
        out: list[Costed] = []
        for op, dims, types, concrete, phase, n, d in con.execute(sql, [*w_params, run_id, names]).fetchall():
            try:
                cost = op_cost(str(op), json.loads(dims), json.loads(types or "[]"),
                               json.loads(concrete) if concrete else None)
            except ValueError:
                cost = None
            if cost is None:
                continue
            f, b, m = cost
            out.append(Costed(str(op), str(op), str(phase), int(n), f * int(n), b * int(n), int(d or 0), m, str(dims)))
        return out

    @staticmethod
    def _op_record(c: Costed, ridge: float | None, spec: DeviceSpec | None = None) -> dict[str, Any]:
        """One costed op (group) with its roofline place and, with the device's peaks, the time it
        would take at its roof (max(FLOPs ÷ peak FLOP/s, bytes ÷ peak B/s)) and the time lost above it."""
        ai = c.flops / c.nbytes if c.nbytes else None
        cls = None if ai is None or ridge is None else ("memory-bound" if ai < ridge else "compute-bound")
        peak_f = spec.peak_tflops.get(RIDGE_DTYPE) if spec else None
        peak_b = spec.hbm_gbps if spec else None
        roof = (max(c.flops / (peak_f * 1e12), c.nbytes / (peak_b * 1e9)) * 1e9 if peak_f and peak_b else None)
        return {
            "roof_time_ns": roof, "time_lost_ns": c.time_ns - roof if roof is not None else None,
            "name": c.name, "kind": c.kind, "phase": c.phase, "count": c.count, "shape": c.shape, "rows": c.rows,
            "flops": c.flops, "bytes": c.nbytes, "time_ns": c.time_ns, "arithmetic_intensity": ai,
            "roofline_class": cls,
            "flops_per_s": c.flops / (c.time_ns / 1e9) if c.time_ns else None,
            "bytes_per_s": c.nbytes / (c.time_ns / 1e9) if c.time_ns else None,
        }

    @staticmethod
    def _totals(items: list[Costed], spec: DeviceSpec | None, ridge: float | None) -> dict[str, Any]:
        flops = sum(c.flops for c in items)
        nbytes = sum(c.nbytes for c in items)
        t = sum(c.time_ns for c in items)
        fps = flops / (t / 1e9) if t else None
        bps = nbytes / (t / 1e9) if t else None
        peak_f = spec.peak_tflops.get(RIDGE_DTYPE) if spec else None
        peak_b = spec.hbm_gbps if spec else None
        return {
            "flops": flops, "nbytes": nbytes, "time_ns": t, "ai": flops / nbytes if nbytes else None,
            "flops_per_s": fps, "bytes_per_s": bps,
            "mfu": fps / (peak_f * 1e12) if fps is not None and peak_f else None,
            "mbu": bps / (peak_b * 1e9) if bps is not None and peak_b else None,
        }

    @staticmethod
    def _device_text(spec: DeviceSpec | None, ridge: float | None) -> str:
        if spec is None:
            return "device not identified, so no peaks and no ridge point (never guessed)"
        if ridge is None:
            return f"{spec.name}: {RIDGE_DTYPE} peak or HBM bandwidth unknown, no ridge point"
        return (f"{spec.name} {RIDGE_DTYPE} {spec.peak_tflops[RIDGE_DTYPE]:g} TFLOP/s ÷ {spec.hbm_gbps:g} GB/s = "
                f"{ridge:.1f} FLOP/B")


@dataclass(frozen=True)
class PhaseKernels:
    """Kernel work per step phase (``decode``, ``prefill``, ``mixed``, ``unassigned``): ``time``
    and ``graph_time`` (launched by graph replay) in ns, ``kernels`` a count, ``gemm_names`` the
    GEMM kernel names."""

    time: dict[str, int]
    graph_time: dict[str, int]
    kernels: dict[str, int]
    gemm_names: dict[str, set[str]]


@dataclass(frozen=True)
class DecodeInput:
    """What the decode finding is made from: the run's costed ops and their records (``per_op``),
    its decode steps and all phase steps (rows of the ``steps`` view), kernel work per phase, the
    device (``ridge`` in FLOP/B), the evidence every finding of the run carries, and the model
    costing when a model is attached."""

    costed: list[Costed]
    per_op: list[dict[str, Any]]
    decode_rows: list[tuple[Any, ...]]
    srows: list[tuple[Any, ...]]
    phases: PhaseKernels
    spec: DeviceSpec | None
    ridge: float | None
    device_text: str
    evidence_base: dict[str, Any]
    run_info: Run
    has_kernels: bool
    mc: ModelCosting | None


@dataclass(frozen=True)
class _DecodeRoofline:
    """Where decode sits against the ridge (FLOP/B): the measured AI and the 2·M/w bound (None
    with a model attached: it knows each tensor class's width), whether each is below the
    ridge, and the batching headroom (×) each implies (None with a model: the projection
    replaces them, as KV reads grow with the batch)."""

    ai: float | None
    ai_bound: float | None
    measured_mb: bool
    bound_mb: bool
    headroom: float | None
    headroom_bound: float | None

    @classmethod
    def of(cls, ridge: float | None, ai_bound: float | None, ai: float | None) -> _DecodeRoofline:
        bound_mb = ai_bound is not None and ridge is not None and ai_bound < ridge
        measured_mb = ai is not None and ridge is not None and ai < ridge
        return cls(ai=ai, ai_bound=ai_bound, measured_mb=measured_mb, bound_mb=bound_mb,
                   headroom=ridge / ai if measured_mb and ridge and ai else None,
                   headroom_bound=ridge / ai_bound if bound_mb and ridge and ai_bound else None)

    def for_model(self, ridge: float | None, ai: float) -> _DecodeRoofline:
        """With a model's bytes and FLOPs per step: its AI, no 2·M/w bound and no headroom
        (the projection replaces them); ``bound_mb`` stays the structural bound's."""
        return replace(self, ai=ai, ai_bound=None, measured_mb=ridge is not None and ai < ridge,
                       headroom=None, headroom_bound=None)


@dataclass(frozen=True)
class DecodeFacts:
    """The decode figures of a run (:meth:`MemoryBoundDecode._decode_facts`): step times (ns,
    median ``step_ms`` in ms), the decode ops' totals, decode kernel time ``dtime`` and graph-replay
    time ``graph_ns`` (ns), cost coverage (fraction), tokens per step ``m`` and their source,
    weight width ``w`` (B/element), the roofline placement, the model's phase costing ``md``
    and projection, MBU/MFU with their coverage (fractions), the saving at the HBM roof (ns and
    fraction of the window ``window`` ns) and the throughput gain at 8× the batch."""

    step_times_ns: list[int | None]
    step_ms: float | None
    tot: dict[str, Any]
    dtime: int
    coverage: float | None
    enough: bool
    graph_ns: int
    tokens: list[int]
    ctx: list[int]
    rows: list[int]
    m: int | None
    m_source: str | None
    w: float
    width_note: str
    roof: _DecodeRoofline
    window: int | None
    md: Any
    model_mbu: float | None
    proj: dict[str, Any] | None
    mbu: float | None
    mfu: float | None
    mbu_cov: float | None
    mfu_cov: float | None
    saving: int | None
    saving_frac: float | None
    gain8: float | None


def _decode_metrics(f: DecodeFacts) -> list[Metric]:
    proj = f.proj
    return [
        Metric("decode_step_time_ms", f.step_ms, "ms", "lower"),
        Metric("decode_cost_coverage", f.coverage, "fraction", "higher"),
        Metric("decode_arithmetic_intensity", f.roof.ai, "FLOP/B", "higher"),
        Metric("decode_arithmetic_intensity_bound", f.roof.ai_bound, "FLOP/B", "higher"),
        Metric("decode_mbu", f.mbu, "fraction", "higher"),
        Metric("decode_mbu_coverage", f.mbu_cov, "fraction", "higher"),
        Metric("decode_mfu", f.mfu, "fraction", "higher"),
        Metric("decode_mfu_coverage", f.mfu_cov, "fraction", "higher"),
        Metric("decode_batching_headroom", f.roof.headroom, "x", "higher"),
        Metric("decode_batching_headroom_bound", f.roof.headroom_bound, "x", "higher"),
        Metric("decode_throughput_gain_8x", f.gain8, "x", "higher"),
        Metric("decode_compute_bound_batch", proj["compute_bound_batch"] if proj else None, "requests",
               "lower"),
        Metric("decode_max_batch_in_memory", proj["max_batch_in_memory"] if proj else None, "requests",
               "higher"),
    ]


def _decode_missing(d: DecodeInput, f: DecodeFacts) -> list[str]:
    """What keeps decode figures from being computed, one clause each."""
    missing: list[str] = []
    if not f.enough and f.dtime and f.model_mbu is None:
        why = (f"{f.graph_ns / f.dtime:.0%} of decode kernel time was launched by graph replay, which records no "
               "op shapes" if f.graph_ns else "the kernels' ops recorded no shapes and carry no XLA costs")
        missing.append(f"{(f.dtime - f.tot['time_ns']) / 1e6:.3f} ms of the {f.dtime / 1e6:.3f} ms of decode kernel "
                       f"time ({1 - (f.coverage or 0):.0%}) has no FLOP or byte count ({why}), so decode MBU, MFU "
                       "and arithmetic intensity are not computed")
    if d.spec is None:
        missing.append("the device is not identified, so there are no peaks: no ridge, MBU or MFU")
    if f.m is None:
        missing.append("the tokens per decode step are not stated (no bs=/generation_ marker, no GEMM shapes)")
    return missing


def _decode_evidence(d: DecodeInput, f: DecodeFacts, missing: list[str]) -> dict[str, Any]:
    tot = f.tot
    return {
        **d.evidence_base, "decode_steps": len(d.decode_rows), "decode_step_times_ns": f.step_times_ns,
        "decode_step_time_ms": f.step_ms, "decode_kernel_time_ns": f.dtime,
        "decode_kernels": d.phases.kernels.get("decode"), "decode_graph_replay_time_ns": f.graph_ns,
        "prefill_kernel_time_ns": d.phases.time.get("prefill"), "tokens_per_step": f.m,
        "tokens_source": f.m_source, "context_tokens": f.ctx or None,
        "gemm_rows": f.rows, "weight_bytes_per_element": f.w, "weight_width_source": f.width_note,
        "decode_costed_time_ns": tot["time_ns"], "decode_uncosted_time_ns": f.dtime - tot["time_ns"],
        "decode_cost_coverage": f.coverage,
        "decode_flops": tot["flops"], "decode_bytes": tot["nbytes"],
        "decode_costed_ai": tot["ai"], "decode_costed_mbu": tot["mbu"], "decode_costed_mfu": tot["mfu"],
        "decode_costed_bytes_per_s": tot["bytes_per_s"], "decode_costed_flops_per_s": tot["flops_per_s"],
        "arithmetic_intensity_bound": f.roof.ai_bound, "batching_headroom": f.roof.headroom,
        "batching_headroom_bound": f.roof.headroom_bound, "missing": missing,
        "decode_ops": [r for r in d.per_op if r["phase"] == "decode"][:10],
    }


def _decode_headroom_text(f: DecodeFacts) -> list[str]:
    """The batching advice, when decode is memory-bound (measured, else by structure)."""
    ctx, m = f.ctx, f.m
    advice = ("raise the decode batch (more concurrent requests, e.g. vLLM --max-num-seqs / SGLang "
              "--max-running-requests, memory for the KV cache permitting): the weight reads are shared by the "
              "batch; each request's KV-cache reads are not, so the gain shrinks as contexts grow"
              + (f" (these steps' {m} requests attend over Σ {ctx[len(ctx) // 2]} context tokens, "
                 f"~{ctx[len(ctx) // 2] / m:.0f} each)" if ctx and m and f.tokens else ""))
    if f.roof.headroom is not None:
        return [(f"Decode is memory-bound: the batch could grow about {f.roof.headroom:.1f}× before the costed "
                 f"decode ops reach the ridge; {advice}.")]
    if f.roof.headroom_bound is not None:
        return [(f"Decode weight GEMMs are memory-bound by structure: the batch could grow at least "
                 f"{f.roof.headroom_bound:.1f}× (a bound: ridge ÷ the 2·M/w ceiling) before they reach the ridge; "
                 f"{advice}.")]
    return []


def _decode_severity(d: DecodeInput, f: DecodeFacts) -> tuple[Severity, float | None]:
    """The severity and the per-token saving fraction at 8× the batch. A larger batch cuts the
    device time per token by 1 − 1/gain over the decode share of the device's work (busy time),
    not of the window: a capture that caught a host stall around one decode step says nothing
    about how much of serving is decode."""
    sev: Severity = "info"
    busy_all = d.run_info.busy_ns if d.has_kernels else None
    gain8 = f.gain8
    gain_frac = (min(1.0, f.dtime / busy_all) * (1 - 1 / gain8) if gain8 and gain8 > 1 and busy_all else None)
    score = max(x for x in (f.saving_frac, gain_frac, -1.0) if x is not None)
    if score >= 0 and (f.roof.measured_mb or f.roof.bound_mb):
        sev = "critical" if score >= SAVING_CRITICAL else "warning" if score >= SAVING_WARNING else "info"
    return sev, gain_frac


def _decode_title(d: DecodeInput, f: DecodeFacts) -> str:
    r, md, ridge = f.roof, f.md, d.ridge
    cov_txt = (f"costed ops cover {_pct(f.coverage)} of decode time" if f.coverage else
               "no decode op has a cost")
    if f.model_mbu is not None and d.mc is not None and md is not None and md.bytes is not None:
        return _decode_model_title(d.mc, md, f)
    if r.headroom is not None:
        return (f"decode is memory-bound: AI {r.ai:.1f} FLOP/B vs ridge {ridge:.0f}, MBU {_pct(f.tot['mbu'])} "
                f"({cov_txt}); ~{r.headroom:.1f}× batching headroom")
    if r.headroom_bound is not None:
        return (f"decode weight GEMMs are memory-bound by structure: AI ≤ {r.ai_bound:.1f} FLOP/B vs ridge "
                f"{ridge:.0f}, ≥ {r.headroom_bound:.1f}× batching headroom (bound); {cov_txt}")
    if r.ai is not None and ridge is not None:
        return f"decode is compute-bound: AI {r.ai:.1f} FLOP/B vs ridge {ridge:.0f} ({cov_txt})"
    uncosted = not f.enough and f.dtime
    why_short = ("graph replay records no op shapes" if f.graph_ns and uncosted else
                 "no op shapes or XLA costs" if uncosted else
                 "device not identified" if d.spec is None else "tokens per step not stated")
    return ((f"decode step {f.step_ms:.3f} ms (median of {len(d.decode_rows)}); " if f.step_ms else "decode: ")
            + (f"{1 - (f.coverage or 0):.0%} of decode kernel time uncosted ({why_short}), so no decode "
               "roofline" if uncosted else f"roofline class unknown ({why_short})"))


def _decode_model_title(mc: ModelCosting, md: Any, f: DecodeFacts) -> str:
    """The title when the attached model costs the decode steps (its bytes, or the counters')."""
    proj, gain8 = f.proj, f.gain8
    src = (f"hardware counters: {md.bytes / md.steps / 1e9:.1f} GB, the {mc.model} model "
           f"{(md.model_bytes or 0) / md.steps / 1e9:.1f} GB" if md.bytes_source == "counters"
           else f"{mc.model}: {md.bytes / md.steps / 1e9:.1f} GB")
    return (f"decode at {_pct(f.model_mbu)} of the HBM roof ({src} "
            f"per step in {md.busy_ns / md.steps / 1e6:.2f} ms of kernel time"
            + (f", {_pct(md.coverage)} of decode time" if md.coverage is not None else "") + ")"
            + (f"; {proj['points'][-2]['batch']} requests would give ≈{gain8:.1f}× the throughput"
               if proj and gain8 else ""))


def run_op_costs(con: duckdb.DuckDBPyConnection, run_id: str) -> list[Costed]:
    """Every costed op of the run, whole run (phase ``all``): XLA ops with their cost-model FLOPs and
    HBM bytes, PyTorch GEMM / attention / elementwise / norm ops costed from their recorded shapes
    (:func:`op_cost`), timed by the device time of the kernels they launched (CPU-only runs: the op's
    own span). The one cost model the analyzer and ``tracekit report``'s roofline share."""
    w_sql, w_params = MemoryBoundDecode._windows_sql([])
    has_kernels = con.execute(
        "SELECT count(*) FROM kernels WHERE run_id = ? AND category = 'kernel'", [run_id]).fetchall()[0][0] > 0
    return (MemoryBoundDecode._xla_costs(con, run_id, w_sql, w_params)
            + MemoryBoundDecode._torch_costs(con, run_id, w_sql, w_params, has_kernels))


def _format_hint(mc: ModelCosting) -> str:
    """A sentence when the kernel names state a number format the attached model does not."""
    spec = models.from_json(json.dumps(mc.spec)) if mc.spec else None
    if spec is None:
        return ""
    out = []
    kv = mc.formats.get("kv_cache")
    if kv and kv != spec.kv_cache_dtype:
        out.append(f"the attention kernels read an {kv} KV cache but the model is costed with {spec.kv_cache_dtype} "
                   f"(attach it with --kv-cache {kv})")
    w = mc.formats.get("weights")
    if w and w not in (spec.weights_dtype, spec.expert_weights_dtype):
        out.append(f"the GEMM kernels are {w} but the weights are costed as {spec.weights_dtype} (attach with "
                   f"--weights {w})")
    return (" Note: " + "; ".join(out) + ": the bytes above are then too high.") if out else ""


def _in_window(t: str, col: str) -> str:
    """``col`` of the window ASOF-joined as the latest one starting at or before ``t`` (``w.ws <= t``),
    or NULL when ``t`` is past its end: the window that holds ``t``, the windows being disjoint."""
    return f"CASE WHEN {t} <= w.we THEN {col} END"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _fmt_bw(x: float | None) -> str:
    return "n/a B/s" if x is None else f"{x / 1e9:.1f} GB/s"


def _fmt_flops(x: float | None) -> str:
    return "n/a FLOP/s" if x is None else f"{x / 1e12:.3f} TFLOP/s"
