"""communication: how much of the run is collective communication, how much of it compute does not
hide, what a collective costs on the host, and how fast the messages move on the interconnect.

Inputs (library views, ``tracekit/analysis/sql/communication.sql`` and ``classes.sql``):
``device_time_by_class`` (device time by kernel class; ``communication`` = NCCL/RCCL kernels,
symmetric-memory and custom all-reduce kernels, XLA collectives: ``categories.NAME_PATTERNS``),
``collectives`` (one row per collective kernel: collective, message size, bus bandwidth, overlap and
exposed time), ``run_window`` (each device's window), ``collective_ops`` (host ops that issue
collectives), ``devices`` + the hardware catalog (``interconnect_gbps``: per-direction NVLink /
Infinity Fabric peak), and ``ops`` / ``annotations`` / ``kernels`` for the training check that
picks the advice. ``collectives`` and ``run_window`` are read in one statement (materialized CTEs,
each view evaluated once) that yields, per device, exactly the numbers of the
``communication_by_device`` view.

Math (DuckDB, set-based; one window sort per view, ASOF joins for overlaps, no per-event Python):

* ``communication_time_fraction`` = Σ dur of communication rows ÷ Σ dur of all device rows
  (summed device time, concurrent streams both count: the split of ``device_time_by_class``).
* exposed communication, per (rank, device): the union of the collective kernels that start in the
  device's run window, minus its intersection with the union of every other device row (compute,
  copies, sets) of that device (``collectives.exposed_ns`` summed: each kernel is charged its part
  after the earlier-starting collectives have ended, less the compute overlapping that part, so no
  instant counts twice). ``exposed_communication_time_fraction`` = Σ exposed ÷ Σ
  ``run_window.window_ns`` over the run's devices: the share of the device window in which the
  device does nothing but communicate, what perfect overlap (or no communication) saves at most.
* bus bandwidth (NCCL-tests, doc/PERFORMANCE.md): algbw = S / t with S the message size (see the
  ``collectives`` view) and t the kernel time; busbw = algbw × 2(n−1)/n (all-reduce), × (n−1)/n
  (all-gather, reduce-scatter, all-to-all), × 1 (broadcast, reduce, send/recv).
  ``collective_busbw_gbps`` = Σ S·factor ÷ Σ t over the sized collectives (time-weighted, GB/s =
  10⁹ B/s); ``collective_busbw_peak_fraction`` = that ÷ ``interconnect_gbps`` of the device with the
  most collective time (GB/s per direction). Kernel time includes waiting for the slowest peer, so
  both are lower bounds of the link's speed while data moves. Collectives are judged against the
  interconnect, never HBM.
* host cost: ``collective_host_us_per_call`` (µs) = mean duration of the outermost collective host
  ops (``vllm::all_reduce``, ``c10d::allreduce_``, …) that name a collective.
* rank skew, when the run has several (rank, device) pairs with collectives:
  ``communication_rank_skew`` = (max − min) ÷ max of their collective time. Everyone leaves a
  synchronous collective together, so the rank with the *least* collective time is the one the
  others wait for.

Finding (at most one), severity from the exposed share of the device window (what a fix could
save): ``critical`` from ``EXPOSED_CRITICAL_FRACTION`` (0.20), ``warning`` from
``EXPOSED_WARNING_FRACTION`` (0.05); below that, ``info`` when communication is at least
``LARGE_COMMUNICATION_FRACTION`` (0.10) of device kernel time (large but hidden behind compute, or
small next to an idle device); nothing otherwise. The title names the collective kernel (and op)
that exposes the most time, and the share; saving = the exposed time. The detail gives busbw
against the interconnect peak (below ``LOW_BUSBW_FRACTION`` of it for messages of at least
``LARGE_MESSAGE_BYTES``: waiting, not moving data), the host cost per call against the kernel
time, rank skew from ``SKEW_NOTE_FRACTION`` (or, for one captured rank with at least
``WAITING_COMMUNICATION_FRACTION`` of its kernel time in collectives, that long collective time on
one rank is usually waiting for slower peers, not bandwidth) and advice for the workload and
collective (tensor-parallel all-reduce in inference; data-parallel, sharded or all-to-all
training). A run without device activity gets NULL metrics; one without collectives gets 0 for
the two fractions, NULL for the rest, and no finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding, Metric, Severity
from tracekit.analysis.hardware import identify
from tracekit.formatting import duration_ns
from tracekit.names import short_kernel_name

EXPOSED_WARNING_FRACTION = 0.05  # exposed communication ÷ device window
EXPOSED_CRITICAL_FRACTION = 0.20  # exposed communication ÷ device window
LARGE_COMMUNICATION_FRACTION = 0.10  # communication ÷ device kernel time, for the info finding
WAITING_COMMUNICATION_FRACTION = 0.50  # one rank with this share of kernel time in collectives: waiting
LOW_BUSBW_FRACTION = 0.10  # busbw below this share of the interconnect peak: not bandwidth-bound
LARGE_MESSAGE_BYTES = 1 << 20  # messages from 1 MiB are expected to approach the link bandwidth
SKEW_NOTE_FRACTION = 0.10  # rank skew worth naming in the detail
TOP_N = 5  # collectives / host ops listed in the evidence

# One pass over the run's collectives and run window (each view evaluated once, MATERIALIZED):
# per device the same numbers as the communication_by_device view, per (kernel, collective) the
# time, exposed time, message size and busbw, and the run's time-weighted busbw.
_ONE_PASS = """
WITH c AS MATERIALIZED (
  SELECT rank, device, name, collective, op_name, start_ns, dur_ns, exposed_ns, msg_bytes, bus_factor, group_size
  FROM collectives WHERE run_id = $run),
