"""wave_stalls: which kernels spend their time stalled, ranked by stall-weighted time.

Inputs (views): ``kernels`` (time per kernel name; NVIDIA Kineto ``est_occupancy_pct``,
``warps_per_cu``, ``shared_mem_bytes``; TPU op ``hlo_category`` and ``device_dur_ns``),
``counters`` (AMD rocprofv3 ``--pmc`` values, Σ over hardware instances), ``devices`` (AMD CUs,
XCDs, wave slots per CU; NVIDIA ``shared_mem_per_block_bytes``), ``ranks`` (the profiled command,
PC samples that were not stored), and ``device_spans`` for the TPU ``XLA TraceMe`` line
(category ``device_traceme``).

Math (per kernel name; "time" = Σ ``dur_ns`` of its ``kernels`` rows, TPU ``device_dur_ns``):

* AMD, per counted dispatch (one row per rank, pass, dispatch), then per kernel as a ratio of
  means over the counted dispatches (so counters collected in different passes still pair up):
  dependency wait = mean ``SQ_WAIT_ANY`` ÷ mean ``SQ_WAVE_CYCLES``; issue wait =
  ``SQ_WAIT_INST_ANY`` ÷ ``SQ_WAVE_CYCLES``; active = ``SQ_ACTIVE_INST_ANY`` ÷ ``SQ_WAVE_CYCLES``
  (all quad-cycle counts, so the ×4 cancels). Occupancy (fraction of the wave slots) =
  rocprofv3's own ``OccupancyPercent`` ÷ 100, averaged weighted by ``GRBM_GUI_ACTIVE``; without it
  ``4·SQ_WAVE_CYCLES ÷ (GRBM_GUI_ACTIVE ÷ XCDs) ÷ (CUs · wave slots per CU)`` (the SDK's
  ``OccupancyPercent`` with ``GRBM_GUI_ACTIVE`` per XCD; the store sums it over the XCDs).
  Busy fractions: ``MemUnitBusy`` and ``WriteUnitStalled`` ÷ 100 (GRBM-weighted) and
  ``GRBM_EA_BUSY ÷ GRBM_GUI_ACTIVE``. ``SQ_BUSY_CYCLES``/``SQ_INST_CYCLES_VALU`` are sums over an
  unknown number of SQ instances and are not turned into fractions.
* NVIDIA Kineto: occupancy = time-weighted ``est. achieved occupancy %`` ÷ 100. Kineto's ``warps
  per SM`` is grid × block ÷ 32 ÷ SMs, the warps *launched* per SM (hundreds to thousands), not
  resident ones (an SM holds ≤ 64): it is reported as ``launched_warps_per_sm``, and
  ``resident_warps_per_sm`` caps it per launch at the SM's warp slots (``max_threads_per_cu ÷
  warp_size``; NULL when the device row does not say). A 0 % estimate for a kernel whose shared
  memory per block exceeds the device's default per-block limit is Kineto's occupancy calculator
  failing to place a block (it ignores opt-in dynamic shared memory), not a measurement: such rows
  count as unknown. XLA on ROCm (XPlane) writes occupancy 0 for "not computed": every 0 of an AMD
  or XPlane capture counts as unknown too.
* kernels whose low occupancy (and stalls) are their design — ``device_work.by_design``, the SQL
  library's ``by_design_low_occupancy``: collectives, attention/flash, copies, persistent, GEMV,
  split-K/stream-K kernels — are left out of the ranking and of every run metric's denominator
  (GPU runs); the evidence says how much time that is and why (:data:`BY_DESIGN_WHY`).
* stall fraction of a kernel = min(1, dependency wait + issue wait) when the wave counters exist
  (basis ``wave_wait``), else 1 − occupancy (basis ``occupancy``, a proxy: idle wave/warp slots);
  stall-weighted time = time × stall fraction; kernels are ranked by it.
* TPU: DMA waits = time of the ``copy-done``/``recv-done``/``send-done`` ops (stall fraction 1,
  the core waits for the transfer); sync waits = ``barrier-cores`` + ``dependency-wait`` spans of
  the device's ``XLA TraceMe`` line, as a share of the device's op window (first op start to last
  op end).
* run metrics are time-weighted over the (not by-design) kernels that have the quantity.
* AMD PC samples (view ``pc_samples``; rocprofv3 ``--pc-sampling-method stochastic|host_trap``):
  per kernel, the fraction of its samples in each state: ``ISSUED`` (``wave_issued``) or the
  stall reason of a wave that did not issue (``WAITCNT``, ``ALU_DEPENDENCY``,
  ``ARBITER_WIN_EX_STALL``, …; rocprofiler-sdk ``pc_sampling.h``). Stalled fraction = 1 − issued
  share; kernels are ranked by time × stalled fraction; run metrics weight each kernel's fractions
  by its time. A capture without a kernel trace (no kernel has a time) pools the samples instead
  (each counts once; kernels ranked by stalled samples). Host-trap samples carry no issue state or
  reason: their histogram is over instruction mnemonics (the ``s_waitcnt`` share is a memory-wait
  proxy). A sample is one wave's state at one instant, so the fractions are of sampled wave time.

Thresholds: see the module constants (fractions 0..1; shares of kernel time). The ranking finding
is ``critical``/``warning`` from the stall-weighted time fraction when it rests on wave counters;
an occupancy-only ranking is at most a ``warning`` (low mean occupancy). Under
``MIN_STALLED_NS`` (0.1 ms) of stall-weighted time there is no finding (a one-block 2 µs kernel
is not an occupancy problem). Either is capped by how
much of the run is at stake, the stall-weighted time ÷ the run's device window time (Σ
``run_window.window_ns``): no finding under 1 %, at most info under 5 %, warning under 20 %
(:func:`~tracekit.analysis.base.run_share_severity`). A pooled PC-sample finding (no
kernel trace) is info. AMD runs get the metric ``stall_counters_present`` (1 when all of
:data:`STALL_COUNTERS` were collected, else 0); an ``info`` finding with the exact one-pass
``rocprofv3`` line only when the run has some counters but not that set (the user tried), with
advice fitted to the device family (:func:`amd_family`: no stochastic PC sampling or MI300 claims
for RDNA such as gfx1151); a run without any counter gets the metric only, and ``tracekit
analyze`` prints the hint once per invocation (:func:`stall_counter_hint`). No saving is
estimated: stalled time is not removable as such. CPU-only runs (``runs.vendor = 'cpu'``) get
neither findings nor metrics.
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb

from tracekit.analysis.base import (
    Analyzer,
    AnalyzerResult,
    Finding,
    Metric,
    Severity,
    run_share_severity,
    run_window_ns,
)
from tracekit.analysis.hardware import identify
from tracekit.formatting import duration_ns
from tracekit.names import short_kernel_name

STALL_WARNING_FRACTION = 0.50  # stall-weighted share of counted kernel time (wave counters)
STALL_CRITICAL_FRACTION = 0.75  # same
DEPENDENCY_WAIT_HIGH = 0.60  # fraction of wave cycles waiting on dependencies (s_waitcnt, memory)
ISSUE_WAIT_HIGH = 0.20  # fraction of wave cycles unable to issue (pipe back-pressure)
LOW_OCCUPANCY = 0.25  # fraction of the wave/warp slots of the CUs/SMs
MIN_STALLED_NS = 100_000  # ns of stall-weighted time below which nothing is worth a finding (a 2 µs kernel)
MIN_COUNTED_DISPATCH_SHARE = 0.10  # counter ratios from fewer dispatches than this share: info only
DMA_WAIT_WARNING_FRACTION = 0.20  # TPU: DMA-wait op time ÷ op time
DMA_WAIT_CRITICAL_FRACTION = 0.50  # same
SYNC_WAIT_WARNING_FRACTION = 0.05  # TPU: barrier + dependency-wait time ÷ the device's op window
TOP_N = 10  # kernels listed in the evidence
_SEVERITY_RANK: list[Severity] = ["info", "warning", "critical"]
DEFAULT_SHARED_MEM_PER_BLOCK_BYTES = 49152  # CUDA default per-block limit without opt-in (48 KiB)

#: The one-pass counter set for wave stalls on AMD: 5 SQ counters (≤ 8 SQ slots) and 1 GRBM
#: counter (≤ 2 GRBM slots) per pass (rocprof-compute ``perfmon_config``).
STALL_COUNTERS = ("SQ_WAVES", "SQ_WAVE_CYCLES", "SQ_WAIT_ANY", "SQ_WAIT_INST_ANY", "SQ_ACTIVE_INST_ANY",
                  "GRBM_GUI_ACTIVE")
TPU_DMA_WAIT_CATEGORIES = ("copy-done", "recv-done", "send-done")
TPU_SYNC_WAITS = ("barrier-cores", "dependency-wait")


#: What a wave that did not issue was waiting for (rocprofiler-sdk ``pc_sampling.h``), and what to do.
PC_STALL_MEANING = {
    "WAITCNT": "waits in s_waitcnt for memory (vmcnt) or LDS/scalar (lgkmcnt) results: memory latency or "
               "bandwidth bound; keep more loads in flight or reuse data",
    "ALU_DEPENDENCY": "waits for a previous ALU result: a dependency chain; interleave independent work",
    "ARBITER_WIN_EX_STALL": "was picked but pushed back by a busy execution pipe (MFMA/VALU saturated): "
                            "bound by that pipe",
    "ARBITER_NOT_WIN": "lost issue arbitration to other waves on the SIMD",
    "BARRIER_WAIT": "waits at s_barrier: workgroup imbalance or frequent synchronization",
    "NO_INSTRUCTION_AVAILABLE": "had no instruction ready: instruction-cache misses or branches",
    "INTERNAL_INSTRUCTION": "executes an internal instruction",
    "OTHER_WAIT": "waits for something else (e.g. an XNACK)",
    "SLEEP_WAIT": "sleeps (s_sleep)",
    "NONE": "did not issue, without a reason",
}
#: rocprofv3 options that collect stochastic PC samples (MI300 and later; MI200: host_trap, time)
PC_SAMPLING_OPTIONS = ("--pc-sampling-beta-enabled --pc-sampling-method stochastic --pc-sampling-unit cycles "
                       "--pc-sampling-interval 1048576 --kernel-trace")
#: host-trap PC samples (MI200 and later): instructions, no stall reasons; the interval is in µs
PC_SAMPLING_HOST_TRAP_OPTIONS = ("--pc-sampling-beta-enabled --pc-sampling-method host_trap "
                                 "--pc-sampling-unit time --pc-sampling-interval 1 --kernel-trace")


def rocprofv3_command(command: str | None = None, counters: tuple[str, ...] = STALL_COUNTERS) -> str:
    """The rocprofv3 line that collects ``counters`` in one pass with a kernel trace."""
    return (f"rocprofv3 --kernel-trace --pmc {' '.join(counters)} --output-format rocpd "
            f"-d rocprof_out -o %pid% -- {command or '<your command>'}")


class WaveStalls(Analyzer, name="wave_stalls"):
    summary = "kernels ranked by stall-weighted time: AMD wave-wait counters, occupancy, TPU DMA and barrier waits"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        vendor = con.execute("SELECT vendor, format FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not vendor or vendor[0][0] == "cpu":
            return AnalyzerResult()  # CPU-only capture: no waves, warps or TPU cores to stall
        amd, fmt = vendor[0][0] == "amd", vendor[0][1]
        is_tpu = bool(con.execute(
            "SELECT count(*) FROM devices WHERE run_id = ? AND vendor = 'google'", [run_id]
        ).fetchall()[0][0])
        present = {r[0] for r in con.execute(
            "SELECT DISTINCT counter FROM counters WHERE run_id = ?", [run_id]).fetchall()}
        has_counters = bool(present)
        res = AnalyzerResult()
        if is_tpu:
            rows = self._tpu_kernels(con, run_id)
        elif has_counters:
            rows = self._amd_kernels(con, run_id)
        else:
            # XLA on ROCm writes occupancy 0 for "not computed" (XPlane and AMD rows): unknown
            rows = self._occupancy_kernels(con, run_id, zero_is_unknown=amd or fmt == "xplane")
        by_design: list[dict[str, Any]] = []
        if not is_tpu:  # TPU DMA waits are ranked as such; the by-design rule is about GPU occupancy
            _mark_by_design(con, run_id, rows)
            by_design = [r for r in rows if r["by_design"]]
            rows = [r for r in rows if not r["by_design"]]
        total_ns = sum(r["time_ns"] for r in rows)
        res.metrics = self._metrics(rows, total_ns)
        ranked = sorted((r for r in rows if r["stall_fraction"] is not None),
                        key=lambda r: (-r["stall_weighted_ns"], r["kernel"]))
        if ranked and any(r["stall_weighted_ns"] > 0 for r in ranked):
            ranking = self._ranking_finding(ranked, rows, total_ns, is_tpu, has_counters, by_design,
                                            run_window_ns(con, run_id))
            if ranking is not None:
                res.findings.append(ranking)
        if is_tpu:
            sync = self._tpu_sync(con, run_id)
            if sync is not None:
                res.metrics.append(Metric("sync_wait_fraction", sync[0], "fraction", "lower"))
                if sync[1] is not None:
                    res.findings.append(sync[1])
        elif amd:
            missing = [c for c in STALL_COUNTERS if c not in present]
            res.metrics.append(Metric("stall_counters_present", 0.0 if missing else 1.0, "flag", "higher"))
            # one line per run, only when the user collected counters but not the wave-stall set; a
            # capture with no counters at all gets the metric only (the CLI prints the hint once)
            if has_counters and missing:
                res.findings.append(self._missing_counters(con, run_id, rows, present, missing))
        pc_finding, pc_metrics = self._pc_samples(con, run_id, amd)
        res.metrics += pc_metrics
        if pc_finding is not None:
            res.findings.append(pc_finding)
        return res

    # ------------------------------------------------------------------------------------------
    # PC samples

    @staticmethod
    def _pc_samples(
        con: duckdb.DuckDBPyConnection, run_id: str, amd: bool
    ) -> tuple[Finding | None, list[Metric]]:
        """Per-kernel stall-reason histograms from the ``pc_samples`` view (module docstring)."""
        # a cheap existence test on the table first (the view joins every dispatch): the histogram
        # query groups every kernel of the run by name (0.6 s on a 1M-kernel run), wasted on the
        # usual run without PC samples
        has_samples = con.execute("SELECT 1 FROM pc_sample_rows WHERE run_id = ? LIMIT 1", [run_id]).fetchall()
        rows = [] if not has_samples else con.execute(
            """WITH s AS (
                 SELECT coalesce(kernel_name, 'dispatch ' || coalesce(CAST(dispatch_id AS VARCHAR), '?')) AS kernel,
                        method,
                        CASE WHEN method <> 'stochastic' THEN split_part(trim(coalesce(instruction, '')), ' ', 1)
                             WHEN wave_issued THEN 'ISSUED' ELSE coalesce(stall_reason, 'NONE') END AS bucket
                 FROM pc_samples WHERE run_id = ?),
               t AS (SELECT name AS kernel, sum(dur_ns) AS time_ns FROM kernels
                     WHERE run_id = ? AND category = 'kernel' GROUP BY name)
               SELECT s.method, s.kernel, s.bucket, count(*), any_value(coalesce(t.time_ns, 0))
               FROM s LEFT JOIN t USING (kernel) GROUP BY ALL ORDER BY ALL""",
            [run_id, run_id],
        ).fetchall()
        if not rows:
            if not amd:
                return None, []
            return None, [Metric("pc_samples", 0, "count", "higher"),
                          Metric("pc_stalled_sample_fraction", None, "fraction", "lower"),
                          Metric("pc_waitcnt_sample_fraction", None, "fraction", "lower")]
        per: dict[tuple[str, str], dict[str, Any]] = {}
        for method, kernel, bucket, n, t in rows:
            k = per.setdefault((method, kernel), {"kernel": kernel, "method": method, "time_ns": int(t),
                                                  "samples": 0, "counts": {}})
            k["samples"] += int(n)
            k["counts"][bucket] = k["counts"].get(bucket, 0) + int(n)
        kernels = []
        for k in per.values():
            k["fractions"] = {b: c / k["samples"] for b, c in sorted(k["counts"].items(), key=lambda x: (-x[1], x[0]))}
            if k["method"] == "stochastic":
                k["stalled_fraction"] = 1 - k["fractions"].get("ISSUED", 0.0)
                k["stall_weighted_ns"] = round(k["time_ns"] * k["stalled_fraction"])
                reasons = [b for b in k["fractions"] if b != "ISSUED"]
                k["top_reason"] = reasons[0] if reasons else None
            else:
                k["waitcnt_fraction"] = sum(f for b, f in k["fractions"].items() if b.startswith("s_waitcnt"))
            kernels.append(k)
        stochastic = sorted((k for k in kernels if k["method"] == "stochastic"),
                            key=lambda k: (-k["stall_weighted_ns"], -k["samples"], k["kernel"]))
        host_trap = sorted((k for k in kernels if k["method"] != "stochastic"),
                           key=lambda k: (-k["time_ns"] * k["waitcnt_fraction"], -k["samples"], k["kernel"]))
        timed = [k for k in stochastic if k["time_ns"] > 0]
        # kernel time weights the run's fractions; a capture without a kernel trace (no kernel has a
        # time) pools its samples instead, each sample counting once
        by_samples = bool(stochastic) and not timed
        if by_samples:
            timed = stochastic
        weight = "samples" if by_samples else "time_ns"
        total_t = sum(k[weight] for k in timed)

        def weighted(value: Any) -> float | None:
            return sum(k[weight] * value(k) for k in timed) / total_t if total_t else None

        stalled = weighted(lambda k: k["stalled_fraction"])
        reasons = sorted({b for k in timed for b in k["fractions"] if b != "ISSUED"})
        by_reason = {r: weighted(lambda k, r=r: k["fractions"].get(r, 0.0)) for r in reasons}
        metrics = [Metric("pc_samples", float(sum(k["samples"] for k in kernels)), "count", "higher"),
                   Metric("pc_stalled_sample_fraction", stalled, "fraction", "lower"),
                   Metric("pc_waitcnt_sample_fraction", by_reason.get("WAITCNT", 0.0) if timed else None,
                          "fraction", "lower")]
        evidence: dict[str, Any] = {
            "samples": {m: sum(k["samples"] for k in kernels if k["method"] == m)
                        for m in sorted({k["method"] for k in kernels})},
            "stalled_sample_fraction": stalled,
            "weighting": ("samples (no kernel trace: no kernel has a time)" if by_samples else "kernel time")
            if stochastic else None,
            "reason_fractions": dict(sorted(by_reason.items(), key=lambda x: -(x[1] or 0))),
            "kernels": [_pc_row(k) for k in stochastic[:TOP_N]],
            "host_trap_kernels": [_pc_row(k) for k in host_trap[:TOP_N]],
            "thresholds": {"warning": STALL_WARNING_FRACTION, "critical": STALL_CRITICAL_FRACTION},
        }
        severity: Severity = "info"
        if stochastic and stalled is not None:
            if stalled >= STALL_CRITICAL_FRACTION:
                severity = "critical"
            elif stalled >= STALL_WARNING_FRACTION:
                severity = "warning"
            if by_samples:  # no time to weight by: the kernel with the most stalled samples leads, and
                # with no time base nothing says how much of the run is at stake: at most info
                severity = "info"
                stochastic.sort(
                    key=lambda k: (k["counts"].get("ISSUED", 0) - k["samples"], -k["samples"], k["kernel"]))
                evidence["kernels"] = [_pc_row(k) for k in stochastic[:TOP_N]]
            lead = stochastic[0]
            top = max(by_reason, key=lambda r: by_reason[r] or 0.0) if by_reason else None
            lead_text = (
                f"{lead['samples']} samples, stalled {lead['stalled_fraction']:.0%}" if by_samples
                else f"{duration_ns(lead['stall_weighted_ns'])} stall-weighted of "
                     f"{duration_ns(lead['time_ns'])}")
            title = (f"PC samples: waves stalled in {stalled:.0%} of samples, "
                     + ("pooled over kernels (no kernel trace)" if by_samples else "time-weighted")
                     + (f" (most often {top}, {by_reason[top]:.0%})" if top else "")
                     + f"; top: {short_kernel_name(lead['kernel'])} ({lead_text})")
            lines = []
            for k in stochastic[:3]:
                hist = ", ".join(f"{b} {f:.0%}" for b, f in list(k["fractions"].items())[:4])
                meaning = PC_STALL_MEANING.get(k["top_reason"] or "", "")
                lines.append(f"{short_kernel_name(k['kernel'])}: {k['samples']} samples, stalled {k['stalled_fraction']:.0%} "
                             f"({hist})" + (f"; top stall {k['top_reason']}: a wave that {meaning}" if meaning else "")
                             + ".")
            detail = " ".join(lines) + (
                f" From {evidence['samples'].get('stochastic', 0)} stochastic PC samples over {len(stochastic)} "
                "kernels; a sample is one wave's state at one instant, so the fractions are of sampled wave time.")
        else:
            lead = host_trap[0]
            title = (f"PC samples (host trap, no stall reasons): {short_kernel_name(lead['kernel'])} spends "
                     f"{lead['waitcnt_fraction']:.0%} of its samples in s_waitcnt")
            detail = ("Host-trap samples record the instruction each sampled wave was at, not why it waited. "
                      + " ".join(f"{short_kernel_name(k['kernel'])}: " + ", ".join(
                          f"{b} {f:.0%}" for b, f in list(k["fractions"].items())[:4]) + "." for k in host_trap[:3])
                      + " Stall reasons need stochastic sampling: "
                      + pc_sampling_advice(amd_family(con, run_id)))
        return Finding(severity=severity, title=title, detail=detail, evidence=evidence), metrics

    # ------------------------------------------------------------------------------------------
    # per-kernel tables: one dict per kernel name

    @staticmethod
    def _amd_kernels(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
        consts = WaveStalls._amd_device_constants(con, run_id)
        con_rows = [(d, c[0], c[1], c[2]) for d, c in consts.items()]
        dev_values = ", ".join("(?, ?, ?, ?)" for _ in con_rows) or "(NULL, NULL, NULL, NULL)"
        params: list[Any] = [x for r in con_rows for x in r]
        rows = con.execute(
            f"""WITH dev(device, cus, xcc, slots) AS (VALUES {dev_values}),
               d AS (  -- one row per counted dispatch and pass
                 SELECT rank, pass, dispatch_id, any_value(device) AS device,
                        any_value(kernel_name) AS kernel,
                        sum(value) FILTER (WHERE counter = 'SQ_WAVE_CYCLES') AS wave_cycles,
                        sum(value) FILTER (WHERE counter = 'SQ_WAIT_ANY') AS wait_any,
                        sum(value) FILTER (WHERE counter = 'SQ_WAIT_INST_ANY') AS wait_inst,
                        sum(value) FILTER (WHERE counter = 'SQ_ACTIVE_INST_ANY') AS active_inst,
                        sum(value) FILTER (WHERE counter = 'SQ_WAVES') AS waves,
                        sum(value) FILTER (WHERE counter = 'GRBM_GUI_ACTIVE') AS gui,
                        sum(value) FILTER (WHERE counter = 'GRBM_EA_BUSY') AS ea_busy,
                        sum(value) FILTER (WHERE counter = 'OccupancyPercent') AS occ_pct,
                        sum(value) FILTER (WHERE counter = 'MemUnitBusy') AS mem_busy_pct,
                        sum(value) FILTER (WHERE counter = 'WriteUnitStalled') AS write_stall_pct
                 FROM counters WHERE run_id = ? GROUP BY rank, pass, dispatch_id),
               c AS (
                 SELECT kernel, count(DISTINCT (rank, dispatch_id)) AS n_counted,
                        avg(wait_any) / nullif(avg(wave_cycles), 0) AS dep_wait,
                        avg(wait_inst) / nullif(avg(wave_cycles), 0) AS issue_wait,
                        avg(active_inst) / nullif(avg(wave_cycles), 0) AS active,
                        coalesce(
                          sum(occ_pct * gui) / nullif(sum(gui) FILTER (WHERE occ_pct IS NOT NULL), 0),
                          avg(occ_pct)) / 100 AS occ_tool,
                        4 * avg(wave_cycles) * any_value(dev.xcc)
                          / nullif(avg(gui) * any_value(dev.cus) * any_value(dev.slots), 0) AS occ_sq,
                        coalesce(
                          sum(mem_busy_pct * gui) / nullif(sum(gui) FILTER (WHERE mem_busy_pct IS NOT NULL), 0),
                          avg(mem_busy_pct)) / 100 AS mem_unit_busy,
                        coalesce(
                          sum(write_stall_pct * gui) / nullif(sum(gui) FILTER (WHERE write_stall_pct IS NOT NULL), 0),
                          avg(write_stall_pct)) / 100 AS write_unit_stalled,
                        avg(ea_busy) / nullif(avg(gui), 0) AS ea_busy,
                        avg(waves) AS waves_per_dispatch
                 FROM d LEFT JOIN dev USING (device) GROUP BY kernel),
               t AS (
                 SELECT name AS kernel, count(*) AS n, sum(dur_ns) AS time_ns
                 FROM kernels WHERE run_id = ? AND category = 'kernel' GROUP BY name)
               SELECT kernel, coalesce(t.n, 0), coalesce(t.time_ns, 0), coalesce(c.n_counted, 0),
                      c.dep_wait, c.issue_wait, c.active, coalesce(c.occ_tool, c.occ_sq),
                      CASE WHEN c.occ_tool IS NOT NULL THEN 'OccupancyPercent'
                           WHEN c.occ_sq IS NOT NULL THEN 'SQ_WAVE_CYCLES' END,
                      c.mem_unit_busy, c.write_unit_stalled, c.ea_busy, c.waves_per_dispatch
               FROM t FULL JOIN c USING (kernel)""",
            params + [run_id, run_id],
        ).fetchall()
        out = []
        for (kernel, n, time_ns, n_counted, dep, issue, active, occ, occ_source, mem_busy, write_stall,
             ea_busy, waves) in rows:
            r: dict[str, Any] = {
                "kernel": kernel, "dispatches": int(n), "time_ns": int(time_ns),
                "counted_dispatches": int(n_counted), "dependency_wait": dep, "issue_wait": issue,
                "active": active, "occupancy": occ, "occupancy_source": occ_source,
                "mem_unit_busy": mem_busy, "write_unit_stalled": write_stall, "ea_busy": ea_busy,
                "waves_per_dispatch": waves,
            }
            out.append(_with_stall(r))
        return out

    @staticmethod
    def _amd_device_constants(
        con: duckdb.DuckDBPyConnection, run_id: str
    ) -> dict[int, tuple[int | None, int | None, int | None]]:
        """(CUs, XCDs, wave slots per CU) per device index: the devices row, else the catalog."""
        cols = [d[0] for d in con.execute("SELECT * FROM devices LIMIT 0").description]
        out: dict[int, tuple[int | None, int | None, int | None]] = {}
        for row in con.execute("SELECT * FROM devices WHERE run_id = ? ORDER BY rank", [run_id]).fetchall():
            rec = dict(zip(cols, row))
            if rec["device"] in out:
                continue
            cus, xcc, slots = rec.get("compute_units"), rec.get("xcc_count"), rec.get("max_waves_per_cu")
            if cus is None or xcc is None or slots is None:
                spec = identify(rec)
                if spec is not None:
                    cus = cus if cus is not None else spec.compute_units
                    xcc = xcc if xcc is not None else (spec.xcc_count or 1)
                    slots = slots if slots is not None else spec.max_warps_per_cu
            out[int(rec["device"])] = (cus, xcc, slots)
        return out

    @staticmethod
    def _occupancy_kernels(
        con: duckdb.DuckDBPyConnection, run_id: str, zero_is_unknown: bool = False
    ) -> list[dict[str, Any]]:
        """Per kernel: the time-weighted occupancy estimate of the trace (Kineto ``est. achieved
        occupancy %``, XPlane's occupancy stat), launched and resident warps per SM. A 0 % that is
        a failed calculation is unknown (module docstring): Kineto with more shared memory per block
        than the default limit, and every 0 of an XPlane or AMD capture (``zero_is_unknown``)."""
        rows = con.execute(
            """WITH k AS (
                 SELECT k.name, k.dur_ns, k.warps_per_cu, k.est_occupancy_pct,
                        -- least() skips NULLs: no warp limit known → no resident estimate
                        CASE WHEN d.max_threads_per_cu > 0 AND d.warp_size > 0
                             THEN least(k.warps_per_cu, d.max_threads_per_cu / d.warp_size)
                        END AS resident_warps,
                        coalesce(k.est_occupancy_pct = 0
                                 AND k.shared_mem_bytes > coalesce(d.shared_mem_per_block_bytes, ?), false)
                          AS unplaceable,
                        coalesce(k.est_occupancy_pct = 0 AND ?, false) AS not_computed
                 FROM kernels k LEFT JOIN devices d USING (run_id, rank, device)
                 WHERE k.run_id = ? AND k.category = 'kernel'),
               o AS (SELECT *, CASE WHEN unplaceable OR not_computed THEN NULL ELSE est_occupancy_pct END
                                 AS occ_pct
                     FROM k)
               SELECT name, count(*), sum(dur_ns),
                      sum(dur_ns * occ_pct) / nullif(sum(dur_ns) FILTER (WHERE occ_pct IS NOT NULL), 0) / 100,
                      sum(dur_ns * warps_per_cu) / nullif(sum(dur_ns) FILTER (WHERE warps_per_cu IS NOT NULL), 0),
                      sum(dur_ns * resident_warps)
                        / nullif(sum(dur_ns) FILTER (WHERE resident_warps IS NOT NULL), 0),
                      count(*) FILTER (WHERE unplaceable),
                      count(*) FILTER (WHERE not_computed AND NOT unplaceable)
               FROM o GROUP BY name ORDER BY name""",  # the metrics sum these rows in Python: in one order
            [DEFAULT_SHARED_MEM_PER_BLOCK_BYTES, zero_is_unknown, run_id],
        ).fetchall()
        return [
            _with_stall({
                "kernel": name, "dispatches": int(n), "time_ns": int(t), "occupancy": occ,
                "occupancy_source": "est. achieved occupancy %" if occ is not None else None,
                "launched_warps_per_sm": warps, "resident_warps_per_sm": resident,
                "occupancy_unknown_dispatches": int(unplaceable),
                "occupancy_not_computed_dispatches": int(zero),
            })
            for name, n, t, occ, warps, resident, unplaceable, zero in rows
        ]

    @staticmethod
    def _tpu_kernels(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
        rows = con.execute(
            """SELECT name, any_value(hlo_category), count(*), sum(coalesce(device_dur_ns, dur_ns)),
                      bool_or(hlo_category IN (SELECT unnest(?::VARCHAR[]))
                              OR regexp_matches(name, '^%?(copy|recv|send)-done'))
               FROM kernels WHERE run_id = ? AND category = 'kernel' GROUP BY name""",
            [list(TPU_DMA_WAIT_CATEGORIES), run_id],
        ).fetchall()
        return [
            _with_stall({"kernel": name, "hlo_category": cat, "dispatches": int(n), "time_ns": int(t),
                         "dma_wait": bool(dma), "stall_fraction": 1.0 if dma else 0.0,
                         "stall_basis": "dma_wait"})
            for name, cat, n, t, dma in rows
        ]

    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _metrics(rows: list[dict[str, Any]], total_ns: int) -> list[Metric]:
        def weighted(key: str) -> float | None:
            have = [r for r in rows if r.get(key) is not None and r["time_ns"] > 0]
            t = sum(r["time_ns"] for r in have)
            return sum(r["time_ns"] * float(r[key]) for r in have) / t if t else None

        stalled_ns = sum(r["time_ns"] for r in rows if r["stall_fraction"] is not None)
        metrics = [
            Metric("stall_weighted_time_fraction", weighted("stall_fraction"), "fraction", "lower"),
            Metric("stall_coverage", stalled_ns / total_ns if total_ns > 0 else None, "fraction", "higher"),
            Metric("dependency_wait_fraction", weighted("dependency_wait"), "fraction", "lower"),
            Metric("issue_wait_fraction", weighted("issue_wait"), "fraction", "lower"),
            Metric("mean_occupancy", weighted("occupancy"), "fraction", "higher"),
        ]
        if any(r.get("launched_warps_per_sm") is not None for r in rows):
            # Kineto's "warps per SM" is the grid's warps ÷ SMs (launched, not resident: it reads in the
            # thousands); the resident estimate caps it per launch at the SM's warp slots
            for name in ("launched_warps_per_sm", "resident_warps_per_sm"):
                metrics.append(Metric(name, weighted(name), "count", "higher"))
        if any("dma_wait" in r for r in rows):
            metrics.append(Metric("dma_wait_fraction", weighted("stall_fraction"), "fraction", "lower"))
        return metrics

    @staticmethod
    def _ranking_finding(
        ranked: list[dict[str, Any]], rows: list[dict[str, Any]], total_ns: int, is_tpu: bool,
        has_counters: bool, by_design: list[dict[str, Any]], window_ns: int | None,
    ) -> Finding | None:
        counted_ns = sum(r["time_ns"] for r in ranked)
        stalled_ns = sum(r["stall_weighted_ns"] for r in ranked)
        frac = stalled_ns / counted_ns if counted_ns else 0.0
        top = [r for r in ranked[:TOP_N]]
        bases = {r["stall_basis"] for r in ranked}
        severity: Severity = "info"
        if is_tpu:
            what = f"{frac:.0%} of TPU op time waits for DMA transfers"
            if frac >= DMA_WAIT_CRITICAL_FRACTION:
                severity = "critical"
            elif frac >= DMA_WAIT_WARNING_FRACTION:
                severity = "warning"
        elif "wave_wait" in bases:
            what = f"Kernels stalled {frac:.0%} of their time (wave cycles waiting on dependencies or issue)"
            if frac >= STALL_CRITICAL_FRACTION:
                severity = "critical"
            elif frac >= STALL_WARNING_FRACTION:
                severity = "warning"
        else:
            what = f"Kernels left {frac:.0%} of wave/warp slots idle, time-weighted (occupancy)"
            if 1 - frac < LOW_OCCUPANCY:
                severity = "warning"
        # how much of the run is at stake: the stall-weighted time ÷ the run's device window time;
        # under 1 % there is no finding, and the severity is at most what that share allows
        share = stalled_ns / window_ns if window_ns else None
        cap = run_share_severity(share)
        if cap is None or stalled_ns < MIN_STALLED_NS:
            return None
        severity = min(severity, cap, key=_SEVERITY_RANK.index)
        lead = top[0]
        title = (f"{what}; top: {short_kernel_name(lead['kernel'])} "
                 f"({duration_ns(lead['stall_weighted_ns'])} stall-weighted of {duration_ns(lead['time_ns'])})")
        lines = [f"{short_kernel_name(r['kernel'])}: {_diagnosis(r, is_tpu)}." for r in top[:3]]
        coverage = counted_ns / total_ns if total_ns else None
        cov_text = (f" The ranking covers {coverage:.0%} of kernel time (kernels with a stall measure)."
                    if coverage is not None and coverage < 0.999 else "")
        counted = sum(r.get("counted_dispatches", 0) for r in ranked)
        dispatched = sum(int(r.get("dispatches") or 0) for r in ranked)
        if has_counters and not is_tpu:
            cov_text += (f" Counter ratios come from {counted} counted dispatches (all passes) and are applied "
                         "to each kernel's whole time.")
            if dispatched and counted < MIN_COUNTED_DISPATCH_SHARE * dispatched:
                # ratios stretched from a handful of dispatches over all of them: too thin to rank by
                severity = "info"
                cov_text += (f" Only {counted} of the ranked kernels' {dispatched} dispatches were counted "
                             f"({counted / dispatched:.0%}): the ranking is a hint, capped at info; collect the "
                             "counters on every dispatch (rocprofv3 --pmc without a dispatch filter) to judge it.")
        evidence: dict[str, Any] = {
            "stall_weighted_ns": round(stalled_ns),
            "counted_kernel_time_ns": counted_ns,
            "kernel_time_ns": total_ns,
            "stall_weighted_time_fraction": frac,
            "run_window_ns": window_ns,
            "stall_weighted_run_share": share,
            "basis": sorted(bases),
            "thresholds": {
                "dependency_wait_high": DEPENDENCY_WAIT_HIGH, "issue_wait_high": ISSUE_WAIT_HIGH,
                "low_occupancy": LOW_OCCUPANCY,
            },
            "kernels": [_evidence_row(r) for r in top],
        }
        if not is_tpu and not has_counters:
            # kernels whose Kineto estimate is a failed calculation (0 % with opt-in shared memory)
            unknown = sorted((r for r in rows if r.get("occupancy_unknown_dispatches")), key=lambda r: -r["time_ns"])
            evidence["occupancy_unknown_dispatches"] = sum(r["occupancy_unknown_dispatches"] for r in unknown)
            evidence["occupancy_unknown_time_ns"] = sum(r["time_ns"] for r in unknown)
            evidence["occupancy_unknown_kernels"] = [r["kernel"] for r in unknown][:TOP_N]
            if unknown:
                cov_text += (f" {evidence['occupancy_unknown_dispatches']} launches report 0 % occupancy with more "
                             "shared memory per block than the default limit: Kineto could not estimate them "
                             "(left out).")
            zero = sum(r.get("occupancy_not_computed_dispatches", 0) for r in rows)
            evidence["occupancy_not_computed_dispatches"] = zero
            if zero:
                cov_text += (f" {zero} launches state occupancy 0, which this format writes when it did not "
                             "compute one (left out as unknown).")
        if not is_tpu:
            cov_text += _by_design_text(by_design, total_ns)
            evidence.update(_by_design_evidence(by_design, total_ns))
        return Finding(
            severity=severity,
            title=title,
            detail=" ".join(lines) + cov_text,
            evidence=evidence,
        )

    @staticmethod
    def _missing_counters(
        con: duckdb.DuckDBPyConnection, run_id: str, rows: list[dict[str, Any]], present: set[str],
        missing: list[str],
    ) -> Finding:
        """The one line for an AMD run that has counters but not the wave-stall set, with advice
        that fits the device (:func:`amd_family`)."""
        meta = con.execute(
            "SELECT trace_metadata->>'$.command' FROM ranks WHERE run_id = ? ORDER BY rank", [run_id]
        ).fetchall()
        command = next((m[0] for m in meta if m[0]), None)
        pc_samples = int(con.execute("SELECT count(*) FROM pc_samples WHERE run_id = ?", [run_id]).fetchall()[0][0])
        family = amd_family(con, run_id)
        line = rocprofv3_command(command)
        supported = sorted({k for r in rows for k in ("occupancy", "mem_unit_busy", "write_unit_stalled", "ea_busy")
                            if r.get(k) is not None})
        have = f" What the collected counters support: {', '.join(supported)}." if supported else ""
        pc = ""
        if not pc_samples:
            pc = " The capture has no PC samples either, so there are no per-instruction stall reasons; " + (
                pc_sampling_advice(family))
        return Finding(
            severity="info",
            title=f"Wave-stall counters missing: {', '.join(missing)}",
            detail=(f"Dependency-wait and issue-wait fractions need {', '.join(STALL_COUNTERS)} collected "
                    f"together.{have}{pc} {counter_advice(family)}: {line}"),
            evidence={"missing": missing, "present": sorted(present), "rocprofv3": line,
                      "pc_samples": pc_samples, "device_family": family},
        )

    @staticmethod
    def _tpu_sync(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[float | None, Finding | None] | None:
        # The device "XLA TraceMe" line: device_spans of category device_traceme.
        rows = con.execute(
            """WITH s AS (
                 SELECT rank, device, sum(dur_ns) FILTER (WHERE name = 'barrier-cores') AS barrier_ns,
                        sum(dur_ns) FILTER (WHERE name = 'dependency-wait') AS dep_ns,
                        count(*) AS n
                 FROM device_spans WHERE run_id = ? AND category = 'device_traceme'
                   AND name IN (SELECT unnest(?::VARCHAR[]))
                 GROUP BY ALL),
               w AS (
                 SELECT rank, device, max(end_ns) - min(start_ns) AS window_ns
                 FROM kernels WHERE run_id = ? AND category = 'kernel' GROUP BY ALL)
               SELECT s.rank, s.device, coalesce(s.barrier_ns, 0), coalesce(s.dep_ns, 0), s.n, w.window_ns
               FROM s LEFT JOIN w USING (rank, device) ORDER BY s.rank, s.device""",
            [run_id, list(TPU_SYNC_WAITS), run_id],
        ).fetchall()
        if not rows:
            return None
        per_device: list[dict[str, Any]] = [
            {"rank": int(r), "device": int(d), "barrier_cores_ns": int(b), "dependency_wait_ns": int(dep),
             "events": int(n), "window_ns": int(w) if w else None,
             "sync_wait_fraction": (int(b) + int(dep)) / int(w) if w else None}
            for r, d, b, dep, n, w in rows
        ]
        windows = sum(p["window_ns"] or 0 for p in per_device)
        waits = sum(p["barrier_cores_ns"] + p["dependency_wait_ns"] for p in per_device)
        frac = waits / windows if windows else None
        worst = max(per_device, key=lambda p: p["sync_wait_fraction"] or 0.0)
        wf = worst["sync_wait_fraction"] or 0.0
        severity: Severity = "warning" if wf >= SYNC_WAIT_WARNING_FRACTION else "info"
        finding = Finding(
            severity=severity,
            title=(f"TPU cores waited {duration_ns(waits)} at barriers and dependencies; worst TPU:{worst['device']} "
                   f"{duration_ns(worst['barrier_cores_ns'] + worst['dependency_wait_ns'])} ({wf:.2%} of its op window)"),
            detail=("barrier-cores spans are cores waiting for each other (collectives, cross-core syncs); "
                    "dependency-wait spans wait on an outstanding operation. Uneven barrier time across devices "
                    "points at a straggler: compare the devices' work before the barrier."),
            evidence={"devices": per_device, "sync_wait_fraction": frac,
                      "threshold_warning": SYNC_WAIT_WARNING_FRACTION},
        )
        return frac, finding


#: Why a kernel's low occupancy or stalls are its design, not a problem (``by_design_low_occupancy``).
BY_DESIGN_WHY = ("collectives wait on their peers; flash/fused attention and persistent kernels keep one "
                 "block per SM by design; GEMVs, skinny and split-K GEMMs are memory-bound; copies move "
                 "bytes")


def _mark_by_design(con: duckdb.DuckDBPyConnection, run_id: str, rows: list[dict[str, Any]]) -> None:
    """Sets ``kernel_class`` and ``by_design`` on each kernel row from the SQL library's
    ``device_work`` (one definition: the ``by_design_low_occupancy`` macro of classes.sql); a name
    with no device row (counted dispatches only) is classified by the same macros."""
    known = {name: (cls, bool(bd)) for name, cls, bd in con.execute(
        """SELECT name, any_value(kernel_class), bool_or(by_design) FROM device_work
           WHERE run_id = ? AND category = 'kernel' GROUP BY name""", [run_id]).fetchall()}
    rest = [r["kernel"] for r in rows if r["kernel"] not in known and r["kernel"] is not None]
    if rest:
        known.update({name: (cls, bool(bd)) for name, cls, bd in con.execute(
            """SELECT n, c, by_design_low_occupancy(n, c)
               FROM (SELECT n, kernel_class(n, 'kernel', NULL) AS c FROM unnest(?::VARCHAR[]) AS t(n))""",
            [rest]).fetchall()})
    for r in rows:
        r["kernel_class"], r["by_design"] = known.get(r["kernel"], (None, False))


def _by_design_evidence(by_design: list[dict[str, Any]], judged_ns: int) -> dict[str, Any]:
    t = sum(r["time_ns"] for r in by_design)
    return {
        "by_design_time_ns": t,
        "by_design_time_fraction": t / (t + judged_ns) if t + judged_ns else None,
        "by_design_kernels": [
            {"kernel": r["kernel"], "kernel_class": r["kernel_class"], "time_ns": r["time_ns"]}
            for r in sorted(by_design, key=lambda r: (-r["time_ns"], r["kernel"]))[:TOP_N]],
        "by_design_rule": "by_design_low_occupancy(name, kernel_class): " + BY_DESIGN_WHY,
    }


def _by_design_text(by_design: list[dict[str, Any]], judged_ns: int) -> str:
    t = sum(r["time_ns"] for r in by_design)
    if not t:
        return ""
    lead = max(by_design, key=lambda r: (r["time_ns"], r["kernel"]))
    return (f" Left out: {duration_ns(t)} ({t / (t + judged_ns):.0%} of kernel time) in {len(by_design)} "
            f"kernels whose low occupancy and stalls are by design, led by {short_kernel_name(lead['kernel'])} "
            f"({lead['kernel_class']}): {BY_DESIGN_WHY}.")


def amd_family(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The AMD GPU family of a run, for advice that fits the device: ``"cdna3"`` (gfx940–942,
    gfx950: MI300/MI325/MI350/MI355), ``"cdna2"`` (gfx90a: MI200), ``"cdna1"`` (gfx908), ``"cdna"``
    (gfx9, generation not stated), ``"rdna"`` (gfx10–12: Radeon, Ryzen AI/Strix Halo APUs such as
    gfx1151), or None when the trace does not say (a rocprofv3 CSV without agent info)."""
    rows = con.execute(
        """SELECT arch, compute_major, compute_minor, name, device_type FROM devices
           WHERE run_id = ? AND vendor = 'amd'""", [run_id]).fetchall()
    for arch, major, minor, name, dtype in rows:
        g = arch.lower() if isinstance(arch, str) else ""
        g = g.removeprefix("gfx") if g.startswith("gfx") else ""
        if g.startswith(("94", "95")):
            return "cdna3"
        if g == "90a":
            return "cdna2"
        if g == "908":
            return "cdna1"
        if len(g) == 4 and g[:2] in ("10", "11", "12"):
            return "rdna"
        text = " ".join(t for t in (name, dtype) if isinstance(t, str))
        if re.search(r"\bMI3\d\d", text) or (major == 9 and minor is not None and int(minor) >= 4):
            return "cdna3"
        if re.search(r"\bMI2\d\d", text):
            return "cdna2"
        if major == 9:  # gfx9 is CDNA (old ROCm names an MI250 "AMD Radeon Graphics"); 9.0: gfx908/gfx90a
            return "cdna"
        if (major is not None and int(major) >= 10) or re.search(
                r"radeon\s+(rx\s*|pro\s*)?\d|ryzen|strix", text, re.IGNORECASE):
            return "rdna"
    return None


def pc_sampling_advice(family: str | None) -> str:
    """How to collect PC samples on this family (rocprofv3 supports PC sampling on Instinct GPUs
    only: host trap on MI200 and later, stochastic with stall reasons on MI300 and later)."""
    if family == "cdna3":
        return f"rocprofv3 {PC_SAMPLING_OPTIONS} collects them."
    if family == "cdna2":
        return ("this GPU (MI200, gfx90a) has host-trap PC sampling only, which records instructions but no "
                f"stall reasons: rocprofv3 {PC_SAMPLING_HOST_TRAP_OPTIONS}.")
    if family == "rdna":
        return "rocprofv3 has no PC sampling on RDNA GPUs (Instinct only): the counters are the way in here."
    if family == "cdna1":
        return "rocprofv3 has no PC sampling on MI100 (gfx908; it starts with MI200): use the counters."
    return (f"on an Instinct MI300 or later, rocprofv3 {PC_SAMPLING_OPTIONS} collects them (MI200: host trap "
            "only, without stall reasons; RDNA GPUs: no PC sampling).")


def counter_advice(family: str | None) -> str:
    """How to check the one-pass counter line on this family."""
    if family == "rdna":
        return ("RDNA GPUs expose a different counter set than Instinct: confirm these names with "
                "`rocprofv3 -L` and that they fit one pass with `rocprofv3-avail pmc-check`, then collect")
    if family is None:
        return ("Collect them in one pass (5 SQ + 1 GRBM counters on Instinct; on an RDNA GPU confirm the "
                "names with `rocprofv3 -L`; check with `rocprofv3-avail pmc-check`)")
    return "Collect them in one pass (5 SQ + 1 GRBM counters; check with `rocprofv3-avail pmc-check`)"


def stall_counter_hint(n_runs: int) -> str:
    """The one-line hint ``tracekit analyze`` prints once when AMD runs have no counters at all."""
    runs = "1 AMD run has" if n_runs == 1 else f"{n_runs} AMD runs have"
    return (f"hint: {runs} no wave-stall counters (wave_stalls metric stall_counters_present = 0). "
            f"Collect them in one pass (5 SQ + 1 GRBM counters on Instinct; check with `rocprofv3-avail "
            f"pmc-check`): {rocprofv3_command()}")


def _with_stall(r: dict[str, Any]) -> dict[str, Any]:
    """Adds ``stall_fraction``, ``stall_basis`` and ``stall_weighted_ns`` to a kernel row."""
    if "stall_fraction" not in r:
        dep, issue, occ = r.get("dependency_wait"), r.get("issue_wait"), r.get("occupancy")
        if dep is not None or issue is not None:
            r["stall_fraction"] = min(1.0, float(dep or 0.0) + float(issue or 0.0))
            r["stall_basis"] = "wave_wait"
        elif occ is not None:
            r["stall_fraction"] = 1.0 - min(1.0, float(occ))
            r["stall_basis"] = "occupancy"
        else:
            r["stall_fraction"] = None
            r["stall_basis"] = None
    sf = r["stall_fraction"]
    r["stall_weighted_ns"] = r["time_ns"] * sf if sf is not None else 0.0
    return r


def _diagnosis(r: dict[str, Any], is_tpu: bool) -> str:
    if is_tpu:
        if r.get("dma_wait"):
            return (f"{duration_ns(r['time_ns'])} waiting for a DMA transfer ({r['hlo_category']}): overlap the "
                    "copy with compute (start it earlier) or keep the data in HBM instead of offloading it")
        return f"{duration_ns(r['time_ns'])}"
    parts = []
    dep, issue, occ = r.get("dependency_wait"), r.get("issue_wait"), r.get("occupancy")
    if dep is not None:
        parts.append(f"dependency wait {dep:.0%} of wave cycles")
    if issue is not None:
        parts.append(f"issue wait {issue:.0%}")
    if occ is not None:
        parts.append(f"occupancy {occ:.0%}")
    if r.get("launched_warps_per_sm") is not None:
        parts.append(f"{r['launched_warps_per_sm']:.1f} warps launched per SM")
    advice = []
    if dep is not None and dep >= DEPENDENCY_WAIT_HIGH:
        advice.append("waves mostly wait on memory or s_waitcnt dependencies: memory-latency or bandwidth bound "
                      "(compare its bytes/s with the device's memory bandwidth; more resident waves or "
                      "fusion to reuse data)")
    if issue is not None and issue >= ISSUE_WAIT_HIGH:
        advice.append("waves often cannot issue: execution-pipe back-pressure or arbitration")
    if occ is not None and occ < LOW_OCCUPANCY:
        advice.append("few waves/warps resident: a small grid or register/LDS limits; give each launch more "
                      "work or use fewer registers")
    text = ", ".join(parts) if parts else "no stall measure"
    return text + (" — " + "; ".join(advice) if advice else "")


def _evidence_row(r: dict[str, Any]) -> dict[str, Any]:
    keys = ("kernel", "dispatches", "counted_dispatches", "time_ns", "stall_basis", "stall_fraction",
            "stall_weighted_ns", "dependency_wait", "issue_wait", "active", "occupancy", "occupancy_source",
            "launched_warps_per_sm", "resident_warps_per_sm", "occupancy_unknown_dispatches",
            "occupancy_not_computed_dispatches", "kernel_class", "mem_unit_busy", "write_unit_stalled",
            "ea_busy", "waves_per_dispatch", "hlo_category", "dma_wait")
    out = {k: r[k] for k in keys if k in r}
    out["stall_weighted_ns"] = round(out["stall_weighted_ns"])
    clean: dict[str, Any] = json.loads(json.dumps(out, default=float))
    return clean


def _pc_row(k: dict[str, Any]) -> dict[str, Any]:
    keys = ("kernel", "method", "samples", "time_ns", "stalled_fraction", "stall_weighted_ns", "top_reason",
            "waitcnt_fraction", "fractions")
    return {key: k[key] for key in keys if key in k}
