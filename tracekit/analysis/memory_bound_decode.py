"""memory_bound_decode: split prefill from decode, put each op on the roofline, and say how far
decode is from the bandwidth roof and how much batching headroom that leaves.

Inputs (views): ``annotations`` (phase markers), ``kernels`` (device time; XLA cost columns
``flops``, ``hbm_bytes``, ``bytes_accessed``, ``device_dur_ns`` on TPU), ``runtime_calls`` (launch
time of each kernel, which places it in a host-side phase window), ``kernel_ops`` (the op that
launched each kernel, with its ``input_dims``/``input_types``), ``ops`` (CPU-only runs: the GEMM
ops themselves), ``graph_launches`` (steps replayed as one graph), ``devices`` (identified with
:func:`tracekit.analysis.hardware.identify`; peaks the trace states win).

Phases:
* explicit annotations: SGLang ``step[DECODE bs=N]`` / ``step[EXTEND …]`` / ``step[PREFILL …]``;
  TraceLens/vLLM ``execute_<t>_context_<c>(…)_generation_<g>(…)`` (``c = 0, g > 0``: decode of
  ``g`` tokens; ``c > 0, g = 0``: prefill; both: mixed); otherwise any annotation or XPlane step
  marker whose name contains ``decode`` or ``prefill``/``extend``. Overlapping windows form one
  step; a step whose windows disagree is ``mixed``. A kernel belongs to the step whose window
  holds its launching call (its own start when it has none): host windows end before the GPU runs.
* structure, when no annotation names a phase and at least ``MIN_STRUCTURAL_REPEATS`` GEMM
  executions have at most ``DECODE_MAX_ROWS`` rows (tokens): each GEMM op with shapes is decode
  when it has at most ``DECODE_MAX_ROWS`` rows, prefill otherwise. Graph-replayed kernels with
  neither markers nor shapes are not classified.

Cost model (per op):
* XLA (TPU): ``flops`` and ``hbm_bytes`` (else ``bytes_accessed``) of each execution, time =
  ``device_dur_ns`` (XProf's device clock). Async copy halves (``copy-start``/``copy-done``: the
  wait for a DMA, not an op's execution) are not counted.
* PyTorch shapes (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``; wrappers such as
  ``aten::linear``/``matmul`` are not counted, their leaf GEMM is): FLOPs = 2·M·N·K (·batch);
  bytes = (M·K + K·N + M·N (+ bias)) elements × dtype width, each operand read or written once;
  time = Σ ``dur_ns`` of the kernels the op launched (a CPU-only run: the op's own ``dur_ns``).
* PyTorch attention (:data:`ATTENTION_OPS`: SDPA and its flash/efficient/cuDNN/math/CPU variants,
  ``_flash_attention_forward``, ``_efficient_attention_forward``): FLOPs = 4·B·H·Sq·Sk·D (QKᵀ and
  PV; halved when ``is_causal`` is recorded true and Sq = Sk); bytes = Q + K + V + O elements ×
  dtype width (:func:`attention_cost`).
* PyTorch elementwise and normalization ops (:data:`ELEMENTWISE_OPS`: add/sub/mul/div, activations,
  softmax, layer/RMS norm, vLLM/SGLang/aiter fused norms and silu-and-mul): FLOPs = output elements ×
  a per-element cost; bytes = tensor inputs + output × dtype width (:func:`elementwise_cost`).
  A CPU-only run leaves out an op that encloses another costed op (its own span includes it).
  vLLM/SGLang attention ops (``vllm::unified_attention*``) record only the new tokens' q/k/v, not
  the context length, so they get no cost; other ops count in the phase's time but not in its
  FLOPs or bytes.

Math: AI = FLOPs ÷ bytes (FLOP/B); ridge = peak bf16 FLOP/s ÷ peak HBM B/s; an op is
``memory-bound`` when AI < ridge. Achieved FLOP/s = ΣFLOPs ÷ Σtime and bytes/s = Σbytes ÷ Σtime
over the counted ops; MFU and MBU divide them by the peaks. A decode GEMM with M token rows and
weights of width w bytes has AI < 2·M/w whatever N and K are (the weight matrix alone is N·K·w
bytes), so decode is memory-bound by structure when 2·M/w < ridge even without shapes. Batching
headroom ≈ ridge ÷ decode AI: the factor by which the batch can grow before the decode GEMMs
reach the ridge (weight reads are shared by the batch, so step time grows little until then).

Thresholds: decode memory-bound with headroom ≥ ``HEADROOM_WARNING``× is a ``warning``, else
``info``; the phase-level MBU/MFU metrics are reported only when the costed ops cover at least
``MIN_COST_COVERAGE`` of the phase's kernel time (else the finding lists what is missing).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import duckdb

from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding, Metric, Severity
from tracekit.analysis.hardware import DeviceSpec, identify, ridge_point

DECODE_MAX_ROWS = 128  # rows (tokens) of a GEMM's activation matrix still counted as decode
MIN_STRUCTURAL_REPEATS = 8  # small-row GEMM executions needed to call a run without markers decode
HEADROOM_WARNING = 2.0  # × batch growth before the ridge: below this, decode is near the ridge
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

_SGLANG = re.compile(r"^step\[(DECODE|EXTEND|PREFILL|MIXED|IDLE)\b([^\]]*)\]", re.IGNORECASE)
_BS = re.compile(r"\bbs=(\d+)")
_EXECUTE = re.compile(r"^execute_\d+_context_(\d+)\(.*\)_generation_(\d+)\(")


def classify_annotation(name: str) -> tuple[str, int | None] | None:
    """Phase (``decode``/``prefill``/``mixed``) and decode tokens per step named by an annotation."""
    m = _SGLANG.match(name)
    if m:
        kind = m.group(1).upper()
        if kind == "IDLE":
            return None
        phase = {"DECODE": "decode", "MIXED": "mixed"}.get(kind, "prefill")
        bs = _BS.search(m.group(2))
        return phase, int(bs.group(1)) if phase == "decode" and bs else None
    m = _EXECUTE.match(name)
    if m:
        ctx, gen = int(m.group(1)), int(m.group(2))
        if ctx == 0 and gen > 0:
            return "decode", gen
        if gen == 0 and ctx > 0:
            return "prefill", None
        return ("mixed", None) if ctx and gen else None
    low = name.lower()
    if "prefill" in low or "extend" in low:
        return "prefill", None
    if "decode" in low:
        return "decode", None
    return None


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
    rank: int
    start: int
    end: int
    phase: str
    tokens: int | None
    names: list[str] = field(default_factory=list)
    id: int = 0


def merge_windows(rows: list[tuple[int, str, int, int]]) -> list[Step]:
    """Overlapping phase windows (per rank) → steps; a step whose windows disagree is ``mixed``."""
    out: list[Step] = []
    for rank, name, start, end in sorted(rows, key=lambda r: (r[0], r[2], -r[3])):
        c = classify_annotation(name)
        if c is None:
            continue
        phase, tokens = c
        cur = out[-1] if out else None
        if cur is not None and cur.rank == rank and start <= cur.end:
            cur.end = max(cur.end, end)
            if phase != cur.phase:
                cur.phase = "mixed"
            cur.tokens = cur.tokens or tokens
            cur.names.append(name)
        else:
            out.append(Step(rank, start, end, phase, tokens, [name], len(out)))
    return out


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


class MemoryBoundDecode(Analyzer, name="memory_bound_decode"):
    summary = "prefill vs decode, per-op roofline class, decode MBU/MFU and batching headroom"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        spec = self._device(con, run_id)
        ridge = ridge_point(spec, RIDGE_DTYPE) if spec else None
        ann = con.execute(
            """SELECT rank, name, start_ns, end_ns FROM annotations
               WHERE run_id = ? AND regexp_matches(name,
                 '(?i)(decode|prefill|extend|^step\\[(DECODE|EXTEND|PREFILL|MIXED)|^execute_[0-9]+_context_)')""",
            [run_id],
        ).fetchall()
        steps = merge_windows([(int(r), str(n), int(s), int(e)) for r, n, s, e in ann])
        w_sql, w_params = self._windows_sql(steps)
        has_kernels = con.execute(
            "SELECT count(*) FROM kernels WHERE run_id = ? AND category = 'kernel'", [run_id]
        ).fetchall()[0][0] > 0

        # Kernel time per phase and step (launch time places the kernel in a window). The windows
        # of a rank are disjoint (merge_windows), so the latest one starting at or before the launch
        # (an ASOF join) is the only one that can hold it. Written for 1M-kernel runs
        # (benchmarks/bench_analyze.py): launching calls are placed once (many kernels share one
        # graph launch), kernels without one by their own start; the GEMM-name regex runs once per
        # distinct name.
        kt = con.execute(
            f"""WITH {w_sql},
                 calls AS (SELECT rank, correlation_id, min(start_ns) AS api_ns FROM runtime_calls
                           WHERE run_id = ? AND correlation_id IS NOT NULL GROUP BY ALL),
                 placed AS (SELECT c.rank, c.correlation_id, {_in_window("c.api_ns", "w.phase")} AS phase,
                                   {_in_window("c.api_ns", "w.step")} AS step
                            FROM calls c ASOF LEFT JOIN w ON w.rank = c.rank AND c.api_ns >= w.ws),
                 k AS (SELECT k.rank, k.name, k.start_ns, coalesce(k.device_dur_ns, k.dur_ns) AS d,
                              p.correlation_id IS NOT NULL AS has_call, p.phase, p.step
                       FROM kernels k LEFT JOIN placed p USING (rank, correlation_id)
                       WHERE k.run_id = ? AND k.category = 'kernel'),
                 own AS (SELECT k.name, k.d, {_in_window("k.start_ns", "w.phase")} AS phase,
                                {_in_window("k.start_ns", "w.step")} AS step
                         FROM (SELECT * FROM k WHERE NOT has_call) k
                         ASOF LEFT JOIN w ON w.rank = k.rank AND k.start_ns >= w.ws),
                 by_name AS (
                   SELECT phase, step, name, count(*) AS n, sum(d) AS d
                   FROM (SELECT name, d, phase, step FROM k WHERE has_call
                         UNION ALL SELECT name, d, phase, step FROM own)
                   GROUP BY ALL),
                 gemm AS (SELECT name, regexp_matches(name, ?) AS is_gemm FROM (SELECT DISTINCT name FROM by_name))
               SELECT coalesce(phase, 'unassigned'), step, sum(n), sum(d),
                      sum(d) FILTER (WHERE is_gemm), list(DISTINCT name) FILTER (WHERE is_gemm)
               FROM by_name JOIN gemm USING (name)
               GROUP BY ALL""",
            [*w_params, run_id, run_id, GEMM_KERNEL],
        ).fetchall()
        phase_time: dict[str, int] = {}
        phase_gemm_time: dict[str, int] = {}
        phase_kernels: dict[str, int] = {}
        step_time: dict[int, int] = {}
        gemm_names: dict[str, set[str]] = {}
        for phase, step, n, d, gd, names in kt:
            phase_time[phase] = phase_time.get(phase, 0) + int(d or 0)
            phase_gemm_time[phase] = phase_gemm_time.get(phase, 0) + int(gd or 0)
            phase_kernels[phase] = phase_kernels.get(phase, 0) + int(n)
            gemm_names.setdefault(phase, set()).update(names or [])
            if step is not None:
                step_time[int(step)] = int(d or 0)

        costed = self._xla_costs(con, run_id, w_sql, w_params) + self._torch_costs(
            con, run_id, w_sql, w_params, has_kernels
        )
        structural = not steps
        small = sum(c.count for c in costed if c.rows is not None and c.rows <= DECODE_MAX_ROWS)
        if structural and small >= MIN_STRUCTURAL_REPEATS:  # repeated small-row GEMMs: decode steps
            for c in costed:
                if c.rows is not None:
                    c.phase = "decode" if c.rows <= DECODE_MAX_ROWS else "prefill"
        if not has_kernels:  # CPU-only: the ops' own time is the phase time
            for c in costed:
                phase_time[c.phase] = phase_time.get(c.phase, 0) + c.time_ns
        res = AnalyzerResult()
        per_op = [self._op_record(c, ridge) for c in costed]
        per_op.sort(key=lambda r: -r["time_ns"])
        run = self._totals(costed, spec, ridge)
        mb_time = sum(r["time_ns"] for r in per_op if r["roofline_class"] == "memory-bound")
        res.metrics += [
            Metric("arithmetic_intensity", run["ai"], "FLOP/B", "higher"),
            Metric("achieved_tflops", run["flops_per_s"] / 1e12 if run["flops_per_s"] is not None else None,
                   "TFLOP/s", "higher"),
            Metric("achieved_hbm_gbps", run["bytes_per_s"] / 1e9 if run["bytes_per_s"] is not None else None,
                   "GB/s", "higher"),
            Metric("mfu", run["mfu"], "fraction", "higher"),
            Metric("mbu", run["mbu"], "fraction", "higher"),
            Metric("memory_bound_time_fraction",
                   mb_time / run["time_ns"] if ridge and run["time_ns"] else None, "fraction", "lower"),
        ]
        device_text = self._device_text(spec, ridge)
        evidence_base: dict[str, Any] = {
            "device": spec.name if spec else None,
            "peak_tflops": spec.peak_tflops.get(RIDGE_DTYPE) if spec else None,
            "peak_hbm_gbps": spec.hbm_gbps if spec else None,
            "peak_sources": {k: spec.source(k) for k in (f"peak_tflops.{RIDGE_DTYPE}", "hbm_gbps")} if spec else None,
            "ridge_flop_per_byte": ridge,
            "time_base": "device_dur_ns (XLA device clock)" if any(c.shape is None for c in costed)
            else ("kernel dur_ns of the kernels each op launched" if has_kernels else "op dur_ns (CPU-only run)"),
        }

        decode_steps = [s for s in steps if s.phase == "decode"]
        has_decode = bool(decode_steps) or any(c.phase == "decode" for c in costed)
        if has_decode:
            self._decode(res, costed, decode_steps, step_time, phase_time, phase_gemm_time, phase_kernels,
                         gemm_names, spec, ridge, structural, device_text, evidence_base, per_op)
        elif costed:
            ev = {**evidence_base, **{k: v for k, v in run.items()}, "memory_bound_time_ns": mb_time,
                  "phases": sorted({s.phase for s in steps}), "ops": per_op[:20]}
            share = mb_time / run["time_ns"] if ridge and run["time_ns"] else None
            res.findings.append(Finding(
                severity="info",
                title=(f"{share:.0%} of costed op time is memory-bound; achieved "
                       f"{_fmt_bw(run['bytes_per_s'])} ({_pct(run['mbu'])} of the HBM roof), "
                       f"{_fmt_flops(run['flops_per_s'])} ({_pct(run['mfu'])} of peak)")
                if share is not None else
                f"roofline not placed: {device_text}; achieved {_fmt_bw(run['bytes_per_s'])}, "
                f"{_fmt_flops(run['flops_per_s'])}",
                detail=(("No decode phase was found: the annotations name only "
                         + ", ".join(sorted({s.phase for s in steps})) + " steps. " if steps else
                         "No decode phase was found (no decode/prefill annotation or step marker, and no GEMM "
                         "op with shapes). ") + f"Over the {len(costed)} costed ops ({run['time_ns'] / 1e6:.3f} ms of "
                        f"{evidence_base['time_base']}): arithmetic intensity {_num(run['ai'])} FLOP/B against "
                        f"{device_text}. Top op: {per_op[0]['name']} ({per_op[0]['roofline_class']}, "
                        f"AI {_num(per_op[0]['arithmetic_intensity'])})."),
                evidence=ev,
            ))
        return res

    # ------------------------------------------------------------------------------------------

    def _decode(
        self, res: AnalyzerResult, costed: list[Costed], decode_steps: list[Step], step_time: dict[int, int],
        phase_time: dict[str, int], phase_gemm_time: dict[str, int], phase_kernels: dict[str, int],
        gemm_names: dict[str, set[str]], spec: DeviceSpec | None, ridge: float | None, structural: bool,
        device_text: str, evidence_base: dict[str, Any], per_op: list[dict[str, Any]],
    ) -> None:
        dec = [c for c in costed if c.phase == "decode"]
        tot = self._totals(dec, spec, ridge)
        dtime = phase_time.get("decode", 0) or tot["time_ns"]
        coverage = tot["time_ns"] / dtime if dtime else None
        enough = coverage is not None and coverage >= MIN_COST_COVERAGE
        n_steps = len(decode_steps)
        # per step: its decode kernel time; a CPU-only run (no kernels): the step window itself
        step_ns = [step_time.get(s.id, 0) if phase_kernels else s.end - s.start for s in decode_steps]
        step_ms = sum(step_ns) / len(step_ns) / 1e6 if step_ns else None
        tokens = sorted({s.tokens for s in decode_steps if s.tokens})
        rows = sorted({c.rows for c in dec if c.rows is not None})
        m = tokens[0] if tokens else (max(rows) if rows else None)
        width = weight_width_from_names(sorted(gemm_names.get("decode", set())))
        width_note = "from the GEMM kernel names" if width is not None else "not stated: 1 B (fp8) assumed, the widest bound"
        w = width if width is not None else 1.0
        ai_bound = 2.0 * m / w if m else None
        ai = tot["ai"] if enough else None
        ai_for_class = ai if ai is not None else ai_bound
        memory_bound = ai_for_class is not None and ridge is not None and ai_for_class < ridge
        headroom = ridge / ai_for_class if ridge and ai_for_class else None
        res.metrics += [
            Metric("decode_arithmetic_intensity", ai, "FLOP/B", "higher"),
            Metric("decode_arithmetic_intensity_bound", ai_bound, "FLOP/B", "higher"),
            Metric("decode_mbu", tot["mbu"] if enough else None, "fraction", "higher"),
            Metric("decode_mfu", tot["mfu"] if enough else None, "fraction", "higher"),
            Metric("decode_step_time_ms", step_ms, "ms", "lower"),
            Metric("decode_cost_coverage", coverage, "fraction", "higher"),
            Metric("decode_batching_headroom", headroom if memory_bound else None, "x", "higher"),
        ]
        missing: list[str] = []
        if not enough:
            uncosted = dtime - tot["time_ns"]
            missing.append(
                f"FLOPs and bytes of {uncosted / 1e6:.3f} ms of the {dtime / 1e6:.3f} ms of decode kernel time "
                f"({1 - (coverage or 0):.0%}) are missing: those kernels have no op shapes (graph replay or "
                "no recorded shapes) and no XLA costs, so decode MBU, MFU and arithmetic intensity are not computed")
        if spec is None:
            missing.append("the device is not identified, so there are no peaks: no ridge, MBU or MFU")
        if m is None:
            missing.append("the tokens per decode step are not stated (no bs=/generation_ annotation, no GEMM shapes)")
        how = f"structure (GEMM ops with ≤ {DECODE_MAX_ROWS} rows)" if structural else (
            "annotations " + ", ".join(sorted({n[:40] for s in decode_steps for n in s.names}))[:200])
        counted = [r for r in per_op if r["phase"] == "decode"][:10]
        ev = {
            **evidence_base, "decode_from": "structure" if structural else "annotations",
            "decode_steps": n_steps or None, "decode_kernel_time_ns": dtime,
            "decode_kernels": phase_kernels.get("decode"), "decode_gemm_kernel_time_ns": phase_gemm_time.get("decode"),
            "prefill_kernel_time_ns": phase_time.get("prefill"), "tokens_per_step": m,
            "gemm_rows": rows, "weight_bytes_per_element": w, "weight_width_source": width_note,
            "decode_costed_time_ns": tot["time_ns"], "decode_cost_coverage": coverage,
            "decode_flops": tot["flops"], "decode_bytes": tot["nbytes"],
            "decode_costed_ai": tot["ai"], "decode_costed_mbu": tot["mbu"], "decode_costed_mfu": tot["mfu"],
            "decode_costed_bytes_per_s": tot["bytes_per_s"], "decode_costed_flops_per_s": tot["flops_per_s"],
            "arithmetic_intensity_bound": ai_bound, "batching_headroom": headroom,
            "decode_step_time_ms": step_ms, "missing": missing, "decode_ops": counted,
        }
        parts = [f"Decode found from {how}: {n_steps or 'no'} step(s), "
                 f"{dtime / 1e6:.3f} ms of kernel time" + (f" ({step_ms:.3f} ms per step)" if step_ms else "") + "."]
        if tot["time_ns"]:
            parts.append(
                f"Costed decode ops ({coverage:.0%} of that time): AI {_num(tot['ai'])} FLOP/B, "
                f"{_fmt_bw(tot['bytes_per_s'])} ({_pct(tot['mbu'])} of the HBM roof), "
                f"{_fmt_flops(tot['flops_per_s'])} ({_pct(tot['mfu'])} of peak).")
        if ai_bound is not None:
            parts.append(f"With {m} token rows per GEMM and {w:g}-byte weights ({width_note}), no decode GEMM can "
                         f"exceed 2·M/w = {ai_bound:.1f} FLOP/B.")
        parts.append(f"Ridge: {device_text}.")
        if memory_bound and headroom is not None:
            gap = (f" Decode runs at {_pct(tot['mbu'])} of the bandwidth roof, "
                   f"{1 - (tot['mbu'] or 0):.0%} short of it." if enough and tot["mbu"] is not None else "")
            parts.append(f"Decode is memory-bound.{gap} The batch could grow "
                         f"{'at least ' if ai is None else 'about '}{headroom:.1f}× "
                         f"(to ~{(m or 0) * headroom:.0f} tokens per step) before the decode GEMMs reach the ridge, "
                         "with little more time per step: batch more requests (or use speculative decoding) to "
                         "raise throughput.")
        if missing:
            parts.append("Missing: " + "; ".join(missing) + ".")
        if memory_bound and headroom is not None:
            sev: Severity = "warning" if headroom >= HEADROOM_WARNING else "info"
            title = (f"decode is memory-bound: AI {'≤ ' if ai is None else ''}{ai_for_class:.1f} FLOP/B vs ridge "
                     f"{ridge:.0f}; ~{headroom:.1f}× batching headroom"
                     + (f", MBU {tot['mbu']:.0%}" if enough and tot["mbu"] is not None else ""))
        else:
            sev = "info"
            title = ("decode is compute-bound" if ai_for_class is not None and ridge is not None
                     else "decode roofline class unknown: " + (missing[0].split(",")[0] if missing else "no data"))
        res.findings.append(Finding(severity=sev, title=title, detail=" ".join(parts), evidence=ev))

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
        r = con.execute(
            """WITH busy AS (SELECT rank, device, count(*) AS n FROM kernels WHERE run_id = ? GROUP BY ALL)
               SELECT d.* FROM devices d LEFT JOIN busy b USING (rank, device)
               WHERE d.run_id = ? ORDER BY b.n DESC NULLS LAST, d.rank, d.device LIMIT 1""",
            [run_id, run_id],
        )
        cols = [c[0] for c in r.description]
        rows = r.fetchall()
        if not rows:
            return None
        row = dict(zip(cols, rows[0]))
        if row.get("vendor") == "cpu":
            return None
        return identify(row)

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
    def _op_record(c: Costed, ridge: float | None) -> dict[str, Any]:
        ai = c.flops / c.nbytes if c.nbytes else None
        cls = None if ai is None or ridge is None else ("memory-bound" if ai < ridge else "compute-bound")
        return {
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
