"""launch_idle: is the device kept busy, and when it idles, is it waiting for the host?

Inputs (views): ``kernels`` (all device activity: kernels, memcpy, memset), ``launches`` (the
runtime call that launched each device row, with its ``api_kind``), ``graph_launches`` (graph
replays), ``annotations`` (step markers).

Math, per (rank, device), all in DuckDB SQL:

* **steady window** ``W = [lo, hi]``: the device rows are trimmed by count at both ends,
  ``k = max(1, ⌊TRIM_FRACTION · n⌋)`` rows (none when ``n < MIN_ROWS_TO_TRIM``): ``lo`` = the start
  of the (k+1)-th row by start time, ``hi`` = the end of the (k+1)-th row from the end by end time.
  One stray row far before or after the workload (a kernel left over from warm-up, a late
  ``cudaMemcpy``) therefore cannot stretch the window: without the trim a 10 ms decode step
  behind a stray kernel 0.46 s earlier reads as 2 % busy instead of 93 %.
* **busy** = the union of all device rows' intervals, clipped to ``W``, over every stream (HIP
  stream 0 and RPD's ``0x0`` are ordinary streams); ``device_busy_fraction = busy / |W|``.
* **idle** = ``|W| − busy``, the gaps between the union's islands. Each gap is classified by the
  device row that ends it (HTA's idle-time categories, applied to the device-wide union rather
  than per stream, so that the categories add up to the device's idle time):

  - ``host_wait``: the row's launching call had not been submitted when the device went idle,
    i.e. submit > gap start, with submit = ``api_start_ns + api_dur_ns`` (the end of the launch
    call) for direct launches, and ``api_start_ns`` for the **first** row of a graph replay;
    rows 2…n of one graph replay are never host waits (the graph had already been submitted);
  - ``between_kernels``: otherwise, a gap shorter than ``KERNEL_WAIT_NS`` (HTA's 30 µs);
  - ``other``: the rest (long gaps with work already queued: dependencies, syncs, or device
    rows without a launching call, e.g. TPU ops).

  ``idle_*_fraction`` are shares of ``|W|``, so ``busy + host_wait + between + other = 1``.
* **steps**: host step annotations, the first family present of ``ProfilerStep#N`` /
  XPlane steps, SGLang ``step[…]``, vLLM ``execute_model``, TraceLens' vLLM
  ``execute_…context_…generation_…``. A device row belongs to the step whose annotation contains
  the start of its launching call (graph replays included). Per step: kernels (category
  ``kernel``), device time = the span of its rows clipped to ``W``, busy fraction = union busy in
  that span ÷ span. Metrics are medians over steps.
* **launch-bound / graph opportunity**: individually launched kernels (``api_kind =
  'kernel_launch'``) whose median duration is below the median duration of their launch calls,
  with ≥ ``MIN_KERNELS_PER_STEP`` of them per step (per run when there are no steps). Estimated
  saving of capturing them in a graph (or fusing into a megakernel) = host-wait idle + the
  launch overhead still visible on the device: Σ over between-kernel gaps that end at an
  individually launched kernel of ``max(0, gap − GRAPH_RESIDUAL_GAP_NS)``.

Thresholds: the graph finding is ``info`` below ``SAVING_WARNING_FRACTION`` of ``W``, ``warning``
from it, ``critical`` from ``SAVING_CRITICAL_FRACTION``. Without that pattern, host-wait idle of
≥ ``HOST_WAIT_WARNING_FRACTION`` of ``W`` is a ``warning`` (the host is late between launches or
graph replays; saving = the host-wait time). Runs that replay ≥ ``GRAPH_MAJORITY`` of their
kernels from graphs otherwise get an ``info`` finding saying so (and every finding's detail
mentions existing graph launches). A run without device activity gets no finding and NULL metrics.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracekit.analysis.base import Analyzer, AnalyzerResult, Better, Finding, Metric, Severity

TRIM_FRACTION = 0.01  # share of device rows trimmed at each end of the steady window
MIN_ROWS_TO_TRIM = 10  # rows per (rank, device) below which nothing is trimmed
KERNEL_WAIT_NS = 30_000  # ns: a shorter gap with work queued is a between-kernels gap (HTA)
GRAPH_RESIDUAL_GAP_NS = 1_000  # ns per kernel a graph replay still leaves between kernels
MIN_KERNELS_PER_STEP = 50  # individually launched kernels per step that make a run launch-bound
SAVING_WARNING_FRACTION = 0.05  # fraction of the steady window
SAVING_CRITICAL_FRACTION = 0.20  # fraction of the steady window
HOST_WAIT_WARNING_FRACTION = 0.10  # fraction of the steady window
GRAPH_MAJORITY = 0.5  # share of kernels replayed from graphs for the "graphs already used" note

# Step-annotation families, first present wins (host annotations only).
_STEP_FAMILY = r"""CASE
    WHEN is_profiler_step THEN 1
    WHEN regexp_matches(name, '^step\[') THEN 2
    WHEN name = 'execute_model' THEN 3
    WHEN regexp_matches(name, '^execute_.*context_.*generation_') THEN 4
  END"""

# Device rows with their launching call, the steady window, and the busy islands inside it.
# Written for 1M-row runs (benchmarks/bench_analyze.py, docs/performance.md): the first kernel of a
# launching call comes from the call aggregate (no window over all rows); the trimmed window bounds
# from a top-N aggregate ({n_top} = the largest k + 1 of any device, filled in per run); and the
# islands from ONE sort of the clipped rows: a row starts an island when it starts after every row
# before it has ended. An island's launching call is that of its earliest row with one (the first
# such row at or after the island's first row, if it comes before the next island's first row).
_BASE = f"""
WITH calls AS (
  SELECT rank, correlation_id, any_value(api_kind) AS api_kind,
         min(api_start_ns) AS api_start_ns, max(api_start_ns + api_dur_ns) AS api_end_ns,
         min(start_ns) AS first_start_ns
  FROM launches WHERE run_id = $run GROUP BY ALL),