w AS MATERIALIZED (
  SELECT rank, device, window_start_ns, window_end_ns, window_ns FROM run_window WHERE run_id = $run),
cw AS (
  SELECT c.*, coalesce(c.start_ns BETWEEN w.window_start_ns AND w.window_end_ns, false) AS in_window
  FROM c LEFT JOIN w ON w.rank = c.rank AND w.device IS NOT DISTINCT FROM c.device),
dev AS (
  SELECT w.rank, w.device, w.window_ns, count(cw.start_ns) AS n,
         coalesce(sum(cw.dur_ns), 0) AS collective_ns, coalesce(sum(cw.exposed_ns), 0) AS exposed_ns
  FROM w LEFT JOIN cw ON cw.rank = w.rank AND cw.device IS NOT DISTINCT FROM w.device AND cw.in_window
  GROUP BY ALL),
nm AS (
  SELECT name, collective, mode(op_name) AS op_name, count(*) AS n, sum(dur_ns) AS time_ns,
         coalesce(sum(exposed_ns) FILTER (WHERE in_window), 0) AS exposed_ns,
         count(*) FILTER (WHERE msg_bytes IS NOT NULL AND bus_factor > 0) AS n_sized,
         avg(msg_bytes) AS avg_msg_bytes,
         sum(msg_bytes * bus_factor) FILTER (WHERE msg_bytes IS NOT NULL AND bus_factor > 0)
           / nullif(sum(dur_ns) FILTER (WHERE msg_bytes IS NOT NULL AND bus_factor > 0), 0) AS busbw_gbps,
         max(group_size) AS group_size
  FROM cw GROUP BY ALL)
SELECT (SELECT list(dev ORDER BY rank, device) FROM dev),
       (SELECT list(nm ORDER BY exposed_ns DESC, time_ns DESC) FROM nm),
       (SELECT sum(msg_bytes * bus_factor) / nullif(sum(dur_ns), 0) FROM cw
        WHERE msg_bytes IS NOT NULL AND bus_factor > 0)
