"""fusion: how much device time goes to short kernels and to chains of unfused elementwise / norm /
reduction kernels, and what an ideal fused kernel would save.

Inputs (views and library objects): ``device_work`` (device rows with their ``kernel_class``),
``run_window`` (each device's window; Σ ``window_ns`` is the severity denominator),
``chain_kernels(max_gap_ns)`` (``sql/fusion.sql``: the fusable kernels in stream order with their
chain id), ``ops`` and ``runtime_calls`` (the PyTorch op that launched each kernel, through the
launch's ``external_id``, with its ``input_dims``/``input_types``), ``devices`` (the device, identified
with :func:`tracekit.analysis.hardware.identify` for its HBM bandwidth), ``annotations`` (serving
engine step markers, for the advice).

Everything is counted over the rows inside each device's run window (``run_window``: the busiest
capture session, whole).

Short kernels: ``short_kernel_time_fraction`` = Σ ``dur_ns`` of the kernels shorter than
``SHORT_KERNEL_NS`` (10 µs) ÷ Σ ``dur_ns`` of all kernels, both over device rows of category
``kernel`` that are not of class ``communication`` or ``memcpy`` (a collective's duration is mostly
waiting for peers; copies are not kernels). This is the "kernels < 10 µs are x % of decode GPU
time" of TraceLens-style reviews, decode GPU time being the kernel time of the decode step (the
outer ``execute_…`` span): on the MI300X vLLM decode capture (one step, 425 kernels, every one
launched inside it) 15.47 %, on the SGLang Qwen3-8B decode capture (555 kernels launched inside
the ``execute_…`` step; 550 inside its inner ``step[DECODE bs=32]``, 19.81 %) 19.89 %.

Chains: consecutive fusable kernels of one stream (elementwise, norm or reduction; never
communication, memcpy, attention, GEMM or MoE; see ``chain_kernels``) with no other row between
them and no gap over ``CHAIN_MAX_GAP_NS`` (a longer gap is a sync, a step boundary or host-side
control flow, across which no compiler fuses), at least two of them. Per chain, the saving of one
ideal fused kernel:

* **shape model**, when the chain's kernels were launched one by one by PyTorch ops with recorded
  shapes and the device is identified: bytes of the ideal fused kernel = bytes read by the first
  member whose op has a cost + bytes written by the last such member (intermediate tensors stay in
  registers / on chip), each from :func:`tracekit.analysis.memory_bound_decode.elementwise_cost`
  (its total split into reads, the op's tensor arguments, and writes, the rest; ``out_first``
  custom ops write their first argument). Ideal time = max(bytes ÷ peak HBM bandwidth,
  ``KERNEL_FIXED_NS``); saving = max(0, Σ member time − ideal time). This is the ideal: the fused
  kernel at peak bandwidth, and a chain that carries several independent tensors (the q and k
  rotary embeddings one after the other) or writes an intermediate that is used later (the new
  residual of an add + RMSNorm) moves more than this, so it is an upper bound of the saving.
* **launch model** otherwise (graph replays, rocprof / RPD captures, ops without shapes): each
  kernel but the longest stops paying its fixed cost, saving = Σ min(dur, ``KERNEL_FIXED_NS``) −
  min(longest, ``KERNEL_FIXED_NS``) ≈ (n − 1) × 2 µs. An estimate, and a lower bound: the memory
  round-trips removed by fusing are not counted.

Chains are grouped by (first kernel, last kernel, number of kernels); the group with the largest
saving is the "top chain" named in the title. Metrics: ``short_kernel_time_fraction``,
``unfused_chain_time_fraction`` (Σ chain kernel time ÷ the same kernel time as above) and
``fusion_saving_fraction`` (Σ saving ÷ Σ ``run_window.window_ns``).

Unfused attention (second finding): attention computed as bmm → softmax → bmm writes and re-reads
the whole Sq×Sk score matrix; when softmax kernels take ≥ ``UNFUSED_SOFTMAX_MIN_FRACTION`` (10 %)
of device kernel time and more than the fused attention kernels, the finding says so, with the
softmax time as the (lower-bound) saving of SDPA / flash attention (OWLv2: 46 % of kernel time).

Thresholds (saving ÷ Σ window_ns, :func:`~tracekit.analysis.base.run_share_severity`): ≥ 20 %
critical, ≥ 5 % warning, ≥ 1 % info, below, or a total
saving under ``MIN_SAVING_NS`` (50 µs: a capture of a few kernels), no finding. A run without
device kernels gets NULL metrics and no finding. The fractions are per-step figures too (every
steady step has the same mix); the evidence gives absolute times over the window.

Advice fits the kernels: a serving engine (vLLM / SGLang markers or kernels) → its fused ops and
compile pass; Inductor / Triton kernels → a graph break or a declined fusion; eager PyTorch →
torch.compile or fused ops. A run that replays CUDA/HIP graphs is told that graphs remove the
host's launch cost, not the kernels' fixed device cost nor their memory round-trips.

Units: ns for times, bytes, GB/s = 10⁹ B/s = bytes per ns for bandwidth, fractions 0..1.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import duckdb

from tracekit.analysis import fastpath
from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding, Metric, run_share_severity
from tracekit.analysis.hardware import DeviceSpec, run_device
from tracekit.analysis.memory_bound_decode import DTYPE_BYTES, ELEMENTWISE_OPS, elementwise_cost
from tracekit.formatting import duration_ns
from tracekit.names import ellipsize, mangled_identifier, torch_functor

SHORT_KERNEL_NS = 10_000  # ns: a kernel shorter than this is "short"
CHAIN_MAX_GAP_NS = 100_000  # ns: a longer gap between two kernels of a stream ends a chain
KERNEL_FIXED_NS = 2_000  # ns: fixed cost of one kernel on the device (launch, ramp-up, tail)
# severity: base.run_share_severity of the saving ÷ Σ window_ns (1 % info, 5 % warning, 20 % critical)
UNFUSED_SOFTMAX_MIN_FRACTION = 0.10  # softmax kernels ÷ device kernel time for the unfused-attention finding
MIN_SAVING_NS = 50_000  # ns: a smaller total saving is no finding whatever its share (a capture of a few kernels)
TOP_CHAINS = 5  # chain groups kept in the evidence


@dataclass(frozen=True)
class _ChainTotals:
    """The run's fusable chains in total, for the finding's detail (times in ns)."""

    n_chains: int
    n_kernels: int  # kernels inside the chains
    time_ns: int  # device time of those kernels
    saving_ns: int  # estimated saving of fusing each chain
    n_shape: int  # chains costed from op shapes (the others from launch overhead)
    window_ns: int  # the device window
    kernel_ns: int  # all device kernel time
    short_ns: int  # time of kernels under SHORT_KERNEL_NS
    graph_calls: int  # CUDA/HIP graph launches in the run
    engine: int  # kernels of a serving engine's fused-op library


@dataclass
class ChainGroup:
    """Chains with the same first kernel, last kernel and length, with their totals."""

    first_name: str
    last_name: str
    n_kernels: int
    n_chains: int
    n_shape_model: int
    time_ns: int
    saving_ns: int
    fused_bytes: float | None
    names: list[str]
    ops: list[str | None]


def short_name(name: str, n: int = 32) -> str:
    """A kernel name shortened to what it computes: the functor or kernel of a PyTorch
    elementwise / reduce template, lower-cased (``pow_tensor_scalar``, ``add``, ``mean``), the kernel of a
    namespaced or mangled name (``fused_add_rms_norm``, ``add_rmsnorm_quant``, ``Rmsnorm2dFwd``), else
    the name itself, cut at ``n`` characters."""
    s = name.strip()
    if s.startswith("_Z"):
        picked = mangled_identifier(s)
        return ellipsize(_strip_kernel(picked), n)
    s = re.sub(r"^std::enable_if<.*?>::type\s+", "", s)
    s = re.sub(r"^void\s+", "", s).replace("(anonymous namespace)::", "")
    head = re.split(r"[<(]", s, maxsplit=1)[0].strip()
    base = head.split("::")[-1] or head
    if re.search(r"elementwise_kernel|reduce_kernel|^unrolled_|^launch_", base):
        functor = torch_functor(s[len(head):])
        if functor:
            return ellipsize(functor.lower(), n)
    return ellipsize(_strip_kernel(base), n)


def _strip_kernel(x: str) -> str:
    return re.sub(r"_kernel$", "", x) or x


def op_bytes(op: str, dims: list[Any], types: list[Any]) -> tuple[float, float] | None:
    """(bytes read, bytes written) of one elementwise / norm op: the total of
    :func:`~tracekit.analysis.memory_bound_decode.elementwise_cost` split into its tensor arguments
    (read; for ``out_first`` ops all but the first, the output buffer) and the rest (written)."""
    cost = elementwise_cost(op, dims, types)
    if cost is None:
        return None
    args = [math.prod(d) * DTYPE_BYTES[str(types[i])] for i, d in enumerate(dims)
            if isinstance(d, list) and d and all(isinstance(x, int) for x in d)
            and i < len(types) and str(types[i]) in DTYPE_BYTES]
    total = cost[1]
    if ELEMENTWISE_OPS[op][1] == "out_first":
        written = float(args[0]) if args else 0.0
        return total - written, written
    read = float(sum(args))
    return read, total - read


class Fusion(Analyzer, name="fusion"):
    summary = "short kernels and chains of unfused elementwise/norm kernels; saving of fusing each chain"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        win = con.execute(
            "SELECT rank, device, window_start_ns, window_end_ns, window_ns FROM run_window WHERE run_id = ?",
            [run_id]).fetchall()
        window_ns = sum(int(w[4] or 0) for w in win)
        p: dict[str, Any] = {
            "run": run_id, "ranks": [int(w[0]) for w in win], "devs": [w[1] for w in win],
            "ws": [int(w[2]) for w in win], "we": [int(w[3]) for w in win],
        }
        n_kernels, kernel_ns, n_short, short_ns = (int(x) for x in con.execute(
            f"""WITH {_WIN}
                SELECT count(*), coalesce(sum(d.dur_ns), 0),
                       count(*) FILTER (WHERE d.dur_ns < {SHORT_KERNEL_NS}),
                       coalesce(sum(d.dur_ns) FILTER (WHERE d.dur_ns < {SHORT_KERNEL_NS}), 0)
                FROM device_work d JOIN win ON win.rank = d.rank AND win.device IS NOT DISTINCT FROM d.device
                 AND d.start_ns BETWEEN win.ws AND win.we
                WHERE d.run_id = $run AND d.category = 'kernel'
                  AND d.kernel_class NOT IN ('communication', 'memcpy')""", p).fetchall()[0])
        if not n_kernels or not kernel_ns or not window_ns:
            return AnalyzerResult(metrics=[
                Metric("short_kernel_time_fraction", None, "fraction", "lower"),
                Metric("unfused_chain_time_fraction", None, "fraction", "lower"),
                Metric("fusion_saving_fraction", None, "fraction", "lower"),
            ])
        spec = self._device(con, run_id)
        p["bw"] = spec.hbm_gbps if spec and spec.hbm_gbps else None  # GB/s = bytes per ns
        costs = self._op_costs(con, run_id) if p["bw"] else []
        for key, i in (("cop", 0), ("cdims", 1), ("ctypes", 2), ("crd", 3), ("cwr", 4)):
            p[key] = [c[i] for c in costs]
        # = chain_kernels(CHAIN_MAX_GAP_NS), chains of one kernel left out
        chains = fastpath.chain_kernels(con, run_id, CHAIN_MAX_GAP_NS, min_kernels=2)
        rows = con.execute(_CHAINS_SQL.replace("__CHAINS__", chains), p).fetchall()
        tot_chains, tot_kernels, tot_t, tot_saving, tot_shape = (round(x or 0) for x in rows[0][:5])
        saving_fraction = float(rows[0][3] or 0) / window_ns
        names = dict(con.execute(
            "SELECT DISTINCT hash(name), name FROM kernels WHERE run_id = ? AND category = 'kernel'",
            [run_id]).fetchall()) if len(rows) > 1 or rows[0][5] is not None else {}
        groups = [
            ChainGroup(names.get(r[6], "?"), names.get(r[7], "?"), int(r[8]), int(r[9]), int(r[10]), int(r[11]),
                       round(r[12]), float(r[13]) if r[13] is not None else None,
                       [names.get(h, "?") for h in r[14] or []], [])
            for r in rows if r[5] is not None
        ]
        self._op_names(con, run_id, groups, [list(r[15] or []) for r in rows if r[5] is not None])
        graph_calls, engine = con.execute(
            """SELECT (SELECT count(*) FROM runtime_calls_in_scope WHERE run_id = $run AND api_kind = 'graph_launch'),
                      (SELECT count(*) FROM annotations WHERE run_id = $run
                        AND (starts_with(name, 'execute_') OR name LIKE 'step[%' OR name = 'execute_model'))""",
            {"run": run_id}).fetchall()[0]

        res = AnalyzerResult(metrics=[
            Metric("short_kernel_time_fraction", short_ns / kernel_ns, "fraction", "lower"),
            Metric("unfused_chain_time_fraction", tot_t / kernel_ns, "fraction", "lower"),
            Metric("fusion_saving_fraction", saving_fraction, "fraction", "lower"),
        ])
        self._unfused_attention(con, run_id, window_ns, kernel_ns, res)
        severity = run_share_severity(saving_fraction)
        if severity is None or tot_saving < MIN_SAVING_NS or not groups:
            return res
        top = groups[0]
        evidence: dict[str, Any] = {
            "window_ns": window_ns,
            "kernel_time_ns": kernel_ns, "kernels": n_kernels,
            "short_kernel_ns": SHORT_KERNEL_NS, "short_kernel_time_ns": short_ns, "short_kernels": n_short,
            "chains": tot_chains, "chain_kernels": tot_kernels, "chain_time_ns": tot_t,
            "chains_shape_model": tot_shape, "chains_launch_model": tot_chains - tot_shape,
            "saving_ns": tot_saving,
            "device": spec.name if spec else None, "hbm_gbps": p["bw"],
            "constants": {"chain_max_gap_ns": CHAIN_MAX_GAP_NS, "kernel_fixed_ns": KERNEL_FIXED_NS},
            "graph_launch_calls": int(graph_calls),
            "top_chains": [
                {"kernels": [short_name(n, 60) for n in g.names], "ops": g.ops, "first_kernel": g.first_name,
                 "last_kernel": g.last_name, "n_kernels": g.n_kernels, "chains": g.n_chains,
                 "chains_shape_model": g.n_shape_model, "time_ns": g.time_ns, "saving_ns": g.saving_ns,
                 "fused_bytes": g.fused_bytes, "saving_fraction": g.saving_ns / window_ns}
                for g in groups
            ],
            "recompute": (f"SELECT * FROM kernel_chains({CHAIN_MAX_GAP_NS}) WHERE run_id = '{run_id}' "
                          "ORDER BY time_ns DESC"),
        }
        title = (f"unfused elementwise/norm kernel chains: fusing would save ≈{_ms(tot_saving)} "
                 f"({saving_fraction:.1%} of the device window); top {_chain_text(top)} ×{top.n_chains} "
                 f"({top.saving_ns / window_ns:.1%})")
        detail = self._detail(top, groups, _ChainTotals(
            n_chains=tot_chains, n_kernels=tot_kernels, time_ns=tot_t, saving_ns=tot_saving, n_shape=tot_shape,
            window_ns=window_ns, kernel_ns=kernel_ns, short_ns=short_ns, graph_calls=int(graph_calls),
            engine=int(engine)), spec)
        res.findings.append(Finding(severity=severity, title=title, detail=detail, evidence=evidence,
                                    saving_ns=tot_saving, saving_fraction=saving_fraction))
        return res

    @staticmethod
    def _unfused_attention(con: duckdb.DuckDBPyConnection, run_id: str, window_ns: int, kernel_ns: int,
                           res: AnalyzerResult) -> None:
        """Attention computed as bmm → softmax → bmm: the softmax kernels read and write the whole
        Sq×Sk score matrix in HBM, which a fused (flash / SDPA) kernel never materializes. Reported
        when softmax kernels take ≥ ``UNFUSED_SOFTMAX_MIN_FRACTION`` of device kernel time and more
        than the run's fused attention kernels; saving ≈ the softmax time (the score matrix's round
        trips; the two GEMMs around it would also shrink: a lower bound on the gain)."""
        row = con.execute(
            """SELECT coalesce(sum(dur_ns) FILTER (WHERE regexp_matches(lower(name), 'softmax')), 0),
                      count(*) FILTER (WHERE regexp_matches(lower(name), 'softmax')),
                      coalesce(sum(dur_ns) FILTER (WHERE kernel_class = 'attention'), 0),
                      arg_max(name, {'t': dur_ns, 'n': name}) FILTER (WHERE regexp_matches(lower(name), 'softmax'))
               FROM (SELECT name, any_value(kernel_class) AS kernel_class, sum(dur_ns) AS dur_ns, count(*) AS n
                     FROM device_work WHERE run_id = ? AND category = 'kernel' GROUP BY name)""",
            [run_id]).fetchall()[0]
        softmax_ns, n_names, attention_ns, top = int(row[0]), int(row[1]), int(row[2]), row[3]
        bmm = con.execute("SELECT count(*) FROM ops WHERE run_id = ? AND name IN ('aten::bmm', 'aten::baddbmm', "
                          "'aten::matmul')", [run_id]).fetchall()[0][0]
        share = softmax_ns / kernel_ns if kernel_ns else 0.0
        sev = run_share_severity(softmax_ns / window_ns if window_ns else None)
        if share < UNFUSED_SOFTMAX_MIN_FRACTION or softmax_ns <= attention_ns or sev is None:
            return
        res.findings.append(Finding(
            severity=sev,
            title=(f"unfused attention: softmax kernels take {share:.0%} of device kernel time "
                   f"({_ms(softmax_ns)}, {softmax_ns / window_ns:.0%} of the device window)"),
            detail=(f"Attention runs as batched GEMMs around a standalone softmax ({short_name(str(top), 60)}; "
                    f"{int(bmm)} bmm/matmul ops in the trace), so every layer writes and re-reads the full "
                    "query×key score matrix in HBM. A fused attention kernel (torch.nn.functional."
                    "scaled_dot_product_attention with the flash or memory-efficient backend, "
                    "attn_implementation='sdpa' or 'flash_attention_2' in Hugging Face models) never "
                    f"materializes it: ≈{_ms(softmax_ns)} of softmax time would go (the GEMMs around it shrink "
                    "too, so this is a lower bound)."),
            evidence={"softmax_time_ns": softmax_ns, "softmax_kernel_names": n_names,
                      "fused_attention_time_ns": attention_ns, "kernel_time_ns": kernel_ns, "window_ns": window_ns,
                      "bmm_ops": int(bmm),
                      "recompute": (f"SELECT name, sum(dur_ns) FROM device_work WHERE run_id = '{run_id}' "
                                    "AND regexp_matches(lower(name), 'softmax') GROUP BY name")},
            saving_ns=softmax_ns,
            saving_fraction=softmax_ns / window_ns,
        ))

    @staticmethod
    def _detail(top: ChainGroup, groups: list[ChainGroup], f: _ChainTotals, spec: DeviceSpec | None) -> str:
        parts = [
            (f"{f.n_chains} chains of 2+ elementwise/norm/reduction kernels ({f.n_kernels} kernels, "
             f"{_ms(f.time_ns)}, {f.time_ns / f.kernel_ns:.0%} of kernel time) run one after another on a stream "
             f"with nothing else between them; each round-trips its intermediate tensors through HBM and pays "
             f"a kernel's fixed cost. Fusing each chain into one kernel would save ≈{_ms(f.saving_ns)} "
             f"({f.saving_ns / f.window_ns:.1%} of the {_ms(f.window_ns)} device window)."),
            (f"Top: {_chain_text(top, 8)} ({top.n_kernels} kernels) ×{top.n_chains}: {_ms(top.time_ns)}, "
             f"saving ≈{_ms(top.saving_ns)}"
             + (f"; ops {' → '.join(o or '?' for o in top.ops[:8])}" if any(top.ops) else "") + "."),
            (f"Model: {f.n_shape} of {f.n_chains} chains costed from op shapes (ideal fused kernel reads the first "
             f"op's inputs and writes the last op's output at {spec.hbm_gbps:g} GB/s, {spec.name}: an upper "
             f"bound), the others from launch overhead only ((n−1) × {KERNEL_FIXED_NS / 1e3:g} µs, an "
             f"estimate and a lower bound)." if f.n_shape and spec and spec.hbm_gbps else
             f"Model: {'no op with recorded shapes' if spec and spec.hbm_gbps else 'device bandwidth unknown'} "
             f"for these kernels (graph replay, rocprof, or ops without a cost), so the saving is estimated "
             f"from launch overhead only: (n−1) × {KERNEL_FIXED_NS / 1e3:g} µs per chain (an estimate; the "
             f"memory round-trips fusion also removes are not counted)."),
            f"Kernels under {SHORT_KERNEL_NS / 1e3:g} µs take {f.short_ns / f.kernel_ns:.1%} of kernel time.",
        ]
        names = " ".join(top.names + [o or "" for o in top.ops]).lower()
        compiled = any(n.startswith(("triton_", "fused_")) for n in top.names)
        if f.engine or re.search(r"vllm|sglang|sgl_kernel|aiter|ck_tile", names):
            parts.append("Use the serving engine's fused ops (vLLM/SGLang fused_add_rms_norm, silu_and_mul, "
                         "fused rotary embedding, fused MoE routing) and keep its torch.compile pass on (vLLM "
                         "custom ops / compilation config), so that such a chain becomes one kernel.")
        elif compiled:
            parts.append("Some of these are already compiled (Inductor/Triton) kernels: a chain of them means a "
                         "graph break or a fusion Inductor declined (mutation, reduction boundary); check "
                         "TORCH_LOGS=graph_breaks,fusion.")
        else:
            parts.append("torch.compile (Inductor) fuses chains of pointwise and reduction ops like this into one "
                         "Triton kernel; or call fused ops (F.rms_norm / a fused RMSNorm, fused add+norm, "
                         "SiLU-and-mul).")
        if f.graph_calls:
            parts.append(f"The run already replays CUDA/HIP graphs ({f.graph_calls} launches): graphs remove the "
                         "host's launch cost, not each kernel's fixed device cost or its memory round-trips — "
                         "only fusion does.")
        if len(groups) > 1:
            parts.append("Next: " + "; ".join(
                f"{_chain_text(g)} ×{g.n_chains} ≈{_ms(g.saving_ns)}" for g in groups[1:4]) + ".")
        return " ".join(parts)

    @staticmethod
    def _op_names(con: duckdb.DuckDBPyConnection, run_id: str, groups: list[ChainGroup],
                  corrs: list[list[Any]]) -> None:
        """Fill each group's ``ops``: the PyTorch op that launched each kernel of its example chain."""
        wanted = sorted({int(c) for cs in corrs for c in cs if c is not None})
        found: dict[int, str] = {}
        if wanted:  # two narrow lookups (a few dozen ids), not a join of the run's calls with its ops
            calls = con.execute(
                """SELECT rank, correlation_id, external_id FROM runtime_calls
                   WHERE run_id = ? AND correlation_id IN (SELECT unnest(?::BIGINT[])) AND external_id IS NOT NULL""",
                [run_id, wanted]).fetchall()
            ops = {(int(r), int(e)): str(n) for r, e, n in con.execute(
                """SELECT rank, external_id, any_value(name) FROM ops
                   WHERE run_id = ? AND external_id IN (SELECT unnest(?::BIGINT[])) GROUP BY ALL""",
                [run_id, sorted({int(e) for _, _, e in calls})]).fetchall()} if calls else {}
            found = {int(c): ops[(int(r), int(e))] for r, c, e in calls if (int(r), int(e)) in ops}
        for g, cs in zip(groups, corrs, strict=True):
            g.ops = [found.get(int(c)) if c is not None else None for c in cs]

    @staticmethod
    def _op_costs(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str, str, float, float]]:
        """(op, input_dims, input_types, bytes read, bytes written) of every distinct elementwise /
        norm op of the run that :func:`op_bytes` can cost."""
        out = []
        for op, dims, types in con.execute(
            """SELECT DISTINCT name, input_dims, input_types FROM ops
               WHERE run_id = ? AND name IN ? AND input_dims IS NOT NULL""",
            [run_id, list(ELEMENTWISE_OPS)]).fetchall():
            try:
                rw = op_bytes(str(op), json.loads(dims), json.loads(types or "[]"))
            except (ValueError, TypeError):
                rw = None
            if rw is not None:
                out.append((str(op), str(dims), str(types), rw[0], rw[1]))
        return out

    @staticmethod
    def _device(con: duckdb.DuckDBPyConnection, run_id: str) -> DeviceSpec | None:
        """The spec of the run's busiest device (most device rows), or None."""
        return run_device(con, run_id)[1]