act AS (
  SELECT k.rank, k.device, k.stream, k.category, k.correlation_id, k.start_ns,
         k.start_ns + greatest(k.dur_ns, 0) AS end_ns, c.api_kind, c.api_start_ns,
         c.api_kind = 'graph_launch' AND k.start_ns > c.first_start_ns AS graph_inner,
         CASE WHEN c.api_kind = 'graph_launch' THEN c.api_start_ns ELSE c.api_end_ns END AS submit_ns
  FROM kernels k LEFT JOIN calls c
    ON c.rank = k.rank AND c.correlation_id = k.correlation_id
  WHERE k.run_id = $run),
tops AS (
  SELECT rank, device, count(*) AS n, min(start_ns, {{n_top}}) AS first_starts,
         max(end_ns, {{n_top}}) AS last_ends
  FROM act GROUP BY ALL),
bounds AS (
  SELECT rank, device, n, k, first_starts[k + 1] AS lo, last_ends[k + 1] AS hi
  FROM (SELECT *, CASE WHEN n >= {MIN_ROWS_TO_TRIM}
                       THEN greatest(1, floor(n * {TRIM_FRACTION}))::BIGINT ELSE 0 END AS k FROM tops)),
clipped AS (
  SELECT a.*, greatest(a.start_ns, b.lo) AS s, least(a.end_ns, b.hi) AS e
  FROM act a JOIN bounds b USING (rank, device)
  WHERE least(a.end_ns, b.hi) > greatest(a.start_ns, b.lo)),
