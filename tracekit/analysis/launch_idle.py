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
_BASE = f"""
WITH calls AS (
  SELECT rank, correlation_id, any_value(api_kind) AS api_kind,
         min(api_start_ns) AS api_start_ns, max(api_start_ns + api_dur_ns) AS api_end_ns
  FROM launches WHERE run_id = $run GROUP BY ALL),
act AS (
  SELECT k.rank, k.device, k.stream, k.category, k.correlation_id, k.start_ns,
         k.start_ns + greatest(k.dur_ns, 0) AS end_ns, c.api_kind, c.api_start_ns,
         c.api_kind = 'graph_launch'
           AND k.start_ns > min(k.start_ns) OVER (PARTITION BY k.rank, k.correlation_id) AS graph_inner,
         CASE WHEN c.api_kind = 'graph_launch' THEN c.api_start_ns ELSE c.api_end_ns END AS submit_ns
  FROM kernels k LEFT JOIN calls c
    ON c.rank = k.rank AND c.correlation_id = k.correlation_id
  WHERE k.run_id = $run),
ordered AS (
  SELECT rank, device, start_ns, end_ns, count(*) OVER (PARTITION BY rank, device) AS n,
         row_number() OVER (PARTITION BY rank, device ORDER BY start_ns) AS rn_start,
         row_number() OVER (PARTITION BY rank, device ORDER BY end_ns DESC) AS rn_end
  FROM act),
win AS (
  SELECT rank, device, any_value(n) AS n,
         any_value(CASE WHEN n >= {MIN_ROWS_TO_TRIM}
                        THEN greatest(1, floor(n * {TRIM_FRACTION}))::BIGINT ELSE 0 END) AS k
  FROM ordered GROUP BY ALL),
bounds AS (
  SELECT w.rank, w.device, w.n, w.k,
         max(o.start_ns) FILTER (WHERE o.rn_start = w.k + 1) AS lo,
         max(o.end_ns) FILTER (WHERE o.rn_end = w.k + 1) AS hi
  FROM win w JOIN ordered o USING (rank, device) GROUP BY ALL),
clipped AS (
  SELECT a.*, greatest(a.start_ns, b.lo) AS s, least(a.end_ns, b.hi) AS e
  FROM act a JOIN bounds b USING (rank, device)
  WHERE least(a.end_ns, b.hi) > greatest(a.start_ns, b.lo)),
flagged AS (
  SELECT *, CASE WHEN s > coalesce(max(e) OVER (PARTITION BY rank, device ORDER BY s, e
                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), s - 1) THEN 1 ELSE 0 END AS new_island
  FROM clipped),
numbered AS (
  SELECT *, sum(new_island) OVER (PARTITION BY rank, device ORDER BY s, e
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
  FROM flagged),
islands AS (
  SELECT rank, device, island, min(s) AS s, max(e) AS e,
         arg_min(submit_ns, s) AS submit_ns, arg_min(coalesce(graph_inner, false), s) AS graph_inner,
         arg_min(api_kind, s) AS api_kind
  FROM numbered GROUP BY ALL),
gaps AS (
  SELECT *, s - lag(e) OVER (PARTITION BY rank, device ORDER BY s) AS gap,
         lag(e) OVER (PARTITION BY rank, device ORDER BY s) AS prev_e
  FROM islands),
classified AS (
  SELECT *, CASE WHEN gap IS NULL THEN NULL
                 WHEN NOT graph_inner AND submit_ns > prev_e THEN 'host_wait'
                 WHEN gap < {KERNEL_WAIT_NS} THEN 'between_kernels'
                 ELSE 'other' END AS idle_kind
  FROM gaps)
"""


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
        per_dev = con.execute(
            _BASE
            + f"""
            SELECT b.rank, b.device, b.n, b.k, b.lo, b.hi,
                   (SELECT coalesce(sum(i.e - i.s), 0) FROM islands i
                     WHERE i.rank = b.rank AND i.device = b.device) AS busy,
                   (SELECT coalesce(sum(c.gap) FILTER (WHERE c.idle_kind = 'host_wait'), 0)
                    FROM classified c WHERE c.rank = b.rank AND c.device = b.device) AS host_wait,
                   (SELECT coalesce(sum(c.gap) FILTER (WHERE c.idle_kind = 'between_kernels'), 0)
                    FROM classified c WHERE c.rank = b.rank AND c.device = b.device) AS between_k,
                   (SELECT coalesce(sum(c.gap) FILTER (WHERE c.idle_kind = 'other'), 0)
                    FROM classified c WHERE c.rank = b.rank AND c.device = b.device) AS other,
                   (SELECT coalesce(sum(greatest(c.gap - {GRAPH_RESIDUAL_GAP_NS}, 0))
                             FILTER (WHERE c.idle_kind = 'between_kernels' AND c.api_kind = 'kernel_launch'), 0)
                    FROM classified c WHERE c.rank = b.rank AND c.device = b.device) AS launch_gap,
                   (SELECT count(*) FILTER (WHERE c.idle_kind = 'host_wait')
                    FROM classified c WHERE c.rank = b.rank AND c.device = b.device) AS n_host_wait
            FROM bounds b ORDER BY b.rank, b.device""",
            p,
        ).fetchall()
        if not per_dev:
            return AnalyzerResult(metrics=self._metrics({}))
        window = sum(int(r[5]) - int(r[4]) for r in per_dev if r[4] is not None and r[5] is not None)
        busy = sum(int(r[6]) for r in per_dev)
        host_wait = sum(int(r[7]) for r in per_dev)
        between = sum(int(r[8]) for r in per_dev)
        other = sum(int(r[9]) for r in per_dev)
        launch_gap = sum(int(r[10]) for r in per_dev)
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
        steps = self._steps(con, run_id)

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
            "host_wait_gaps": sum(int(r[11]) for r in per_dev),
            "per_device": [
                {"rank": r[0], "device": r[1], "rows": int(r[2]), "trimmed_each_end": int(r[3]),
                 "window_start_ns": r[4], "window_end_ns": r[5], "busy_ns": int(r[6])}
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
    def _steps(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
        """Per step (host step annotation): kernels launched in it, its device span clipped to the
        steady window, and the busy share of that span."""
        rows = con.execute(
            _BASE
            + f""",
            fam AS (
              SELECT rank, name, start_ns, end_ns, {_STEP_FAMILY} AS family
              FROM annotations WHERE run_id = $run AND NOT on_device),
            steps AS (
              SELECT rank, name, start_ns, end_ns,
                     row_number() OVER (PARTITION BY rank ORDER BY start_ns) AS step
              FROM fam WHERE family = (SELECT min(family) FROM fam)),
            member AS (
              SELECT st.rank, st.step, st.name, st.end_ns - st.start_ns AS host_ns, a.device,
                     count(*) FILTER (WHERE a.category = 'kernel') AS kernels,
                     count(*) FILTER (WHERE a.category = 'kernel' AND a.api_kind = 'kernel_launch') AS direct,
                     greatest(min(a.start_ns), any_value(b.lo)) AS lo,
                     least(max(a.end_ns), any_value(b.hi)) AS hi
              FROM steps st JOIN act a ON a.rank = st.rank
                   AND a.api_start_ns >= st.start_ns AND a.api_start_ns < st.end_ns
              JOIN bounds b ON b.rank = a.rank AND b.device = a.device
              GROUP BY ALL)
            SELECT m.rank, m.step, m.name, m.host_ns, m.device, m.kernels, m.direct, m.lo, m.hi,
                   (SELECT coalesce(sum(greatest(least(i.e, m.hi) - greatest(i.s, m.lo), 0)), 0)
                    FROM islands i WHERE i.rank = m.rank AND i.device = m.device
                      AND i.e > m.lo AND i.s < m.hi) AS busy
            FROM member m ORDER BY m.rank, m.step, m.device""",
            {"run": run_id},
        ).fetchall()
        out = []
        for rank, step, name, host_ns, device, kernels, direct, lo, hi, busy in rows:
            span = max(int(hi) - int(lo), 0) if lo is not None and hi is not None else 0
            out.append({
                "rank": rank, "step": int(step), "name": name[:80], "device": device,
                "host_ns": int(host_ns), "kernels": int(kernels), "direct_kernels": int(direct),
                "device_ns": span, "busy_ns": int(busy),
                "busy_fraction": int(busy) / span if span > 0 else None,
            })
        return out
