"""Model-aware step costing: decode MBU/MFU and prefill MFU of a run with an attached model, and
the batching projection a capacity planner can act on (issue 15).

Inputs (views): ``step_costs`` (bytes and FLOPs each step must move and compute, from the model's
``run_models`` constants and the tokens the step marker states; its formulas are documented in
``tracekit/analysis/sql/models.sql`` and docs/findings.md) and ``run_models``. The device's peaks
come from :mod:`tracekit.analysis.hardware` through the caller.

Math:

* A phase's MBU = Σ bytes ÷ Σ busy time ÷ peak HBM B/s over its steps with a cost (``busy_ns``:
  the device's working time in the step; idle inside a step is reported by ``launch_idle``, not
  charged to bandwidth); MFU likewise with FLOPs and the bf16 peak. ``decode`` = decode steps,
  ``prefill`` = prefill and mixed steps (a mixed step's FLOPs are mostly its prefill tokens').
  Coverage = Σ busy time of the costed steps ÷ the phase's device time (``phase_time_ns``).
* Batching projection (decode): the step's bytes and FLOPs at B requests, each with the measured
  mean context L = context_tokens ÷ requests, by :func:`decode_cost` (the decode case of the
  ``step_costs`` formula); time t(B) = max(bytes(B) ÷ the bandwidth the step achieves now,
  FLOPs(B) ÷ peak FLOP/s); throughput B ÷ t(B); TPOT t(B). Weights are shared by the batch, KV
  reads are not, so the gain flattens as B·L grows. The batch turns compute-bound where
  FLOPs(B)/bytes(B) reaches the ridge; KV memory B·L·KV bytes per token; the largest batch whose
  weights + KV fit in :data:`HBM_USABLE` of the device memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from tracekit.analysis.hardware import DeviceSpec

RIDGE_DTYPE = "bf16"
#: FLOP ceiling of the batching projection when no GEMM of the run measures one: large bf16 GEMMs
#: reach about 70 % of the datasheet peak with the vendor libraries (cuBLAS on H100, hipBLASLt on
#: MI300X at best; this corpus's MI300X prefill GEMMs reached 35-45 %, which the run's own rate
#: then replaces)
ACHIEVABLE_FLOP_FRACTION = 0.7
MIN_COUNTER_COVERAGE = 0.9  # share of a phase's kernel time the counted dispatches must cover
HBM_USABLE = 0.9  # share of device memory for weights + KV cache (vLLM's gpu_memory_utilization default)
PROJECTION_FACTORS = (2, 4, 8, 16)  # batch multiples the projection shows


@dataclass
class PhaseCost:
    """A phase's model-costed steps summed (bytes, FLOPs per rank; times in ns)."""

    phase: str
    steps: int
    bytes: float | None
    flops: float
    busy_ns: int
    step_time_ns: int
    tokens_median: int | None
    kv_read_bytes: float | None
    weight_bytes: float
    coverage: float | None
    mbu: float | None = None
    mfu: float | None = None
    mbu_step_time: float | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    tokens_source: str = "marker"  # marker | requests (request_decode_tokens)
    bytes_source: str = "model"
    model_bytes: float | None = None  # the model's bytes when counters replaced them
    model_mbu: float | None = None
    counted: dict[str, Any] | None = None  # what the counters covered (measured_bytes)


@dataclass
class ModelCosting:
    """What the attached model says about the run's steps."""

    model: str
    origin: str
    tensor_parallel: int
    tp_source: str
    constants: dict[str, float]
    phases: dict[str, PhaseCost]
    uncosted_steps: dict[str, int]
    projection: dict[str, Any] | None = None
    classes: list[dict[str, Any]] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)