"""


@dataclass
class _Coll:
    name: str
    collective: str | None
    op_name: str | None
    count: int
    time_ns: int
    exposed_ns: int
    n_sized: int
    avg_msg_bytes: float | None
    busbw_gbps: float | None
    group_size: int | None


class Communication(Analyzer, name="communication"):
    summary = "collective communication: share of device time, exposed (not overlapped) share, busbw vs interconnect"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        all_ns, comm_ns, n_comm = con.execute(
            """SELECT sum(time_ns), sum(time_ns) FILTER (WHERE kernel_class = 'communication'),
                      sum(n_rows) FILTER (WHERE kernel_class = 'communication')
               FROM device_time_by_class WHERE run_id = ?""",
            [run_id],
        ).fetchall()[0]
        if not all_ns:
            return AnalyzerResult(metrics=_metrics(None, None, None, None, None, None))
        if not n_comm:
            return AnalyzerResult(metrics=_metrics(0.0, 0.0, None, None, None, None))
        comm_ns = int(comm_ns or 0)
        comm_fraction = comm_ns / float(all_ns)

        devs, names, busbw = con.execute(_ONE_PASS, {"run": run_id}).fetchall()[0]
        per_device = [
            (d["rank"], d["device"], int(d["n"]), int(d["collective_ns"]), int(d["window_ns"] or 0), int(d["exposed_ns"]))
            for d in devs or []
        ]
        window_ns = sum(r[4] for r in per_device)
        exposed_ns = sum(r[5] for r in per_device)
        exposed_fraction = exposed_ns / window_ns if window_ns else None
        colls = [
            _Coll(name=n["name"], collective=n["collective"], op_name=n["op_name"], count=int(n["n"]),
                  time_ns=int(n["time_ns"]), exposed_ns=int(n["exposed_ns"]), n_sized=int(n["n_sized"]),
                  avg_msg_bytes=n["avg_msg_bytes"], busbw_gbps=n["busbw_gbps"], group_size=n["group_size"])
            for n in names or []
        ]
        host = con.execute(
            """SELECT name, count(*), sum(dur_ns), avg(dur_ns), mode(collective) FROM collective_ops
               WHERE run_id = ? AND outermost AND collective IS NOT NULL
               GROUP BY name ORDER BY sum(dur_ns) DESC""",
            [run_id],
        ).fetchall()
        host_calls = sum(int(h[1]) for h in host)
        host_us = sum(float(h[2]) for h in host) / host_calls / 1e3 if host_calls else None

        peak, device_name, peak_source = self._interconnect(con, run_id, per_device)
        peak_fraction = busbw / peak if busbw is not None and peak else None

        participants = [(int(r[0]), r[1], r[3]) for r in per_device if r[3]]
        skew = None
        if len(participants) >= 2:
            hi, lo = max(p[2] for p in participants), min(p[2] for p in participants)
            skew = (hi - lo) / hi if hi else None

        metrics = _metrics(comm_fraction, exposed_fraction, busbw, peak_fraction, host_us, skew)
        severity = _severity(comm_fraction, exposed_fraction)
        if severity is None:
            return AnalyzerResult(metrics=metrics)

        workload = "training" if _training(con, run_id) else "inference"
        top = colls[0] if colls else None
        evidence: dict[str, Any] = {
            "communication_time_ns": comm_ns,
            "device_kernel_time_ns": int(all_ns),
            "communication_time_fraction": comm_fraction,
            "exposed_ns": exposed_ns,
            "window_ns": window_ns,
            "exposed_fraction": exposed_fraction,
            "busbw_gbps": busbw,
            "interconnect_gbps": peak,
            "interconnect_source": peak_source,
            "device": device_name,
            "busbw_peak_fraction": peak_fraction,
            "host_us_per_call": host_us,
            "rank_skew": skew,
            "workload": workload,
            "collectives": [
                {"name": c.name, "collective": c.collective, "op": c.op_name, "count": c.count,
                 "time_ms": c.time_ns / 1e6, "exposed_ms": c.exposed_ns / 1e6, "sized": c.n_sized,
                 "avg_msg_bytes": c.avg_msg_bytes, "busbw_gbps": c.busbw_gbps, "group_size": c.group_size}
                for c in colls[:TOP_N]
            ],
            "host_ops": [
                {"name": h[0], "count": int(h[1]), "total_ms": float(h[2]) / 1e6, "mean_us": float(h[3]) / 1e3}
                for h in host[:TOP_N]
            ],
            "devices": [
                {"rank": int(r[0]), "device": r[1], "collectives": r[2], "collective_ms": r[3] / 1e6,
                 "window_ms": r[4] / 1e6, "exposed_ms": r[5] / 1e6}
                for r in per_device
            ],
        }
        label = _label(top)
        cm = con.execute("SELECT incomplete, note FROM run_completeness WHERE run_id = ?", [run_id]).fetchone()
        if cm is not None and cm[0]:
            # a sampled or cut trace: dropped compute looks like exposed communication
            return AnalyzerResult(findings=[Finding(
                severity="info",
                title=(f"communication {comm_fraction:.0%} of the device kernel time kept ({label}); exposure not "
                       "judged: incomplete trace"),
                detail=(f"{cm[1]}. The collective share of the kernels that were kept is {comm_fraction:.0%}, but "
                        "which collective time was overlapped cannot be told when compute kernels were dropped."),
                evidence={**evidence, "incomplete": cm[1]},
            )], metrics=metrics)
        if severity == "info":
            title = (f"communication {comm_fraction:.0%} of device kernel time ({label}), "
                     f"{(exposed_fraction or 0):.1%} of the device window exposed")
        else:
            title = (f"exposed communication {(exposed_fraction or 0):.0%} of the device window, "
                     f"most of it {label}")
        detail = " ".join(_detail(_Facts(
            comm_ns=comm_ns, comm_fraction=comm_fraction, exposed_ns=exposed_ns, exposed_fraction=exposed_fraction,
            window_ns=window_ns, colls=colls, host=host, host_us=host_us, peak=peak, device_name=device_name,
            participants=participants, skew=skew, workload=workload, severity=severity,
        )))
        finding = Finding(
            severity=severity, title=title, detail=detail, evidence=evidence,
            saving_ns=exposed_ns, saving_fraction=exposed_fraction,
        )
        return AnalyzerResult(findings=[finding], metrics=metrics)

    @staticmethod
    def _interconnect(
        con: duckdb.DuckDBPyConnection, run_id: str, per_device: list[tuple[Any, ...]]
    ) -> tuple[float | None, str | None, str | None]:
        """The per-direction interconnect peak of the device with the most collective time."""
        if not per_device:
            return None, None, None
        rank, device = max(per_device, key=lambda r: r[3])[:2]
        r = con.execute(
            "SELECT * FROM devices WHERE run_id = ? AND rank = ? AND device IS NOT DISTINCT FROM ?",
            [run_id, rank, device],
        )
        rows = r.fetchall()
        if not rows:  # the trace names its devices without indices: take the run's first
            r = con.execute("SELECT * FROM devices WHERE run_id = ? ORDER BY rank, device LIMIT 1", [run_id])
            rows = r.fetchall()
        if not rows:
            return None, None, None
        cols = [c[0] for c in r.description]
        row = dict(zip(cols, rows[0], strict=True))
        if row.get("vendor") == "cpu":
            return None, None, None
        spec = identify(row)
        name = spec.name if spec is not None else (row.get("name") or row.get("device_type"))
        if spec is None or not spec.interconnect_gbps:
            return None, name, None
        return spec.interconnect_gbps, name, spec.source("interconnect_gbps")


def _metrics(
    comm: float | None, exposed: float | None, busbw: float | None, peak_fraction: float | None,
    host_us: float | None, skew: float | None,
) -> list[Metric]:
    return [
        Metric("communication_time_fraction", comm, "fraction", "lower"),
        Metric("exposed_communication_time_fraction", exposed, "fraction", "lower"),
        Metric("collective_busbw_gbps", busbw, "GB/s", "higher"),
        Metric("collective_busbw_peak_fraction", peak_fraction, "fraction", "higher"),
        Metric("collective_host_us_per_call", host_us, "us", "lower"),
        Metric("communication_rank_skew", skew, "fraction", "lower"),
    ]


def _severity(comm_fraction: float, exposed_fraction: float | None) -> Severity | None:
    exposed = exposed_fraction or 0.0
    if exposed >= EXPOSED_CRITICAL_FRACTION:
        return "critical"
    if exposed >= EXPOSED_WARNING_FRACTION:
        return "warning"
    if comm_fraction >= LARGE_COMMUNICATION_FRACTION:
        return "info"
    return None


def _training(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Training when the run has backward or optimizer ops/annotations, or (without host ops) backward
    kernels: the ``run_workload`` view's training evidence, as two short EXISTS probes."""
    host, dev = con.execute(
        """SELECT
             EXISTS (SELECT 1 FROM ops WHERE run_id = $run AND (name LIKE 'autograd::engine::evaluate_function%'
                     OR name LIKE '%Backward%' OR name LIKE 'Optimizer.step#%')),
             EXISTS (SELECT 1 FROM annotations WHERE run_id = $run AND (name LIKE 'Optimizer.step#%'
                     OR name = '## backward ##'))
             OR (NOT EXISTS (SELECT 1 FROM ops WHERE run_id = $run)
                 AND (SELECT count(*) FROM (SELECT 1 FROM kernels WHERE run_id = $run
                      AND regexp_matches(lower(name), 'backward|_bwd|bwd_|wgrad|dgrad') LIMIT 10)) >= 10)""",
        {"run": run_id},
    ).fetchall()[0]
    return bool(host or dev)