starts AS (
  SELECT rank, device, s, graph_inner,
         max(e) OVER w_before AS prev_max, max(e) OVER w_all AS max_e,
         first_value(CASE WHEN submit_ns IS NOT NULL THEN s END IGNORE NULLS) OVER w_after AS call_s,
         first_value(submit_ns IGNORE NULLS) OVER w_after AS call_submit_ns,
         first_value(api_kind IGNORE NULLS) OVER w_after AS call_api_kind
  FROM clipped
  WINDOW w_before AS (PARTITION BY rank, device ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
         w_after AS (PARTITION BY rank, device ORDER BY s, e ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING),
         w_all AS (PARTITION BY rank, device ORDER BY s, e
                   ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
  QUALIFY prev_max IS NULL OR s > prev_max),
islands AS (
  SELECT rank, device, s, coalesce(lead(prev_max) OVER w, max_e) AS e,
         CASE WHEN lead(s) OVER w IS NULL OR call_s < lead(s) OVER w THEN call_submit_ns END AS submit_ns,
         coalesce(graph_inner, false) AS graph_inner,
         CASE WHEN lead(s) OVER w IS NULL OR call_s < lead(s) OVER w THEN call_api_kind END AS api_kind
  FROM starts WINDOW w AS (PARTITION BY rank, device ORDER BY s)),
gaps AS (
  SELECT *, s - lag(e) OVER (PARTITION BY rank, device ORDER BY s) AS gap,
         lag(e) OVER (PARTITION BY rank, device ORDER BY s) AS prev_e
  FROM islands),
classified AS (
  SELECT *, CASE WHEN gap IS NULL THEN NULL
                 WHEN NOT graph_inner AND submit_ns > prev_e THEN 'host_wait'
                 WHEN gap < {KERNEL_WAIT_NS} THEN 'between_kernels'
                 ELSE 'other' END AS idle_kind
  FROM gaps)"""

# Host step annotations of the first family present, numbered per rank by start.
_STEPS = f"""
fam AS (
  SELECT rank, name, start_ns, end_ns, {_STEP_FAMILY} AS family
  FROM annotations WHERE run_id = $run AND NOT on_device),
steps AS (
  SELECT rank, name, start_ns, end_ns,
         row_number() OVER (PARTITION BY rank ORDER BY start_ns) AS step
  FROM fam WHERE family = (SELECT min(family) FROM fam))"""

# Steps of a rank overlap when one starts before an earlier one has ended (or two start together).
_OVERLAPS = f"""
WITH {_STEPS},
ordered AS (
  SELECT start_ns, lag(start_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS prev_start,
         max(end_ns) OVER (PARTITION BY rank ORDER BY start_ns
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM steps)
SELECT count(*) FROM ordered WHERE start_ns <= prev_start OR start_ns < prev_end"""

# The step of each launching call: the step whose annotation holds the call's start. Disjoint steps
# (the usual case): an ASOF join, the latest step starting at or before the call; overlapping
# steps: every step that holds it (a range join, slower).
_CALL_STEP_ASOF = """
call_step AS (
  SELECT c.rank, c.correlation_id, st.step, st.name, st.end_ns - st.start_ns AS host_ns
  FROM calls c ASOF JOIN steps st ON st.rank = c.rank AND c.api_start_ns >= st.start_ns
  WHERE c.api_start_ns < st.end_ns)"""
_CALL_STEP_RANGE = """
call_step AS (
  SELECT c.rank, c.correlation_id, st.step, st.name, st.end_ns - st.start_ns AS host_ns
  FROM calls c JOIN steps st ON st.rank = c.rank
       AND c.api_start_ns >= st.start_ns AND c.api_start_ns < st.end_ns)"""

# One query for the device totals and the steps, so that the base is computed once. Busy time in a
# step's span [lo, hi] = B(hi) − B(lo), with B(t) the busy time before t: the islands are disjoint
# and sorted, so B(t) = busy before the last island starting at or before t + its part before t.
_TIMELINE = f"""{{base}},
{_STEPS},
{{call_step}},
member AS (
  SELECT cs.rank, cs.step, cs.name, cs.host_ns, a.device,
         count(*) FILTER (WHERE a.category = 'kernel') AS kernels,
         count(*) FILTER (WHERE a.category = 'kernel' AND a.api_kind = 'kernel_launch') AS direct,
         greatest(min(a.start_ns), any_value(b.lo)) AS lo,
         least(max(a.end_ns), any_value(b.hi)) AS hi
  FROM act a JOIN call_step cs ON cs.rank = a.rank AND cs.correlation_id = a.correlation_id
  JOIN bounds b ON b.rank = a.rank AND b.device = a.device
  GROUP BY ALL),
cum AS (
  SELECT rank, device, s, e,
         coalesce(sum(e - s) OVER (PARTITION BY rank, device ORDER BY s
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
  FROM islands),
to_hi AS (
  SELECT m.*, coalesce(c.before + least(c.e, m.hi) - c.s, 0) AS busy_to_hi
  FROM member m ASOF LEFT JOIN cum c ON c.rank = m.rank AND c.device = m.device AND m.hi >= c.s),
step_busy AS (
  SELECT t.*, greatest(t.busy_to_hi - coalesce(c.before + least(c.e, t.lo) - c.s, 0), 0) AS busy
  FROM to_hi t ASOF LEFT JOIN cum c ON c.rank = t.rank AND c.device = t.device AND t.lo >= c.s),
per_device AS (
  SELECT rank, device, sum(e - s) AS busy,
         sum(gap) FILTER (WHERE idle_kind = 'host_wait') AS host_wait,
         sum(gap) FILTER (WHERE idle_kind = 'between_kernels') AS between_k,
         sum(gap) FILTER (WHERE idle_kind = 'other') AS other,
         sum(greatest(gap - {GRAPH_RESIDUAL_GAP_NS}, 0))
           FILTER (WHERE idle_kind = 'between_kernels' AND api_kind = 'kernel_launch') AS launch_gap,
         count(*) FILTER (WHERE idle_kind = 'host_wait') AS n_host_wait
  FROM classified GROUP BY ALL)
SELECT 'device' AS part, b.rank, b.device, b.n, b.k, b.lo, b.hi, coalesce(d.busy, 0) AS busy,
       coalesce(d.host_wait, 0) AS host_wait, coalesce(d.between_k, 0) AS between_k,
       coalesce(d.other, 0) AS other, coalesce(d.launch_gap, 0) AS launch_gap,
       coalesce(d.n_host_wait, 0) AS n_host_wait
FROM bounds b LEFT JOIN per_device d ON d.rank = b.rank AND d.device = b.device
UNION ALL BY NAME
SELECT 'step' AS part, rank, step, name, host_ns, device, kernels, direct, lo, hi, busy FROM step_busy
ORDER BY part, rank, step, device"""


def _median(values: list[float]) -> float | None:
    v = sorted(values)
    if not v:
        return None
    m = len(v) // 2
    return float(v[m]) if len(v) % 2 else (v[m - 1] + v[m]) / 2


class LaunchIdle(Analyzer, name="launch_idle"):
    summary = (
        "device busy/idle over the steady window, idle split into host-wait vs between-kernels, "
        "kernels per step, launch overhead and the graph/megakernel saving"
    )

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        p = {"run": run_id}
        per_dev, steps = self._timeline(con, run_id)
        if not per_dev:
            return AnalyzerResult(metrics=self._metrics({}))
        window = sum(int(r["hi"]) - int(r["lo"]) for r in per_dev if r["lo"] is not None and r["hi"] is not None)
        busy = sum(int(r["busy"]) for r in per_dev)
        host_wait = sum(int(r["host_wait"]) for r in per_dev)
        between = sum(int(r["between_k"]) for r in per_dev)
        other = sum(int(r["other"]) for r in per_dev)
        launch_gap = sum(int(r["launch_gap"]) for r in per_dev)
        frac = (lambda x: x / window) if window > 0 else (lambda x: None)

        launch = con.execute(
            """SELECT count(*), median(launch_delay_ns), median(dur_ns), median(api_dur_ns)
               FROM launches WHERE run_id = $run AND api_kind = 'kernel_launch' AND category = 'kernel'""",
            p,
        ).fetchall()[0]
        graph = con.execute(
            """SELECT count(*), coalesce(sum(n_kernels), 0), median(api_dur_ns)
               FROM graph_launches WHERE run_id = $run""",
            p,
        ).fetchall()[0]
        n_kernels = int(
            con.execute("SELECT count(*) FROM kernels WHERE run_id = $run AND category = 'kernel'", p).fetchall()[0][0]
        )

        n_direct, delay_ns, direct_kernel_ns, launch_call_ns = launch
        n_graphs, n_graph_kernels, graph_call_ns = int(graph[0]), int(graph[1]), graph[2]
        kernels_per_step = _median([s["kernels"] for s in steps])
        direct_per_step = _median([s["direct_kernels"] for s in steps]) if steps else float(n_direct)
        values: dict[str, Any] = {
            "device_busy_fraction": frac(busy),
            "idle_host_wait_fraction": frac(host_wait),
            "idle_between_kernels_fraction": frac(between),
            "idle_other_fraction": frac(other),
            "kernels_per_step": kernels_per_step,
            "step_device_time": _median([s["device_ns"] / 1e6 for s in steps]),
            "step_busy_fraction": _median([s["busy_fraction"] for s in steps if s["busy_fraction"] is not None]),
            "median_launch_delay_us": None if delay_ns is None else float(delay_ns) / 1e3,
            "median_launch_call_us": None if launch_call_ns is None else float(launch_call_ns) / 1e3,
            "median_direct_kernel_us": None if direct_kernel_ns is None else float(direct_kernel_ns) / 1e3,
            "graph_launched_kernel_fraction": n_graph_kernels / n_kernels if n_kernels else None,
        }
        res = AnalyzerResult(metrics=self._metrics(values))

        evidence: dict[str, Any] = {
            "steady_window_ns": window,
            "busy_ns": busy,
            "idle_ns": {"host_wait": host_wait, "between_kernels": between, "other": other},
            "launch_overhead_gap_ns": launch_gap,
            "host_wait_gaps": sum(int(r["n_host_wait"]) for r in per_dev),
            "per_device": [
                {"rank": r["rank"], "device": r["device"], "rows": int(r["n"]), "trimmed_each_end": int(r["k"]),
                 "window_start_ns": r["lo"], "window_end_ns": r["hi"], "busy_ns": int(r["busy"])}
                for r in per_dev
            ],
            "individually_launched_kernels": int(n_direct),
            "median_direct_kernel_ns": direct_kernel_ns,
            "median_launch_call_ns": launch_call_ns,
            "median_launch_delay_ns": delay_ns,
            "graph_launches": n_graphs,
            "graph_kernels": n_graph_kernels,
            "median_graph_launch_call_ns": graph_call_ns,
            "kernels": n_kernels,
            "steps": len(steps),
            "kernels_per_step": kernels_per_step,
            "direct_kernels_per_step": direct_per_step,
            "step_samples": steps[:10],
        }
        graph_note = (
            f" The run already replays {n_graphs} graph launch(es) holding {n_graph_kernels} of its "
            f"{n_kernels} kernels."
            if n_graphs
            else ""
        )
        launch_bound = (
            n_direct > 0
            and direct_kernel_ns is not None
            and launch_call_ns is not None
            and direct_kernel_ns < launch_call_ns
            and direct_per_step is not None
            and direct_per_step >= MIN_KERNELS_PER_STEP
        )
        if launch_bound and window > 0:
            saving = host_wait + launch_gap
            share = saving / window
            severity: Severity = (
                "critical" if share >= SAVING_CRITICAL_FRACTION
                else "warning" if share >= SAVING_WARNING_FRACTION else "info"
            )
            per = "per step" if steps else "in the run"
            res.findings.append(
                Finding(
                    severity=severity,
                    title=(
                        f"launch-bound: {direct_per_step:.0f} kernels launched one by one {per}, median kernel "
                        f"{float(direct_kernel_ns) / 1e3:.1f} µs < launch call {float(launch_call_ns) / 1e3:.1f} µs; "
                        f"graph capture could save ≈{saving / 1e6:.2f} ms ({share:.0%} of the steady window)"
                    ),
                    detail=(
                        f"The device is busy {busy / window:.0%} of the steady window and waits for the host "
                        f"{host_wait / window:.0%} of it; launch gaps between kernels take another "
                        f"{launch_gap / window:.0%}. The kernels are shorter than the calls that launch "
                        "them, so the host cannot keep the device fed. Capture the decode step in a CUDA/HIP "
                        "graph (torch.compile mode='reduce-overhead', vLLM/SGLang cuda-graph capture for "
                        "these batch sizes) or fuse the small kernels (a megakernel) so one launch replays "
                        f"the step.{graph_note}"
                    ),
                    evidence=evidence,
                    saving_ns=int(saving),
                    saving_fraction=share,
                )
            )
        elif window > 0 and host_wait / window >= HOST_WAIT_WARNING_FRACTION:
            res.findings.append(
                Finding(
                    severity="warning",
                    title=f"device waits for the host {host_wait / window:.0%} of the steady window "
                    f"({host_wait / 1e6:.2f} ms)",
                    detail=(
                        f"The device is busy {busy / window:.0%} of the steady window; in the host-wait gaps "
                        "the next launch (or graph replay) had not been submitted yet. Overlap host work "
                        "(scheduling, sampling, input preparation) with the device, e.g. asynchronous "
                        f"scheduling, and remove host syncs between steps.{graph_note}"
                    ),
                    evidence=evidence,
                    saving_ns=int(host_wait),
                    saving_fraction=host_wait / window,
                )
            )
        elif n_kernels and n_graph_kernels / n_kernels >= GRAPH_MAJORITY:
            res.findings.append(
                Finding(
                    severity="info",
                    title=f"graph launches already used: {n_graphs} replay(s), {n_graph_kernels} of {n_kernels} "
                    "kernels",
                    detail=(
                        f"Kernels are replayed from graphs; the device is busy {frac(busy) or 0:.0%} of the "
                        "steady window, so launch overhead is not what limits this run."
                    ),
                    evidence=evidence,
                )
            )
        return res

    @staticmethod
    def _metrics(v: dict[str, Any]) -> list[Metric]:
        spec: list[tuple[str, str, Better]] = [
            ("device_busy_fraction", "fraction", "higher"),
            ("idle_host_wait_fraction", "fraction", "lower"),
            ("idle_between_kernels_fraction", "fraction", "lower"),
            ("idle_other_fraction", "fraction", "lower"),
            ("kernels_per_step", "count", "lower"),
            ("step_device_time", "ms", "lower"),
            ("step_busy_fraction", "fraction", "higher"),
            ("median_launch_delay_us", "us", "lower"),
            ("median_launch_call_us", "us", "lower"),
            ("median_direct_kernel_us", "us", "higher"),
            ("graph_launched_kernel_fraction", "fraction", "higher"),
        ]
        out: list[Metric] = []
        for name, unit, better in spec:
            x = v.get(name)
            out.append(Metric(name, None if x is None else float(x), unit, better))
        return out

    @staticmethod
    def _timeline(
        con: duckdb.DuckDBPyConnection, run_id: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Per (rank, device): rows, trim, steady window, busy and idle split (dict rows); per step
        (host step annotation): kernels launched in it, its device span clipped to the steady
        window, and the busy share of that span."""
        p = {"run": run_id}
        n_top = con.execute(
            f"""SELECT coalesce(max(CASE WHEN n >= {MIN_ROWS_TO_TRIM}
                                    THEN greatest(1, floor(n * {TRIM_FRACTION}))::BIGINT ELSE 0 END), 0) + 1
                FROM (SELECT count(*) AS n FROM kernels WHERE run_id = $run GROUP BY rank, device)""",
            p,
        ).fetchall()[0][0]
        overlapping = con.execute(_OVERLAPS, p).fetchall()[0][0] > 0
        cur = con.execute(
            _TIMELINE.format(base=_BASE.format(n_top=int(n_top)),
                             call_step=_CALL_STEP_RANGE if overlapping else _CALL_STEP_ASOF),
            p,
        )
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        per_dev = [r for r in rows if r["part"] == "device"]
        steps = []
        for r in rows:
            if r["part"] != "step":
                continue
            lo, hi = r["lo"], r["hi"]
            span = max(int(hi) - int(lo), 0) if lo is not None and hi is not None else 0
            steps.append({
                "rank": r["rank"], "step": int(r["step"]), "name": r["name"][:80], "device": r["device"],
                "host_ns": int(r["host_ns"]), "kernels": int(r["kernels"]), "direct_kernels": int(r["direct"]),
                "device_ns": span, "busy_ns": int(r["busy"]),
                "busy_fraction": int(r["busy"]) / span if span > 0 else None,
            })
        return per_dev, steps