def _chain_text(g: ChainGroup, most: int = 4) -> str:
    """``a → b → … → z``: the example chain's kernels, shortened, at most ``most`` of them."""
    names = [short_name(n, 24) for n in g.names] or [short_name(g.first_name, 24), short_name(g.last_name, 24)]
    if len(names) > most:
        names = names[: most - 1] + ["…", names[-1]]
    return " → ".join(names)


def _ms(ns: float) -> str:
    return duration_ns(ns)


# Device windows of the run, passed in as lists ($ranks, $devs, $ws, $we): run_window is computed once.
_WIN = ("win AS (SELECT unnest($ranks::INTEGER[]) AS rank, unnest($devs::INTEGER[]) AS device, "
        "unnest($ws::BIGINT[]) AS ws, unnest($we::BIGINT[]) AS we)")

# The chains of the run's windows with their saving, grouped by (first, last, length): totals
# (first five columns, on every row) and the TOP_CHAINS groups by saving with the kernels of
# their largest chain. Costs ($cop, $cdims, $ctypes → $crd, $cwr bytes) come from op_bytes, once
# per distinct op and shape; a kernel gets its op's cost through its launching call.
_CHAINS_SQL = f"""
WITH {_WIN},
costs AS (SELECT unnest($cop::VARCHAR[]) AS op_name, unnest($cdims::VARCHAR[]) AS input_dims,
                 unnest($ctypes::VARCHAR[]) AS input_types, unnest($crd::DOUBLE[]) AS rd,
                 unnest($cwr::DOUBLE[]) AS wr),
costed_calls AS (
  SELECT r.rank, r.correlation_id, any_value(c.rd) AS rd, any_value(c.wr) AS wr
  FROM ops o
  JOIN costs c ON c.op_name = o.name AND c.input_dims = o.input_dims
              AND c.input_types IS NOT DISTINCT FROM o.input_types
  JOIN runtime_calls_in_scope r ON r.run_id = o.run_id AND r.rank = o.rank AND r.external_id = o.external_id
  WHERE o.run_id = $run AND r.run_id = $run AND r.correlation_id IS NOT NULL
  GROUP BY ALL),
m AS MATERIALIZED (
  SELECT k.rank, k.device, k.stream, k.chain, k.name_hash, k.start_ns, k.dur_ns, k.correlation_id, cc.rd, cc.wr
  FROM __CHAINS__ k
  JOIN win ON win.rank = k.rank AND win.device IS NOT DISTINCT FROM k.device
   AND k.start_ns BETWEEN win.ws AND win.we
  LEFT JOIN costed_calls cc ON cc.rank = k.rank AND cc.correlation_id = k.correlation_id
  WHERE k.run_id = $run),
ch AS (
  SELECT rank, device, stream, chain, count(*) AS n, sum(dur_ns) AS t, max(dur_ns) AS longest,
         arg_min(name_hash, start_ns) AS first_name, arg_max(name_hash, start_ns) AS last_name,
         arg_min(rd, start_ns) FILTER (WHERE rd IS NOT NULL) AS rd_first,
         arg_max(wr, start_ns) FILTER (WHERE wr IS NOT NULL) AS wr_last,
         sum(least(dur_ns, {KERNEL_FIXED_NS})) AS fixed_sum
  FROM m GROUP BY ALL HAVING count(*) >= 2),
sv AS (
  SELECT *, CASE WHEN $bw::DOUBLE IS NOT NULL THEN rd_first + wr_last END AS fused_bytes,
         CASE WHEN rd_first IS NOT NULL AND $bw::DOUBLE IS NOT NULL
              THEN greatest(t - greatest((rd_first + wr_last) / $bw::DOUBLE, {KERNEL_FIXED_NS}), 0)
              ELSE fixed_sum - least(longest, {KERNEL_FIXED_NS}) END AS saving
  FROM ch),
grp AS (
  SELECT first_name, last_name, n, count(*) AS n_chains, count(fused_bytes) AS n_shape, sum(t) AS t,
         sum(saving) AS saving, sum(fused_bytes) AS fused_bytes,
         -- the chain that saves most; on a tie the first by rank, device, stream, chain
         arg_min({{'rank': rank, 'device': device, 'stream': stream, 'chain': chain}},
                 {{'s': -saving, 'r': rank, 'd': device, 'st': stream, 'c': chain}}) AS rep
  FROM sv GROUP BY ALL),
tot AS (
  SELECT count(*) AS n_chains, coalesce(sum(n), 0) AS n_kernels, coalesce(sum(t), 0) AS t,
         coalesce(sum(saving), 0) AS saving, count(fused_bytes) AS n_shape
  FROM sv),
top AS (
  SELECT *, row_number() OVER (ORDER BY saving DESC, t DESC, n, first_name, last_name) AS pos
  FROM grp QUALIFY pos <= {TOP_CHAINS}),
rep AS (
  SELECT top.pos, list(m.name_hash ORDER BY m.start_ns) AS names,
         list(m.correlation_id ORDER BY m.start_ns) AS corrs
  FROM top JOIN m
    ON m.rank = struct_extract(top.rep, 'rank') AND m.device IS NOT DISTINCT FROM struct_extract(top.rep, 'device')
   AND m.stream IS NOT DISTINCT FROM struct_extract(top.rep, 'stream') AND m.chain = struct_extract(top.rep, 'chain')
  GROUP BY top.pos)
SELECT tot.n_chains, tot.n_kernels, tot.t, tot.saving, tot.n_shape,
       top.pos, top.first_name, top.last_name, top.n, top.n_chains, top.n_shape, top.t, top.saving,
       top.fused_bytes, rep.names, rep.corrs
FROM tot LEFT JOIN top ON true LEFT JOIN rep ON rep.pos = top.pos
ORDER BY top.pos
"""