def model_costing(con: duckdb.DuckDBPyConnection, run_id: str, spec: DeviceSpec | None,
                  phase_time_ns: dict[str, int], gemm_flops_per_s: float | None = None) -> ModelCosting | None:
    """The run's model costing, or None when no model is attached. ``phase_time_ns``: device time
    of each phase's kernels (the coverage's denominator); ``gemm_flops_per_s``: the best rate a
    compute-bound GEMM of this run reached (op shapes), the projection's FLOP ceiling when given."""
    m = con.execute(
        "SELECT model, origin, tensor_parallel, tp_source, spec FROM run_models WHERE run_id = ?", [run_id]
    ).fetchall()
    if not m:
        return None
    model, origin, tp, tp_source, spec_json = m[0]
    cons = con.execute("SELECT * EXCLUDE (run_id, model, origin, spec, tensor_parallel, tp_source, attached_at) "
                       "FROM run_models WHERE run_id = ?", [run_id])
    constants = dict(zip([c[0] for c in cons.description], cons.fetchall()[0], strict=True))
    cur = con.execute("SELECT * FROM step_costs WHERE run_id = ? ORDER BY rank, step", [run_id])
    cols = [c[0] for c in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    uncosted = {
        str(p): int(n) for p, n in con.execute(
            """SELECT s.phase, count(*) FROM steps s ANTI JOIN (SELECT * FROM step_costs WHERE run_id = $1) c
                 USING (run_id, rank, step)
               WHERE s.run_id = $1 AND s.phase IN ('decode', 'prefill', 'mixed') GROUP BY ALL""", [run_id]).fetchall()}
    peak_f = spec.peak_tflops.get(RIDGE_DTYPE) if spec else None
    peak_b = spec.hbm_gbps if spec else None
    phases: dict[str, PhaseCost] = {}
    for name, members in (("decode", ("decode",)), ("prefill", ("prefill", "mixed"))):
        rs = [r for r in rows if r["phase"] in members and r["busy_ns"]]
        if not rs:
            continue
        busy = sum(int(r["busy_ns"]) for r in rs)
        st = sum(int(r["step_time_ns"] or 0) for r in rs)
        nbytes = None if any(r["bytes"] is None for r in rs) else sum(float(r["bytes"]) for r in rs)
        flops = sum(float(r["flops"]) for r in rs)
        toks = sorted(int(r["tokens"]) for r in rs)
        denom = sum(phase_time_ns.get(p, 0) for p in members)
        pc = PhaseCost(
            phase=name, steps=len(rs), bytes=nbytes, flops=flops, busy_ns=busy, step_time_ns=st,
            tokens_median=toks[len(toks) // 2], weight_bytes=sum(float(r["weight_bytes"]) for r in rs),
            kv_read_bytes=None if nbytes is None else sum(float(r["kv_read_bytes"]) for r in rs),
            coverage=min(1.0, busy / denom) if denom else None, rows=rs,
            tokens_source="requests" if any(r["tokens_source"] == "requests" for r in rs) else "marker")
        pc.counted = measured_bytes(con, run_id, rs)
        if pc.counted and pc.counted["time_fraction"] >= MIN_COUNTER_COVERAGE:
            pc.model_bytes, pc.bytes = nbytes, pc.counted["bytes"]
            pc.bytes_source = "counters"
            if peak_b and nbytes is not None and busy:
                pc.model_mbu = nbytes / (busy / 1e9) / (peak_b * 1e9)
            nbytes = pc.bytes
        if peak_b and nbytes is not None and busy:
            pc.mbu = nbytes / (busy / 1e9) / (peak_b * 1e9)
            pc.mbu_step_time = nbytes / (st / 1e9) / (peak_b * 1e9) if st else None
        if peak_f and busy:
            pc.mfu = flops / (busy / 1e9) / (peak_f * 1e12)
        phases[name] = pc
    out = ModelCosting(str(model), str(origin), int(tp), str(tp_source), constants, phases, uncosted)
    out.spec = json.loads(spec_json) if isinstance(spec_json, str) else dict(spec_json or {})
    out.formats = kernel_formats(con, run_id)
    dec = phases.get("decode")
    if dec is not None and dec.bytes is not None and spec is not None and peak_f and peak_b:
        out.classes = class_breakdown(con, run_id, constants, dec, peak_b * 1e9)
        out.projection = project_batching(constants, dec, spec, out.classes, gemm_flops_per_s)
    return out


#: MoE GEMM kernels that compute the gate and up projections (with the activation fused):
#: ``_matmul_ogs…_swiglu`` (triton_kernels, gpt-oss), fused_moe ``w13``/``gate_up``
_MOE_GATE_UP = re.compile(r"(?i)swiglu|silu|gelu|gate_?up|w13|w1_|act_and_mul")
_GEMM_NAME = re.compile(r"(?i)matmul|gemm|_mm_|bmm|fused_moe|cijk")


def measured_bytes(con: duckdb.DuckDBPyConnection, run_id: str, steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """HBM bytes the hardware counters measured for the kernels the ``steps`` launched (AMD
    ``FETCH_SIZE`` + ``WRITE_SIZE``, KB, × 1024; reads alone when only FETCH_SIZE was collected),
    with the share of those kernels' device time the counted dispatches cover; None without
    such counters."""
    keys = [f"{int(r['rank'])}:{int(r['step'])}" for r in steps]
    got = con.execute(
        """WITH w AS (SELECT rank, host_start_ns AS ws, host_end_ns AS we FROM steps
                      WHERE run_id = ? AND rank || ':' || step IN (SELECT unnest(?::VARCHAR[]))),
                c AS (SELECT DISTINCT r.rank, r.correlation_id FROM runtime_calls_in_scope r
                      JOIN w ON w.rank = r.rank AND r.start_ns >= w.ws AND r.start_ns < w.we
                      WHERE r.run_id = ? AND r.correlation_id IS NOT NULL),
                k AS (SELECT k.rank, k.dispatch_id, coalesce(k.device_dur_ns, k.dur_ns) AS d
                      FROM kernels k JOIN c USING (rank, correlation_id)
                      WHERE k.run_id = ? AND k.category = 'kernel'),
                m AS (SELECT rank, dispatch_id, sum(value) FILTER (WHERE counter = 'FETCH_SIZE') AS f,
                             sum(value) FILTER (WHERE counter = 'WRITE_SIZE') AS wr
                      FROM counters WHERE run_id = ? AND counter IN ('FETCH_SIZE', 'WRITE_SIZE') GROUP BY ALL)
           SELECT sum(k.d), sum(k.d) FILTER (WHERE m.f IS NOT NULL), sum(coalesce(m.f, 0) + coalesce(m.wr, 0)) * 1024,
                  count(m.wr), count(m.f)
           FROM k LEFT JOIN m USING (rank, dispatch_id)""",
        [run_id, keys, run_id, run_id, run_id]).fetchall()
    total, counted, nbytes, n_write, n_fetch = got[0] if got else (None, None, None, 0, 0)
    if not total or not n_fetch:
        return None
    return {"bytes": float(nbytes or 0), "time_fraction": float(counted or 0) / float(total),
            "counters": "FETCH_SIZE + WRITE_SIZE" if n_write else "FETCH_SIZE (reads only)",
            "kernel_time_ns": int(total), "counted_time_ns": int(counted or 0)}


def kernel_formats(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, str]:
    """Number formats the kernel names state: ``kv_cache`` ``fp8`` when the attention kernels read
    an fp8 KV cache (vLLM ``Fp8KVCacheDataType)1``/``2``, TRT-LLM FMHA ``QkvE4m3``/``KvE4m3``);
    ``weights`` ``mxfp4`` (``mxfp4``, ``E2m1``) or ``fp8`` (``fp8``, hipBLASLt ``F8``) from GEMM names."""
    rows = con.execute("SELECT DISTINCT kernel_class, name FROM device_work WHERE run_id = ? AND category = 'kernel'",
                       [run_id]).fetchall()
    return formats_from_names(rows)


def formats_from_names(rows: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """:func:`kernel_formats` over given (kernel class, kernel name) pairs."""
    rows = list(rows)
    out: dict[str, str] = {}
    # vLLM templates: (vllm::Fp8KVCacheDataType)1, mangled Fp8KVCacheDataTypeE1; 0 is "auto"
    if any(re.search(r"Fp8KVCacheDataType(?:\)|E)\s*[12]|QkvE4m3|KvE4m3", str(n)) for _, n in rows):
        out["kv_cache"] = "fp8"
    gemms = [str(n) for c, n in rows if c in ("gemm", "moe") and _GEMM_NAME.search(str(n))]
    if any(re.search(r"(?i)mxfp4|E2m1", n) for n in gemms):
        out["weights"] = "mxfp4"
    elif any(re.search(r"(?i)fp8|_F8|F8HS|F8F8|e4m3", n) for n in gemms):
        out["weights"] = "fp8"
    return out


def class_breakdown(con: duckdb.DuckDBPyConnection, run_id: str, c: dict[str, Any], dec: PhaseCost,
                    peak_bps: float) -> list[dict[str, Any]]:
    """Decode kernel time per group, per decode step on average, with the bytes the model assigns
    it, ranked by the time lost against the HBM roof (time − bytes ÷ peak): ``moe gate/up`` and
    ``moe down`` (the routed experts touched, 2 : 1, when the MoE GEMM names tell the two apart;
    else ``moe``), ``gemm`` (the other weights: attention projections, dense MLP, shared experts,
    router, LM head; all weights when no kernel is of class moe), ``attention`` (KV cache read and
    written); the other classes (norms, elementwise, routing, copies) get their time only. Each row:
    ``group``, ``kernel_class``, ``time_ns``, ``share``, ``bytes``, ``flops``, ``bytes_per_s``,
    ``hbm_fraction``, ``time_lost_ns``."""
    keys = [f"{int(r['rank'])}:{int(r['step'])}" for r in dec.rows]
    rows = con.execute(
        """WITH w AS (SELECT rank, host_start_ns AS ws, host_end_ns AS we FROM steps
                      WHERE run_id = ? AND phase = 'decode' AND rank || ':' || step IN (SELECT unnest(?::VARCHAR[]))),
                c AS (SELECT DISTINCT r.rank, r.correlation_id FROM runtime_calls_in_scope r
                      JOIN w ON w.rank = r.rank AND r.start_ns >= w.ws AND r.start_ns < w.we
                      WHERE r.run_id = ? AND r.correlation_id IS NOT NULL)
           SELECT d.kernel_class, d.name, sum(d.dur_ns) FROM device_work d JOIN c USING (rank, correlation_id)
           WHERE d.run_id = ? AND d.category = 'kernel' GROUP BY ALL""",
        [run_id, keys, run_id, run_id]).fetchall()
    n = len(dec.rows)
    if not rows or not n:
        return []
    expert = sum(float(r["experts_touched"] or 0) for r in dec.rows) * float(c["expert_bytes"]) / n
    kv = sum(float(r["kv_read_bytes"] or 0) + float(r["kv_write_bytes"] or 0) for r in dec.rows) / n
    weights = sum(float(r["weight_bytes"]) for r in dec.rows) / n - expert
    attn_flops = sum(float(r["attention_flops"]) for r in dec.rows) / n
    gemm_flops = sum(float(r["flops"]) for r in dec.rows) / n - attn_flops
    has_moe = any(cls == "moe" and _GEMM_NAME.search(str(name)) for cls, name, _ in rows)
    gate_up = {str(nm) for cls, nm, _ in rows if cls == "moe" and _GEMM_NAME.search(str(nm)) and _MOE_GATE_UP.search(str(nm))}
    down = {str(nm) for cls, nm, _ in rows if cls == "moe" and _GEMM_NAME.search(str(nm))} - gate_up
    split = bool(gate_up and down)
    time: dict[tuple[str, str], float] = {}
    for cls, name, t in rows:
        cls, name = str(cls), str(name)
        group = cls
        if cls == "moe":
            group = ("moe gate/up" if name in gate_up else "moe down" if name in down else "moe routing") if split \
                else ("moe" if _GEMM_NAME.search(name) else "moe routing")
        time[(group, cls)] = time.get((group, cls), 0.0) + float(t or 0) / n
    e_flops = gemm_flops * (expert / (expert + weights)) if has_moe and expert + weights else 0.0
    model: dict[str, tuple[float, float]] = {  # group → (bytes, FLOPs) per step
        "gemm": (weights if has_moe else weights + expert, gemm_flops - e_flops),
        "attention": (kv, attn_flops),
    }
    if split:
        model["moe gate/up"] = (expert * 2 / 3, e_flops * 2 / 3)
        model["moe down"] = (expert / 3, e_flops / 3)
    elif has_moe:
        model["moe"] = (expert, e_flops)
    total = sum(time.values()) or 1.0
    out: list[dict[str, Any]] = []
    for (group, cls), t in time.items():
        b, f = model.get(group, (None, None))
        bps = b / (t / 1e9) if b and t else None
        lost = t - b / peak_bps * 1e9 if b is not None and t else None
        out.append({"group": group, "kernel_class": cls, "time_ns": t, "share": t / total, "bytes": b, "flops": f,
                    "bytes_per_s": bps, "hbm_fraction": bps / peak_bps if bps else None, "time_lost_ns": lost})
    out.sort(key=lambda d: -float(d["time_lost_ns"] if d["time_lost_ns"] is not None else d["time_ns"]))
    return out


def decode_parts(c: dict[str, Any], seqs: float, ctx_per_seq: float) -> dict[str, float]:
    """Bytes and FLOPs per rank of a decode step of ``seqs`` requests with ``ctx_per_seq`` context
    tokens each, by part: the decode case of the ``step_costs`` view (one new token per request).
    ``weight_bytes``, ``expert_bytes`` (the part of weight_bytes that is routed experts),
    ``kv_bytes`` (read + written), ``activation_bytes``, ``weight_flops``, ``attention_flops``."""
    e = float(c["num_experts"] or 0)
    touched = e * (1 - (1 - float(c["experts_per_token"] or 0) / e) ** seqs) if e else 0.0
    ctx = seqs * ctx_per_seq
    win = min(ctx, seqs * float(c["sliding_window"] or 0))
    kv_g, kv_w = float(c["kv_bytes_per_token_global"]), float(c["kv_bytes_per_token_window"])
    experts = touched * float(c["expert_bytes"])
    return {
        "weight_bytes": float(c["weight_bytes_fixed"]) + experts, "expert_bytes": experts,
        "kv_bytes": ctx * kv_g + win * kv_w + seqs * (kv_g + kv_w),
        "activation_bytes": seqs * float(c["activation_bytes_per_token"]),
        "weight_flops": seqs * (float(c["flops_per_token"]) + float(c["lm_head_flops_per_seq"])),
        "attention_flops": ctx * float(c["attn_flops_per_pair_global"]) + win * float(c["attn_flops_per_pair_window"]),
    }


def decode_cost(c: dict[str, Any], seqs: float, ctx_per_seq: float) -> tuple[float, float]:
    """(bytes, FLOPs) per rank of a decode step (:func:`decode_parts` summed)."""
    p = decode_parts(c, seqs, ctx_per_seq)
    return (p["weight_bytes"] + p["kv_bytes"] + p["activation_bytes"], p["weight_flops"] + p["attention_flops"])


def project_batching(c: dict[str, Any], dec: PhaseCost, spec: DeviceSpec,
                     classes: list[dict[str, Any]] | None = None,
                     gemm_flops_per_s: float | None = None) -> dict[str, Any] | None:
    """Step time, TPOT and throughput of the decode step at larger batches (module docstring).

    With the decode kernel time by group (:func:`class_breakdown`): t(B) = t_weights(B) +
    t_attention(B) + t_other(B) + the step's idle now, each GEMM or attention part the larger of its
    bytes ÷ the bandwidth that part achieves now and its FLOPs ÷ the FLOP ceiling; the other kernels
    (norms, elementwise, routing, copies) keep their time until the activations at the HBM roof
    take longer. Without it, one max over the whole step at the step's achieved bandwidth. The FLOP
    ceiling is ``gemm_flops_per_s`` (the best this run's GEMMs reached) when given, else
    :data:`ACHIEVABLE_FLOP_FRACTION` × the datasheet peak."""
    rs = [r for r in dec.rows if r["decode_seqs"] and r["context_tokens"] is not None]
    if not rs:
        return None
    seqs = sum(float(r["decode_seqs"]) for r in rs) / len(rs)
    ctx = sum(float(r["context_tokens"]) for r in rs) / sum(float(r["decode_seqs"]) for r in rs)
    busy = sum(int(r["busy_ns"]) for r in rs) / len(rs)
    nbytes_now = sum(float(r["bytes"]) for r in rs) / len(rs)
    bw = nbytes_now / (busy / 1e9)  # achieved now over the whole step, B/s
    idle = max(0.0, sum(int(r["step_time_ns"] or 0) - int(r["busy_ns"]) for r in rs) / len(rs) / 1e9)
    datasheet = spec.peak_tflops[RIDGE_DTYPE] * 1e12
    peak_f = gemm_flops_per_s if gemm_flops_per_s else ACHIEVABLE_FLOP_FRACTION * datasheet
    ceiling_source = (f"the best rate this run's GEMMs reached ({gemm_flops_per_s / 1e12:,.0f} TFLOP/s)"
                      if gemm_flops_per_s else f"{ACHIEVABLE_FLOP_FRACTION:.0%} of the datasheet peak "
                      f"({peak_f / 1e12:,.0f} TFLOP/s; no GEMM of this run has shapes to measure it)")
    peak_b = float(spec.hbm_gbps or 0) * 1e9
    ridge = datasheet / (peak_b or float("inf"))
    now_parts = decode_parts(c, seqs, ctx)
    by = {d["group"]: d for d in (classes or [])}
    w_t = sum(d["time_ns"] for d in by.values() if d["kernel_class"] in ("gemm", "moe") and d["bytes"]) / 1e9
    a_t = by["attention"]["time_ns"] / 1e9 if "attention" in by and by["attention"]["bytes"] else 0.0
    # everything else the device did in the step (norms, elementwise, routing, copies): its busy
    # time less the two costed parts, so that the projection at today's batch is today's step
    o_t = max(0.0, busy / 1e9 - w_t - a_t)
    per_group = bool(w_t and a_t)
    bw_w = now_parts["weight_bytes"] / w_t if per_group else bw
    bw_a = now_parts["kv_bytes"] / a_t if per_group else bw

    def times(b: float) -> tuple[float, float, float]:
        p = decode_parts(c, b, ctx)
        tw = max(p["weight_bytes"] / bw_w, p["weight_flops"] / peak_f)
        ta = max(p["kv_bytes"] / bw_a, p["attention_flops"] / peak_f)
        to = max(o_t, p["activation_bytes"] / peak_b) if peak_b else o_t
        return tw, ta, to

    def point(b: float) -> dict[str, Any]:
        nb, fl = decode_cost(c, b, ctx)
        p = decode_parts(c, b, ctx)
        if per_group:
            tw, ta, to = times(b)
            t = tw + ta + to + idle
            bound = "compute" if p["weight_flops"] / peak_f >= p["weight_bytes"] / bw_w else "memory"
        else:
            t = max(nb / bw, fl / peak_f) + idle
            bound = "compute" if fl / peak_f > nb / bw else "memory"
        return {"batch": round(b), "bytes": nb, "flops": fl, "arithmetic_intensity": fl / nb,
                "step_time_ms": t * 1e3, "tokens_per_s": b / t, "bound": bound,
                "kv_cache_bytes": b * kv_resident(c, ctx)}

    now = point(seqs)
    pts = [point(seqs * f) for f in PROJECTION_FACTORS]
    for pt in pts:
        pt["throughput_gain"] = pt["tokens_per_s"] / now["tokens_per_s"]
    # the weight GEMMs turn compute-bound where their FLOPs at peak outlast their bytes at the
    # bandwidth they achieve (both grow with B; the weights' bytes only through the experts)
    def gemm_compute_bound(b: float) -> bool:
        p = decode_parts(c, b, ctx)
        return p["weight_flops"] / peak_f >= p["weight_bytes"] / bw_w
    compute_bound_batch = None
    if gemm_compute_bound(1e6):
        lo, hi = 1.0, 1e6
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if gemm_compute_bound(mid) else (mid, hi)
        compute_bound_batch = round(hi)
    d1, d2 = decode_parts(c, 2 * seqs, ctx), now_parts
    extra_b = (d1["weight_bytes"] + d1["kv_bytes"] + d1["activation_bytes"]) - (
        d2["weight_bytes"] + d2["kv_bytes"] + d2["activation_bytes"])
    extra_f = (d1["weight_flops"] + d1["attention_flops"]) - (d2["weight_flops"] + d2["attention_flops"])
    hbm = float(spec.hbm_bytes) if spec.hbm_bytes else None
    kv_per_req = kv_resident(c, ctx)
    weights_total = (float(c["weight_bytes_fixed"]) + float(c["expert_bytes"]) * float(c["num_experts"] or 0)
                     + float(c.get("embedding_bytes") or 0))
    max_batch = (int((HBM_USABLE * hbm - weights_total) // kv_per_req) if hbm is not None and kv_per_req > 0
                 else None)
    return {
        "batch_now": seqs, "context_per_seq": ctx, "achieved_bytes_per_s": bw, "ridge_flop_per_byte": ridge,
        "time_model": "per group (weight GEMMs, attention, other kernels)" if per_group else "whole step",
        "weights_bytes_per_s": bw_w, "attention_bytes_per_s": bw_a, "other_kernels_ns": o_t * 1e9,
        "idle_ns": idle * 1e9, "flop_ceiling": peak_f, "flop_ceiling_source": ceiling_source,
        "now": now, "points": pts, "ai_limit": extra_f / extra_b if extra_b > 0 else None,
        "compute_bound_batch": compute_bound_batch,
        "max_batch_in_memory": max_batch, "hbm_bytes": hbm, "hbm_usable": HBM_USABLE,
        "weights_bytes": weights_total, "kv_bytes_per_seq": kv_per_req,
    }


def kv_resident(c: dict[str, Any], ctx: float) -> float:
    """KV-cache bytes one request of ``ctx`` tokens holds per rank: every token in the global layers,
    at most the window in the sliding-window layers."""
    return (ctx * float(c["kv_bytes_per_token_global"])
            + min(ctx, float(c["sliding_window"] or 0) or ctx) * float(c["kv_bytes_per_token_window"]))
