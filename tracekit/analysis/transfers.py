"""transfers: do copies between host and device (or between devices) take the device's time, and
how much of it with nothing else running — weights or activations moved every step (CPU offload),
pageable host memory, copies queued on the compute stream?

Inputs (views and library objects): ``device_work`` (device rows; a copy is a row of category
``memcpy``, memsets are device work like kernels), ``kernels`` (a copy's ``name``, ``kind``, ``bytes``,
``stream``), ``run_window`` (each device's window; Σ ``window_ns`` is the severity denominator).
Every sum is over the rows inside each device's run window.

Math, per run (one DuckDB query):

* direction of a copy, from its name or kind: ``HtoD`` (Kineto/nsys ``Memcpy HtoD``, rocprof
  ``…HOST_TO_DEVICE``, RPD ``CopyHostToDevice``), ``DtoH``, ``DtoD``, ``PtoP``, else ``other``;
  ``pageable`` when the name says the host side is pageable memory (``Pageable``, as CUPTI writes
  it), which the driver stages through a pinned bounce buffer (and the call blocks the host);
* ``copy_time_fraction`` = Σ copy ``dur_ns`` ÷ the device's busy time (|∪ of all device rows|);
* exposed copy time = the device's busy time (``run_window.busy_ns``: |∪ of all device rows|) −
  |∪ of the rows that are not copies|, per device: the
  time copies run with no kernel beside them, which is what removing or overlapping them could
  save at most; ``exposed_copy_fraction`` = Σ exposed ÷ Σ ``window_ns``;
* achieved bandwidth per direction = Σ bytes ÷ Σ ``dur_ns`` (GB/s = bytes per ns);
* repeated copies: per direction, the size (bytes) copied most often, how many times and for how
  long — the same large host-to-device size over and over is data moved every step (≥ 8 copies of
  ≥ 1 MiB holding half the direction's copy time).

Finding: when the exposed copy time is a share of the window that
:func:`~tracekit.analysis.base.run_share_severity` ranks (≥ 1 % info, ≥ 5 % warning, ≥ 20 %
critical) and at least ``MIN_EXPOSED_NS`` (100 µs). The title names the direction, bytes and
bandwidth of the dominant copies ("sizes not in the trace" when it records none); the advice
follows the evidence: the same size repeated (keep the tensor resident, or prefetch it on a side
stream), pageable host memory (pin it), host-device copies on the streams the kernels use (a
separate copy stream overlaps them), device-to-device copies (data moved within device memory:
avoid or fuse them). Saving = the exposed copy time (an
upper bound: a copy that is needed can at best be hidden behind compute). Metrics:
``copy_time_fraction``, ``exposed_copy_fraction``, ``htod_gbps``, ``dtoh_gbps``,
``pageable_copy_fraction`` (pageable copy time ÷ copy time); NULL without copies.

Units: ns for times, bytes, GB/s = 10⁹ B/s, fractions 0..1.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tracekit import formatting as fmt
from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding, Metric, run_share_severity

#: Below this much exposed copy time (ns) no finding: a capture of a few copies.
MIN_EXPOSED_NS = 100_000

_DIRECTION = """CASE
    WHEN regexp_matches(x, '(?i)(HtoD|host_?to_?device|Host-to-Device)') THEN 'HtoD'
    WHEN regexp_matches(x, '(?i)(DtoH|device_?to_?host|Device-to-Host)') THEN 'DtoH'
    WHEN regexp_matches(x, '(?i)(PtoP|peer)') THEN 'PtoP'
    WHEN regexp_matches(x, '(?i)(DtoD|device_?to_?device|Device-to-Device)') THEN 'DtoD'
    ELSE 'other' END"""

#: The run's device rows that are not copies, inside each device's window.
_WORK_ROWS = """
win AS (SELECT rank, device, window_start_ns AS ws, window_end_ns AS we FROM run_window WHERE run_id = $run),
rows AS (
  SELECT d.rank, d.device, d.start_ns, d.start_ns + d.dur_ns AS end_ns
  FROM device_work d JOIN win ON win.rank = d.rank AND win.device IS NOT DISTINCT FROM d.device
   AND d.start_ns BETWEEN win.ws AND win.we
  WHERE d.run_id = $run AND d.category <> 'memcpy')"""

# busy time (run_window: the union of every row) and exposed copy time = busy − the union of the
# rows that are not copies (islands: a row opens one when it starts after every earlier row ended)
_TOTALS = f"""
WITH {_WORK_ROWS},
work_u AS (SELECT rank, device, sum(island_end - start_ns) AS ns FROM (
    SELECT rank, device, start_ns, coalesce(lead(prev_end) OVER w, last_end) AS island_end FROM (
      SELECT rank, device, start_ns, max(end_ns) OVER b AS prev_end, max(end_ns) OVER a AS last_end FROM rows
      WINDOW b AS (PARTITION BY rank, device ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
             a AS (PARTITION BY rank, device ORDER BY start_ns, end_ns
                   ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
      QUALIFY prev_end IS NULL OR start_ns > prev_end)
    WINDOW w AS (PARTITION BY rank, device ORDER BY start_ns)) GROUP BY rank, device)
SELECT sum(w.busy_ns), sum(w.busy_ns - coalesce(u.ns, 0)), sum(w.window_ns)
FROM run_window w LEFT JOIN work_u u USING (rank, device) WHERE w.run_id = $run"""

_COPIES = f"""
WITH win AS (SELECT rank, device, window_start_ns AS ws, window_end_ns AS we FROM run_window WHERE run_id = $run),
named AS (
  SELECT k.rank, k.device, k.stream, k.dur_ns, k.bytes, coalesce(k.kind, '') || ' ' || k.name AS x
  FROM kernels k JOIN win ON win.rank = k.rank AND win.device IS NOT DISTINCT FROM k.device
   AND k.start_ns BETWEEN win.ws AND win.we
  WHERE k.run_id = $run AND k.category = 'memcpy'),
c AS (SELECT rank, device, stream, dur_ns, bytes, {_DIRECTION} AS direction, x ILIKE '%pageable%' AS pageable
      FROM named)
SELECT direction, pageable, count(*), sum(dur_ns), sum(bytes), count(bytes),
       -- the size copied most often (ties: the larger), its count and time
       arg_max(bytes, [n_same, bytes]) AS top_bytes, max(n_same) AS top_n, arg_max(t_same, [n_same, bytes]) AS top_ns,
       list(DISTINCT (rank, device, stream)) AS streams
FROM (SELECT *, count(*) OVER (PARTITION BY direction, pageable, bytes) AS n_same,
             sum(dur_ns) OVER (PARTITION BY direction, pageable, bytes) AS t_same FROM c)
GROUP BY ALL ORDER BY sum(dur_ns) DESC, direction, pageable"""


class Transfers(Analyzer, name="transfers"):
    summary = "host-device copies that take the device's time: exposed copy time, bandwidth, pageable memory"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        p = {"run": run_id}
        busy_ns, exposed_ns, window_ns = (int(x or 0) for x in con.execute(_TOTALS, p).fetchall()[0])
        groups = con.execute(_COPIES, p).fetchall()
        copy_ns = sum(int(g[3] or 0) for g in groups)
        if not groups or not copy_ns or not busy_ns:
            return AnalyzerResult(metrics=[Metric(n, None, u, "lower" if n != "htod_gbps" and n != "dtoh_gbps"
                                                  else "higher") for n, u in _METRICS])

        def gbps(direction: str) -> float | None:
            rows = [g for g in groups if g[0] == direction and g[5]]
            t, b = sum(int(g[3] or 0) for g in rows), sum(int(g[4] or 0) for g in rows)
            return b / t if t and b else None

        pageable_ns = sum(int(g[3] or 0) for g in groups if g[1])
        metrics = [
            Metric("copy_time_fraction", copy_ns / busy_ns, "fraction", "lower"),
            Metric("exposed_copy_fraction", exposed_ns / window_ns if window_ns else None, "fraction", "lower"),
            Metric("htod_gbps", gbps("HtoD"), "GB/s", "higher"),
            Metric("dtoh_gbps", gbps("DtoH"), "GB/s", "higher"),
            Metric("pageable_copy_fraction", pageable_ns / copy_ns, "fraction", "lower"),
        ]
        share = exposed_ns / window_ns if window_ns else None
        severity = run_share_severity(share)
        if severity is None or exposed_ns < MIN_EXPOSED_NS:
            return AnalyzerResult(metrics=metrics)
        kernel_streams = {tuple(r) for r in con.execute(
            """SELECT DISTINCT rank, device, stream FROM kernels WHERE run_id = ? AND category = 'kernel'""",
            [run_id]).fetchall()}
        return AnalyzerResult(findings=[self._finding(groups, copy_ns, busy_ns, exposed_ns, window_ns, severity,
                                                      pageable_ns, kernel_streams)], metrics=metrics)

    @staticmethod
    def _finding(groups: list[tuple[Any, ...]], copy_ns: int, busy_ns: int, exposed_ns: int, window_ns: int,
                 severity: Any, pageable_ns: int, kernel_streams: set[tuple[Any, ...]]) -> Finding:
        top = groups[0]
        direction, pageable, n, t_ns, nbytes, n_sized, top_bytes, top_n, top_ns, streams = top
        kind = f"{'pageable ' if pageable else ''}{direction}"
        bw = f", {fmt.value(nbytes / t_ns, 'GB/s')}" if nbytes and t_ns and n_sized == n else ""
        title = (f"copies take {fmt.percent(copy_ns / busy_ns)} of device busy time, "
                 f"{fmt.percent(exposed_ns / window_ns)} of the window with nothing else running: "
                 f"{n:,} {kind} copies, " + (f"{fmt.value(nbytes, 'bytes')}{bw}" if n_sized else "sizes not in the trace"))
        advice = []
        if direction == "HtoD" and top_n and top_n >= 8 and top_bytes and top_bytes >= 1 << 20 and top_ns >= 0.5 * t_ns:
            advice.append(f"the same {fmt.value(top_bytes, 'bytes')} host-to-device copy runs {top_n:,} times "
                          f"({fmt.duration_ns(top_ns)}): the same data is moved again and again (in a model server, "
                          "weights or activations offloaded to the CPU); keep it resident on the device if memory "
                          "allows, else prefetch the next one on a separate stream while the current work computes")
        if pageable_ns >= 0.2 * copy_ns:
            advice.append(f"{fmt.percent(pageable_ns / copy_ns)} of the copy time is pageable host memory, which the "
                          "driver stages through a pinned buffer at lower bandwidth while the calling thread waits: "
                          "pin it (pin_memory=True, cudaHostAlloc / hipHostMalloc)")
        shared = sum(1 for s in streams or [] if tuple(s) in kernel_streams)
        if direction == "DtoD":  # memory moved inside the device: another stream does not remove it
            advice.append("device-to-device copies move data within device memory (a .contiguous(), torch.cat, "
                          "a gradient bucket's flatten): avoid or fuse them; a separate stream would hide their "
                          "time but not their memory traffic")
        elif shared:
            advice.append(f"{shared} of the {len(streams)} streams these copies use also run kernels, so each copy "
                          "waits for the kernels before it and the kernels after it wait for the copy: issue copies "
                          "on their own stream (non_blocking=True from pinned memory) to overlap them with compute")
        if not advice:
            advice.append("overlap the copies with compute on a separate stream, or move the data once and keep it "
                          "on the device")
        detail = (f"Copies run {fmt.duration_ns(copy_ns)} of the device's {fmt.duration_ns(busy_ns)} busy "
                  f"time; {fmt.duration_ns(exposed_ns)} of it with no kernel running beside them, out of a "
                  f"{fmt.duration_ns(window_ns)} window (all devices). " + "; ".join(advice) + ".")
        evidence = {
            "copy_ns": copy_ns, "busy_ns": busy_ns, "exposed_copy_ns": exposed_ns, "window_ns": window_ns,
            "by_direction": [{"direction": g[0], "pageable": bool(g[1]), "copies": int(g[2]), "time_ns": int(g[3] or 0),
                              "bytes": int(g[4] or 0) if g[5] else None,
                              "gbps": (int(g[4]) / int(g[3])) if g[4] and g[3] and g[5] == g[2] else None,
                              "most_time_size_bytes": g[6], "most_time_size_copies": g[7]}
                             for g in groups[:6]],
        }
        return Finding(severity=severity, title=title, detail=detail, evidence=evidence, saving_ns=exposed_ns,
                       saving_fraction=exposed_ns / window_ns)


_METRICS = (("copy_time_fraction", "fraction"), ("exposed_copy_fraction", "fraction"), ("htod_gbps", "GB/s"),
            ("dtoh_gbps", "GB/s"), ("pageable_copy_fraction", "fraction"))
