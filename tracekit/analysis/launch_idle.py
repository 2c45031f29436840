"""launch_idle: is the device kept busy, and when it idles, what is it waiting for?

Inputs (SQL library, docs/sql.md): ``run_window`` (each device's window: its busiest session
whole, nothing inside trimmed), ``idle_gaps`` / ``idle_by_cause`` (every gap between busy islands
with its cause), ``steps``, ``run_workload``; ``runtime_calls_in_scope`` and ``device_work`` for the
host's launch cadence.

Math (sums over the run's devices):

* ``device_busy_fraction`` = Σ busy ÷ Σ window; ``idle_trimmed_ms`` = time outside the windows
  (other sessions of a run stitched from separate captures) — nothing inside a window is trimmed,
  so a warm-up, a host block or a stall inside a step stays in view.
* idle by cause kind (``idle_gaps.cause_kind``), each a share of the window:
  ``idle_data_loading_fraction``, ``idle_compile_fraction``, ``idle_sync_fraction``,
  ``idle_compiled_region_fraction``, ``idle_graph_capture_fraction``, ``idle_host_wait_fraction``
  (host late, nothing more specific), ``idle_between_kernels_fraction`` (launch overhead, gaps
  under 30 µs with work queued), ``idle_unexplained_fraction``; ``idle_other_fraction`` is every
  idle share that is neither host wait nor between kernels (so busy + host wait + between +
  other = 1, as before).
* **launch cadence**: over direct kernel launches (``api_kind = 'kernel_launch'``) on each
  launching thread, the host time per kernel = the median interval between consecutive launch-call
  starts (what the host spends per kernel: framework + Python + the call), against the median
  duration of those kernels. The run is **launch-bound** when the host needs longer per kernel than
  the kernel runs and host-wait idle is at least ``MIN_FINDING_FRACTION`` of the window. The
  saving claimed is only idle that no other cause explains: host wait + launch overhead gaps
  beyond ``GRAPH_RESIDUAL_GAP_NS`` each (what a graph replay still leaves).
* **turns**: host-wait gaps that open while the host is inside a blocking synchronize call
  (``cudaDeviceSynchronize``, ``cudaThreadSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, their driver and HIP forms) on the same rank — the host waited for the
  device to drain and prepared the next launch only then. When they are at least
  ``TURNS_MAJORITY`` of host-wait idle (and ≥ ``MIN_SAMPLES`` gaps), the finding names the
  synchronize, its saving is those gaps, and they are left out of the launch-bound and host-wait
  verdicts (a synchronize after every kernel is not a launch-cadence problem: graphs would not
  remove it, dropping the synchronize would).
* medians of a launch quantity are metrics only with ≥ ``MIN_SAMPLES`` samples.

Findings (one per cause, the cause named in the title), severity from the share of the window a
fix would save (:func:`~tracekit.analysis.base.run_share_severity`): ≥ 20 % critical, ≥ 5 % warning,
≥ 1 % info, nothing below. Causes: DataLoader, compilation, a synchronising
API (named: ``cudaMemcpy``, ``hipMemcpyWithStream``, ``cudaStreamSynchronize`` …), torch.compile
region, one-time start-up (context creation, library and code-object loads, first launches:
always ``info``, with how to measure after warm-up), host launch (launch-bound), unexplained
idle. When start-up is ``WARM_UP_WINDOW_FRACTION`` of the window or more, the capture is a warm-up
and every launch_idle finding is capped at ``info`` (it describes start-up, not serving); so is a
micro-benchmark or test snippet (fewer than ``MICRO_BENCHMARK_ROWS`` device rows, no step markers,
no training/serving/generation evidence), whose host gaps are its harness's dispatch loop. A graph-capture trace gets one ``info``
finding saying what it is (its launches record no device work; profile replay, not capture) and
no launch-bound verdict. Runs that already replay most kernels from graphs are never told to
capture graphs. A run without device activity gets no finding and NULL metrics; a window with fewer than
``MIN_TIMELINE_ROWS`` device rows gets one ``info`` finding saying so and no verdict.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracekit.analysis.base import Analyzer, AnalyzerResult, Better, Finding, Metric, run_share_severity
from tracekit.formatting import duration_ns

GRAPH_RESIDUAL_GAP_NS = 1_000  # ns per kernel a graph replay still leaves between kernels
MIN_FINDING_FRACTION = 0.01  # of the window: below this no finding (base.RUN_SHARE_INFO)
WARNING_FRACTION = 0.05  # base.RUN_SHARE_WARNING
UNEXPLAINED_MIN_FRACTION = 0.20  # unexplained idle is reported from this share of the window
MIN_SAMPLES = 20  # samples a median needs before it is a metric
LAUNCH_GAP_MAX_NS = 1_000_000  # host-wait gaps longer than this are host work, not launch cadence
GRAPH_MAJORITY = 0.5  # share of kernels replayed from graphs: "graphs already used"
MIN_TIMELINE_ROWS = 10  # device rows a window needs before the timeline is judged
MICRO_BENCHMARK_ROWS = 200  # fewer device rows, no step markers, generic inference: a micro-benchmark
WARM_UP_WINDOW_FRACTION = 0.5  # start-up idle from this share of the window: a warm-up capture
TURNS_MAJORITY = 0.5  # share of host-wait idle opening inside a synchronize call: "host and device take turns"

CAUSE_KINDS = ("data_loading", "compile", "sync", "startup", "compiled_region", "graph_capture", "host_wait",
               "launch_overhead", "unexplained")

_ADVICE = {
    "data_loading": (
        "The device waits while the host produces the next batch inside the DataLoader's __next__. "
        "Load in worker processes (num_workers > 0, persistent_workers=True, prefetch_factor ≥ 2), pin "
        "memory and copy with non_blocking=True, and move decoding/augmentation/tokenisation out of the "
        "measured loop. Launch overhead is not the problem here: graph capture would not help."
    ),
    "compile": (
        "The device waits for compilation inside the measured window. Warm up every shape before "
        "measuring, cache compiled artifacts (torch.compile's FX graph cache, JAX's persistent "
        "compilation cache), and see compile_churn for recompiles caused by changing shapes."
    ),
    "sync": (
        "The host blocks in a synchronising call ({name}) while the device has nothing to run: a "
        ".item()/.tolist()/.cpu() read-back, a pageable or synchronous copy, or an explicit synchronize. "
        "Make the copy asynchronous (non_blocking=True into pinned memory) and read it one step later, "
        "or overlap the host's next-step scheduling with the device (SGLang/vLLM overlap scheduling)."
    ),
    "startup": (
        "This is one-time initialization inside the captured window, not steady-state cost: the runtime "
        "creates its context, loads libraries and code objects (the first launch of each kernel loads its "
        "code object; hipModuleLoadData / cuModuleLoad, rocBLAS/Tensile or cuBLAS handles), creates streams. "
        "A serving process pays it once. Start the profiler after warm-up (a few untimed iterations, "
        "torch.profiler schedule(wait=…, warmup=…), or `tracekit capture --warmup`) so the window shows "
        "the steady state; the other findings here describe the warm-up, not serving speed."
    ),
    "runtime_call": (
        "The host is inside a long runtime call ({name}) while the device has nothing to run: a memory "
        "allocation or free (cudaFree and hipFree also synchronize the device), or a launch call that "
        "blocks. Pre-allocate (the caching allocator; no empty_cache in the loop), keep frees out of the "
        "step, and if this is warm-up, start the profiler after it."
    ),
    "compiled_region": (
        "The idle lies inside torch.compile regions: Python, guard checks and launches between the "
        "compiled graph's kernels. Compile with mode='reduce-overhead' (CUDA/HIP graphs for the compiled "
        "region) or 'max-autotune', and look for graph breaks that split the region."
    ),
    "unexplained": (
        "Work was queued and nothing on the host explains the wait: a dependency on another stream or "
        "device (collectives, events), a data-dependent host decision the trace does not show, or host "
        "activity outside the trace (XPlane captures keep only part of the host). Look at the longest gap."
    ),
}


_KIND_LABEL = {"data_loading": "data-loading spans", "compile": "compilations", "sync": "synchronising calls",
               "startup": "start-up calls", "runtime_call": "runtime calls", "compiled_region": "compiled regions"}


def _ms(ns: float) -> str:
    return duration_ns(ns)


def _no_timeline_verdict(con: duckdb.DuckDBPyConnection, p: dict[str, Any], cm: tuple[Any, ...] | None,
                         workload: str, n_rows: int, evidence: dict[str, Any], trim_note: str) -> Finding | None:
    """The one info finding of a run whose timeline cannot be judged (an incomplete trace, a
    graph capture, too few device rows), or None. ``evidence`` holds the window and busy ns."""
    window, busy = int(evidence["window_ns"]), int(evidence["busy_ns"])
    def frac(x: float) -> float:
        return x / window

    if cm is not None and cm[0]:
        return Finding(
            severity="info",
            title=f"incomplete trace: no timeline verdict ({cm[1]})",
            detail=(f"{cm[1]}. Gaps in such a trace are dropped events as much as idle device time, so no "
                    f"idle, host-wait or launch-bound verdict is drawn (measured busy {frac(busy):.0%} of "
                    "the window, for what it is worth). Capture the whole window (no event sampling or "
                    "trimming) to judge the timeline."),
            evidence={**evidence, "incomplete": cm[1]},
        )

    if workload == "graph_capture":
        n_calls = con.execute(
            "SELECT launch_calls, launches_without_work FROM run_completeness WHERE run_id = $run", p).fetchone()
        return Finding(
            severity="info",
            title=("graph-capture trace: launches inside stream capture record no device work "
                   + (f"({n_calls[1]} of {n_calls[0]} launch calls ran nothing)" if n_calls else "")),
            detail=("This trace records a CUDA/HIP graph being captured (StreamBeginCapture … EndCapture): the "
                    "launches inside the capture are recorded into the graph and run nothing, so the device "
                    "idles by construction. It says nothing about serving speed: profile the graph replay "
                    "(the steady state) instead. No launch-bound verdict is drawn from a capture."),
            evidence=evidence,
        )

    if n_rows < MIN_TIMELINE_ROWS:
        return Finding(
            severity="info",
            title=f"too little device activity to judge the timeline ({n_rows} device rows in the window)",
            detail=(f"The window holds {n_rows} device rows over {_ms(window)} (busy {frac(busy):.0%}): too few "
                    "for an idle, host-wait or launch-bound verdict (a snippet, or a capture that missed the "
                    f"work). Capture a whole step or more; verdicts start at {MIN_TIMELINE_ROWS} rows." + trim_note),
            evidence=evidence,
        )
    return None


def _cause_findings(causes: list[tuple[Any, ...]], window: int, busy: int, evidence: dict[str, Any],
                    trim_note: str) -> list[Finding]:
    """One finding per explained idle cause whose kind costs enough of the window (``causes``:
    idle_by_cause rows (kind, cause, gaps, idle ns, longest gap ns, …) largest first)."""
    out: list[Finding] = []

    def frac(x: float) -> float:
        return x / window

    for kind in ("data_loading", "compile", "sync", "startup", "runtime_call", "compiled_region"):
        rows = [c for c in causes if c[0] == kind]
        ns = sum(int(c[3]) for c in rows)
        sev = run_share_severity(frac(ns))
        if sev is None:
            continue
        # the title's numbers are the named cause's own (idle_by_cause rows of that cause);
        # other causes of the same kind are added as such, and the saving covers the kind
        by_cause: dict[str, list[int]] = {}
        for c in rows:
            acc = by_cause.setdefault(str(c[1]), [0, 0, 0])
            acc[0] += int(c[3])
            acc[1] += int(c[2])
            acc[2] = max(acc[2], int(c[4]))
        name, (top_ns, top_gaps, top_longest) = max(by_cause.items(), key=lambda kv: kv[1][0])
        what = f"device idle {frac(top_ns):.0%} of the window waiting on {name}"
        if kind == "startup":  # one-time: says how to measure, not what to fix; never above info
            sev = "info"
            what = (f"one-time start-up inside the window: device idle {frac(top_ns):.0%} while the host "
                    f"initializes ({name})")
        others = ns - top_ns
        more = (f"; {frac(others):.0%} more on {len(by_cause) - 1} other {_KIND_LABEL[kind]} ({_ms(others)})"
                if len(by_cause) > 1 and others > 0 else "")
        out.append(Finding(
            severity=sev,
            title=(f"{what} ({_ms(top_ns)} in {top_gaps} gap{'s' if top_gaps != 1 else ''}; "
                   f"longest {_ms(top_longest)}){more}"),
            detail=(f"The device is busy {frac(busy):.0%} of its window ({_ms(window)}); "
                    f"{frac(top_ns):.0%} of it is idle while the host is inside {name}"
                    + (f", {frac(others):.0%} inside other {_KIND_LABEL[kind]} ("
                       + ", ".join(f"{n} {_ms(v[0])}" for n, v in sorted(by_cause.items(), key=lambda kv: -kv[1][0])
                                   if n != name) + ")" if more else "")
                    + ". " + _ADVICE[kind].format(name=name) + trim_note),
            evidence={**evidence, "cause": name, "cause_kind": kind, "cause_idle_ns": top_ns, "kind_idle_ns": ns},
            saving_ns=ns,
            saving_fraction=frac(ns),
        ))
    return out


class LaunchIdle(Analyzer, name="launch_idle"):
    summary = (
        "device busy/idle over each device's whole window, idle split by cause (DataLoader, compile, sync "
        "API, torch.compile region, graph capture, host launch, unexplained), launch-boundness from host "
        "time per kernel"
    )

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        p = {"run": run_id}
        win = con.execute(
            """SELECT count(*), sum(window_ns), sum(busy_ns), sum(trimmed_ns), sum(trimmed_busy_ns),
                      max(n_sessions), sum(n_rows)
               FROM run_window WHERE run_id = $run""", p).fetchall()[0]
        if not win[0] or not win[1]:
            return AnalyzerResult(metrics=self._metrics({}))
        n_dev, window, busy, trimmed, trimmed_busy, n_sessions, n_rows = (int(x or 0) for x in win)
        causes = con.execute(
            """SELECT cause_kind, cause, sum(n_gaps), sum(idle_ns), max(longest_gap_ns),
                      -- the longest gap; of equally long ones the earliest, then the lowest device
                      arg_max(longest_gap_start_ns, [longest_gap_ns, -longest_gap_start_ns, -coalesce(device, -1)]),
                      arg_max(device, [longest_gap_ns, -longest_gap_start_ns, -coalesce(device, -1)])
               FROM idle_by_cause WHERE run_id = $run GROUP BY ALL ORDER BY 4 DESC""", p).fetchall()
        by_kind: dict[str, int] = {}
        for kind, _c, _n, ns, *_ in causes:
            by_kind[kind] = by_kind.get(kind, 0) + int(ns)
        wl = con.execute("SELECT workload, has_decode FROM run_workload WHERE run_id = $run", p).fetchone()
        cm = con.execute("SELECT incomplete, note FROM run_completeness WHERE run_id = $run", p).fetchone()
        workload = str(wl[0]) if wl else "inference"

        cadence = con.execute(
            """WITH l AS (
                 SELECT rank, api_start_ns, api_dur_ns, dur_ns, launch_delay_ns,
                        api_start_ns - lag(api_start_ns) OVER (PARTITION BY rank ORDER BY api_start_ns) AS interval_ns
                 FROM (SELECT DISTINCT ON (r.rank, r.correlation_id) r.rank, r.correlation_id,
                              r.start_ns AS api_start_ns, r.dur_ns AS api_dur_ns, k.dur_ns,
                              k.start_ns - r.end_ns AS launch_delay_ns
                       FROM runtime_calls_in_scope r
                       JOIN device_work k ON k.rank = r.rank AND k.correlation_id = r.correlation_id
                       WHERE r.run_id = $run AND r.api_kind = 'kernel_launch' AND k.category = 'kernel'))
               SELECT count(*), median(dur_ns), median(api_dur_ns), median(launch_delay_ns),
                      median(interval_ns) FILTER (WHERE interval_ns < 10000000),
                      count(interval_ns) FILTER (WHERE interval_ns < 10000000),
                      sum(api_dur_ns)
               FROM l""", p).fetchall()[0]
        n_direct = int(cadence[0] or 0)
        kernel_ns, call_ns, delay_ns, host_per_kernel_ns, n_intervals, call_total_ns = cadence[1:]
        graph = con.execute(
            """WITH g AS (SELECT rank, correlation_id FROM runtime_calls_in_scope
                         WHERE run_id = $run AND api_kind = 'graph_launch')
               SELECT (SELECT count(*) FROM g),
                      (SELECT count(*) FROM device_work k SEMI JOIN g
                         ON g.rank = k.rank AND g.correlation_id = k.correlation_id
                       WHERE k.run_id = $run AND k.category = 'kernel')""", p
        ).fetchall()[0]
        n_kernels = int(con.execute(
            "SELECT count(*) FROM device_work WHERE run_id = $run AND category = 'kernel'", p).fetchall()[0][0])
        steps = con.execute(
            """SELECT count(*), median(n_kernels), median(step_time_ns)
               FROM steps WHERE run_id = $run AND n_kernels > 0""", p).fetchall()[0]
        launch_gap, short_host_wait = (int(x) for x in con.execute(
            f"""SELECT coalesce(sum(greatest(dur_ns - {GRAPH_RESIDUAL_GAP_NS}, 0))
                                FILTER (WHERE cause_kind = 'launch_overhead'), 0),
                       coalesce(sum(dur_ns) FILTER (WHERE cause_kind = 'host_wait' AND dur_ns < {LAUNCH_GAP_MAX_NS}), 0)
                FROM idle_gaps WHERE run_id = $run""", p).fetchall()[0])
        is_xla = bool(con.execute("SELECT count(*) > 0 FROM runs WHERE run_id = $run AND format = 'xplane'",
                                  p).fetchall()[0][0])
        n_turns, turns_ns, short_turns_ns, turn_api = _turns(con, p)

        def frac(x: float) -> float:
            return x / window

        enough = n_direct >= MIN_SAMPLES
        host_wait = by_kind.get("host_wait", 0)
        between = by_kind.get("launch_overhead", 0)
        values: dict[str, Any] = {
            "device_busy_fraction": frac(busy),
            "idle_host_wait_fraction": frac(host_wait),
            "idle_between_kernels_fraction": frac(between),
            "idle_other_fraction": frac(window - busy - host_wait - between),
            **{f"idle_{k}_fraction": frac(by_kind.get(k, 0)) for k in
               ("data_loading", "compile", "sync", "startup", "compiled_region", "graph_capture", "unexplained")},
            "idle_trimmed_ms": trimmed / 1e6,
            "kernels_per_step": float(steps[1]) if steps[0] else None,
            "step_device_time": float(steps[2]) / 1e6 if steps[0] and steps[2] is not None else None,
            "median_launch_delay_us": float(delay_ns) / 1e3 if enough and delay_ns is not None else None,
            "median_launch_call_us": float(call_ns) / 1e3 if enough and call_ns is not None else None,
            "median_direct_kernel_us": float(kernel_ns) / 1e3 if enough and kernel_ns is not None else None,
            "host_time_per_kernel_us": (float(host_per_kernel_ns) / 1e3
                                        if n_intervals and n_intervals >= MIN_SAMPLES and host_per_kernel_ns
                                        is not None else None),
            "graph_launched_kernel_fraction": int(graph[1]) / n_kernels if n_kernels else None,
        }
        res = AnalyzerResult(metrics=self._metrics(values))
        evidence: dict[str, Any] = {
            "workload": workload,
            "devices": n_dev,
            "window_ns": window,
            "busy_ns": busy,
            "trimmed_ns": trimmed,
            "trimmed_busy_ns": trimmed_busy,
            "sessions": n_sessions,
            "idle_by_cause": [
                {"cause": c, "cause_kind": k, "gaps": int(n), "idle_ns": int(ns), "window_fraction": ns / window,
                 "longest_gap_ns": int(lg), "longest_gap_start_ns": int(ls), "device": d}
                for k, c, n, ns, lg, ls, d in causes
            ],
            "recompute": (f"SELECT cause, sum(idle_ns), sum(window_fraction) FROM idle_by_cause "
                          f"WHERE run_id = '{run_id}' GROUP BY ALL ORDER BY 2 DESC"),
        }
        trim_note = (f" {_ms(trimmed)} outside the window (other capture sessions of this run) is not counted."
                     if trimmed else "")
        graph_frac = int(graph[1]) / n_kernels if n_kernels else 0.0

        no_verdict = _no_timeline_verdict(con, p, cm, workload, n_rows, evidence, trim_note)
        if no_verdict is not None:
            res.findings.append(no_verdict)
            return res

        # one finding per explained cause (the cause named in the title), largest first
        res.findings += _cause_findings(causes, window, busy, evidence, trim_note)

        # graphs remove the host's per-launch cost: only short host-wait gaps (launch cadence) and
        # launch gaps count; longer host gaps are host work between launches (reported below)
        launch_saving = short_host_wait + launch_gap
        long_host_wait = host_wait - short_host_wait
        graph_advice = _graph_advice(is_xla, workload)
        turns = n_turns >= MIN_SAMPLES and turns_ns >= TURNS_MAJORITY * host_wait and run_share_severity(
            frac(turns_ns)) is not None
        if turns:
            res.findings.append(_turns_finding(n_turns, turns_ns, host_wait, turn_api, window, evidence, trim_note))
            # the gaps are counted once: what is left is host wait the synchronize does not explain
            host_wait -= turns_ns
            short_host_wait -= short_turns_ns
            launch_saving = short_host_wait + launch_gap
            long_host_wait = host_wait - short_host_wait
        launch_bound = (
            host_per_kernel_ns is not None and kernel_ns is not None and n_intervals is not None
            and n_intervals >= MIN_SAMPLES and float(host_per_kernel_ns) > float(kernel_ns)
            and graph_frac < GRAPH_MAJORITY and frac(short_host_wait) >= MIN_FINDING_FRACTION
        )
        sev = run_share_severity(frac(launch_saving))
        if launch_bound and sev is not None:
            res.findings.append(Finding(
                severity=sev,
                title=(f"launch-bound (host launch): the host spends {float(host_per_kernel_ns) / 1e3:.1f} µs per kernel "
                       f"for kernels of {float(kernel_ns) / 1e3:.1f} µs (median); graphs could save ≈{_ms(launch_saving)} "
                       f"({frac(launch_saving):.0%} of the window)"),
                detail=(f"{n_direct} kernels are launched one by one; between consecutive launches the host spends a "
                        f"median {float(host_per_kernel_ns) / 1e3:.1f} µs (framework, Python, the launch call itself: "
                        f"{float(call_ns or 0) / 1e3:.1f} µs median, {_ms(float(call_total_ns or 0))} in all), longer "
                        f"than the {float(kernel_ns) / 1e3:.1f} µs the median kernel runs, so the device drains its "
                        f"queue and waits: short host-wait gaps (< 1 ms) {frac(short_host_wait):.0%} of the window, "
                        f"launch gaps {frac(between):.0%}. " + graph_advice + " The saving counts only idle no other "
                        "cause explains, and only gaps a graph replay removes." + trim_note),
                evidence={**evidence, "host_time_per_kernel_ns": host_per_kernel_ns, "median_kernel_ns": kernel_ns,
                          "median_launch_call_ns": call_ns, "direct_kernels": n_direct},
                saving_ns=int(launch_saving),
                saving_fraction=frac(launch_saving),
            ))
        rest = long_host_wait if launch_bound and sev is not None else host_wait
        if frac(rest) >= WARNING_FRACTION:
            sev = run_share_severity(frac(rest))
            assert sev is not None
            res.findings.append(Finding(
                severity=sev,
                title=f"device waits for the host {frac(rest):.0%} of the window ({_ms(rest)}): host work between launches",
                detail=("In these gaps the work that ends the gap had not been submitted yet, and no DataLoader, "
                        "compile, synchronising call or compiled region explains them: host work between launches "
                        + ("(the optimizer's per-parameter loop, DDP bucketing and buffer broadcasts, Python): "
                           "a fused/foreach optimizer, fewer and larger DDP buckets, broadcast_buffers=False where "
                           "buffers do not change, and prefetching the next batch overlap it with the device "
                           if workload == "training" else
                           "(scheduling, sampling, input preparation, Python): overlap it with the device "
                           "(asynchronous scheduling, prepare the next step's inputs while this one runs) ")
                        + ("— the run already replays graphs, so the gaps are between replays." if graph_frac >= GRAPH_MAJORITY
                           else "— gaps over 1 ms are host work, not launch cost: graphs alone will not remove them."
                           if long_host_wait > 0 else "or capture the step in a graph.")
                        + trim_note),
                evidence=evidence,
                saving_ns=int(rest),
                saving_fraction=frac(rest),
            ))

        unexplained = by_kind.get("unexplained", 0)
        host_api = con.execute("SELECT count(*) FROM runtime_calls_in_scope WHERE run_id = $run", p).fetchall()[0][0]
        if frac(unexplained) >= UNEXPLAINED_MIN_FRACTION:
            top = max((c for c in causes if c[0] == "unexplained"), key=lambda c: int(c[4]))
            res.findings.append(Finding(
                severity="warning" if frac(busy) < 0.5 else "info",
                title=(f"device idle {frac(unexplained):.0%} of the window with no host cause in the trace "
                       f"(unexplained; busy {frac(busy):.0%}, longest gap {_ms(int(top[4]))})"),
                detail=(f"{_ms(unexplained)} of idle in {int(sum(int(c[2]) for c in causes if c[0] == 'unexplained'))} gaps "
                        "that no host span in the trace explains. "
                        + (_ADVICE["unexplained"] if host_api else
                           "The trace has no host API calls (a kernel-only capture), so it cannot say what the host "
                           "was doing: capture the HIP/CUDA runtime API and host annotations too (rocprofv3 "
                           "--hip-trace / --sys-trace, the PyTorch profiler's CPU activities) to find the cause.")
                        + trim_note),
                evidence=evidence,
            ))

        startup = by_kind.get("startup", 0)
        note = ""
        if frac(startup) >= WARM_UP_WINDOW_FRACTION:  # a warm-up capture: verdicts describe start-up
            note = (f" (This window is {frac(startup):.0%} one-time start-up, so it shows warm-up, not the steady "
                    "state: the severity is capped at info. Capture after warm-up to judge this.)")
        elif not steps[0] and n_rows < MICRO_BENCHMARK_ROWS and workload == "inference":
            note = (f" (A micro-benchmark or test snippet: {n_rows} device rows and no step markers, so the gaps "
                    "between launches are its harness's dispatch loop, not a serving step's: the severity is "
                    "capped at info.)")
        if note:
            for f in res.findings:
                if not f.title.startswith("one-time start-up") and f.severity != "info":
                    f.severity = "info"
                    f.detail += note
        return res

    @staticmethod
    def _metrics(v: dict[str, Any]) -> list[Metric]:
        spec: list[tuple[str, str, Better]] = [
            ("device_busy_fraction", "fraction", "higher"),
            ("idle_host_wait_fraction", "fraction", "lower"),
            ("idle_between_kernels_fraction", "fraction", "lower"),
            ("idle_other_fraction", "fraction", "lower"),
            ("idle_data_loading_fraction", "fraction", "lower"),
            ("idle_compile_fraction", "fraction", "lower"),
            ("idle_sync_fraction", "fraction", "lower"),
            ("idle_startup_fraction", "fraction", "lower"),
            ("idle_compiled_region_fraction", "fraction", "lower"),
            ("idle_graph_capture_fraction", "fraction", "lower"),
            ("idle_unexplained_fraction", "fraction", "lower"),
            ("idle_trimmed_ms", "ms", "lower"),
            ("kernels_per_step", "count", "lower"),
            ("step_device_time", "ms", "lower"),
            ("median_launch_delay_us", "us", "higher"),  # a deep launch queue: the host runs ahead
            ("median_launch_call_us", "us", "lower"),
            ("median_direct_kernel_us", "us", "higher"),
            ("host_time_per_kernel_us", "us", "lower"),
            ("graph_launched_kernel_fraction", "fraction", "higher"),
        ]
        return [Metric(n, None if v.get(n) is None else float(v[n]), u, b) for n, u, b in spec]


def _turns(con: duckdb.DuckDBPyConnection, p: dict[str, Any]) -> tuple[int, int, int, str | None]:
    """(gaps, their ns, ns of those under LAUNCH_GAP_MAX_NS, the synchronize call most of them open
    in): host-wait gaps that open while the host is blocked in a synchronize call on the same rank
    (the host waited for the device to drain and only then prepared the next launch)."""
    n, total, short, api = con.execute(
        f"""WITH s AS (SELECT rank, start_ns, end_ns, name FROM runtime_calls_in_scope
                      WHERE run_id = $run AND api_kind = 'sync'
                        AND regexp_matches(name, '(?i)(device|thread|ctx|stream|event)_?synchronize')),
            t AS (SELECT g.dur_ns, regexp_replace(s.name, '(_v[0-9]+)?(_ptsz|_spt)?$', '') AS api
                  FROM (SELECT * FROM idle_gaps WHERE run_id = $run AND cause_kind = 'host_wait') g
                  ASOF JOIN s ON s.rank = g.rank AND s.start_ns <= g.start_ns
                  WHERE g.start_ns <= s.end_ns)
            SELECT count(*), coalesce(sum(dur_ns), 0),
                   coalesce(sum(dur_ns) FILTER (WHERE dur_ns < {LAUNCH_GAP_MAX_NS}), 0),
                   -- the call most gaps open in (ties: by name, so the title is the same every time)
                   (SELECT api FROM t GROUP BY api ORDER BY count(*) DESC, api LIMIT 1)
            FROM t""", p).fetchall()[0]
    return int(n), int(total), int(short), api


def _turns_finding(n_turns: int, turns_ns: int, host_wait: int, api: str | None, window: int,
                   evidence: dict[str, Any], trim_note: str) -> Finding:
    """The finding for host-wait gaps that open inside a synchronize call (:func:`_turns`)."""
    return Finding(
        severity=run_share_severity(turns_ns / window) or "info",
        title=(f"host and device take turns: {n_turns:,} idle gaps open while the host waits in {api}, "
               f"{turns_ns / window:.0%} of the window ({_ms(turns_ns)})"),
        detail=(f"{n_turns:,} of the device's host-wait gaps ({_ms(turns_ns)} of {_ms(host_wait)}) begin while the "
                f"host is blocked in {api}: the host waits for the device to drain, and only then prepares and "
                "launches the next work, so the device idles for the whole host-side time of every step (the launch "
                "cadence is not the cause: without the synchronize the host would run ahead and the device would "
                "not wait). Synchronize once per step or per result the host needs, not after every launch (check "
                "launch errors with cudaGetLastError, time with events); in PyTorch look for .item(), .cpu() or "
                "torch.cuda.synchronize() in the loop." + trim_note),
        evidence={**evidence, "turn_gaps": n_turns, "turn_gap_ns": turns_ns, "sync_api": api},
        saving_ns=turns_ns,
        saving_fraction=turns_ns / window,
    )


def _graph_advice(is_xla: bool, workload: str | None) -> str:
    """How to remove per-launch host cost, for the run's framework and workload."""
    if is_xla:
        return ("Jit the whole step (one XLA executable instead of many small dispatches) and enable XLA "
                "command buffers (--xla_gpu_enable_command_buffer) so the step replays as a graph.")
    if workload == "training":
        return ("Capture the training step in a CUDA/HIP graph (torch.compile mode='reduce-overhead', "
                "torch.cuda.graphs), use fused/foreach optimizers, or raise the batch per step so each "
                "kernel runs longer than its launch.")
    return ("Capture the step in a CUDA/HIP graph (vLLM/SGLang without enforce-eager, with cuda-graph "
            "batch sizes covering this batch; torch.compile mode='reduce-overhead'), or fuse small kernels.")