def _label(top: _Coll | None) -> str:
    if top is None:
        return "collectives"
    kind = f"{top.collective}, " if top.collective else ""
    via = f" via {top.op_name}" if top.op_name and top.op_name != "record_param_comms" else ""
    return f"{short_kernel_name(top.name)} ({kind}{top.count}x){via}"


def _t(ns: float) -> str:
    """A duration for the detail text (:func:`tracekit.formatting.duration_ns`)."""
    return duration_ns(ns)


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


@dataclass(frozen=True)
class _Facts:
    """What the detail text of the communication finding states (times in ns)."""

    comm_ns: int
    comm_fraction: float
    exposed_ns: int
    exposed_fraction: float | None
    window_ns: int
    colls: list[_Coll]
    host: list[tuple[Any, ...]]
    host_us: float | None
    peak: float | None  # GB/s per direction
    device_name: str | None
    participants: list[tuple[int, Any, int]]
    skew: float | None
    workload: str
    severity: Severity


def _detail(f: _Facts) -> list[str]:
    out = [
        (f"Collective kernels take {_t(f.comm_ns)}, {f.comm_fraction:.1%} of device kernel time; "
         f"{_t(f.exposed_ns)} ({(f.exposed_fraction or 0):.1%} of the {_t(f.window_ns)} device "
         "window) runs with nothing else on the device.")
    ]
    if f.severity == "info" and f.exposed_fraction is not None and f.exposed_ns < 0.5 * f.comm_ns:
        out.append("Most of it is hidden behind compute on other streams, so it costs little wall time today.")
    elif f.severity == "info":
        out.append("It is exposed but small next to the device window (the device is mostly idle for other "
                   "reasons); it grows into the step time once those are fixed.")
    lines = (_bandwidth_line(f.colls, f.peak, f.device_name), _host_line(f.host, f.host_us, f.colls, f.window_ns),
             _skew_line(f.participants, f.skew, f.comm_fraction))
    out += [ln for ln in lines if ln]
    out.append(_advice(f.colls, f.workload))
    return out


def _bandwidth_line(colls: list[_Coll], peak: float | None, device_name: str | None) -> str | None:
    """Bus bandwidth of the longest sized collective against the interconnect's peak."""
    sized = [c for c in colls if c.busbw_gbps is not None and c.avg_msg_bytes]
    if not sized:
        return "The trace gives no message sizes for these collectives, so bus bandwidth is unknown." if colls else None
    c = max(sized, key=lambda c: c.time_ns)
    line = (f"{short_kernel_name(c.name)} moves {_mb(c.avg_msg_bytes or 0)} messages"
            f"{f' across {c.group_size} ranks' if c.group_size else ''} at {c.busbw_gbps:.1f} GB/s bus bandwidth")
    if not peak:
        return line + f" (no interconnect peak for {device_name or 'this device'} in the hardware catalog)."
    frac = (c.busbw_gbps or 0) / peak
    line += (f", {frac:.0%} of the {peak:g} GB/s per-direction interconnect peak of "
             f"{device_name or 'the device'}")
    if frac < LOW_BUSBW_FRACTION and (c.avg_msg_bytes or 0) >= LARGE_MESSAGE_BYTES:
        line += ("; far below the link for messages this large, so the kernel spends most of its time "
                 "waiting (for peers, or for the collective to be launched on every rank), not moving data")
    elif frac < LOW_BUSBW_FRACTION:
        line += "; small messages are latency-bound, fewer and larger ones (or a one-shot kernel) help"
    return line + "."


def _host_line(host: list[tuple[Any, ...]], host_us: float | None, colls: list[_Coll], window_ns: int) -> str | None:
    """The host cost of the most expensive collective call, against its kernel."""
    if not host or host_us is None:
        return None
    name, n, total, mean, kind = host[0]
    same = [c for c in colls if c.collective == kind]
    per_kernel = sum(c.time_ns for c in same) / sum(c.count for c in same) / 1e3 if same else None
    line = (f"On the host each {name} call takes {_t(float(mean))} ({int(n)} calls, "
            f"{_t(float(total))}, {float(total) / window_ns:.1%} of the window)" if window_ns else
            f"On the host each {name} call takes {_t(float(mean))}")
    if per_kernel is not None and float(mean) / 1e3 > 2 * per_kernel:
        line += (f", {float(mean) / 1e3 / per_kernel:.0f}x its {per_kernel:.0f} µs kernel: in a launch-bound "
                 "run this host time, not the link, is what the collective costs")
    return line + "."


def _skew_line(participants: list[tuple[int, Any, int]], skew: float | None, comm_fraction: float) -> str | None:
    """Rank skew when several ranks are in the trace; the caveat when only one is."""
    if len(participants) >= 2 and skew is not None and skew >= SKEW_NOTE_FRACTION:
        lo = min(participants, key=lambda p: p[2])
        hi = max(participants, key=lambda p: p[2])
        return (f"Rank skew {skew:.0%}: rank {lo[0]} spends {_t(lo[2])} in collectives against "
                f"{_t(hi[2])} on rank {hi[0]}; everyone leaves a collective together, so the others "
                f"wait for rank {lo[0]} (load imbalance, input pipeline or a slow device there).")
    if len(participants) < 2 and comm_fraction >= WAITING_COMMUNICATION_FRACTION:
        return ("Only one rank is in the trace: long collective time on one rank is often waiting for slower "
                "peers (skew from load imbalance, data loading or a straggler) rather than bandwidth; capture "
                "every rank to see which one the others wait for.")
    return None


def _advice(colls: list[_Coll], workload: str) -> str:
    """Advice for the collective that exposes the most time (the first one whose kind is known)."""
    kind = next((c.collective for c in colls if c.collective), None)
    if workload == "training" and kind in ("all_to_all", "send_recv"):
        return ("To fix (training all-to-all / point-to-point: MoE expert or embedding exchange, pipeline stages): "
                "overlap the exchange with independent compute by splitting the batch into chunks, balance tokens "
                "or ids across ranks, use a hierarchical all-to-all (NVLink / Infinity Fabric inside the node "
                "first), and give pipeline stages more micro-batches so send/recv leaves the critical path.")
    if workload == "training" and kind in ("all_gather", "reduce_scatter"):
        return ("To fix (sharded training, FSDP/ZeRO): prefetch the next unit's all-gather (forward and backward "
                "prefetch), overlap reduce-scatter with the rest of the backward pass, use larger wrapping units, "
                "shard only inside a node (hybrid sharding) and communicate parameters and gradients in bf16.")
    if workload == "training":
        return ("To fix (data-parallel training): overlap gradient all-reduce with the backward pass (DDP does it per "
                "bucket: tune bucket_cap_mb, avoid anything that syncs before backward ends), use fewer, larger "
                "buckets when messages are small, compress gradients (bf16/fp16 or PowerSGD communication hooks), "
                "or raise the per-rank batch so compute hides the communication.")
    if kind == "all_reduce":
        return ("To fix (tensor-parallel inference): fuse the all-reduce with the residual add + RMSNorm that "
                "follows it, use the custom one-shot/two-shot (symmetric-memory) all-reduce for small messages, "
                "capture decode in CUDA/HIP graphs so the per-call host cost disappears, or lower the TP degree "
                "(more replicas at TP 2-4) when messages are small and latency-bound.")
    return ("To fix: run collectives on their own stream overlapped with independent compute, batch small "
            "messages into fewer larger ones, and check the ranks for load imbalance.")
