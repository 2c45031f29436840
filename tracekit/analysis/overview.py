"""One run at a glance: what ``tracekit summary``, the top of the report and the dashboard's Run
page show first — the device the analyzers costed against, the headline KPIs with their
coverage, where the device time went by kernel class, the top kernels with readable names, and
the top findings.

Inputs (read-only SQL on the public views): ``runs``, ``ranks``, ``devices`` (through
:func:`tracekit.analysis.hardware.run_device`), ``metrics``, ``findings`` and the SQL library's
``device_work`` (its ``kernel_class`` column). Times are ns; shares are fractions of the run's
device kernel time (the sum of ``device_work`` durations, overlapping streams counted each).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import duckdb

from tracekit import formatting as fmt
from tracekit.analysis.hardware import run_device
from tracekit.names import short_kernel_names


@dataclass(frozen=True)
class KpiDef:
    """A headline KPI: the first metric of ``choices`` (metric name, label) a run has a value for,
    with the share of the run it describes from the metric ``coverage`` (when the metric has one)
    and a ``note`` on what the number is."""

    label: str
    choices: tuple[tuple[str, str], ...]
    coverage: str | None = None
    note: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.choices)


#: The headline KPIs, in display order (a run shows those it has a value for).
HEADLINE_KPIS: tuple[KpiDef, ...] = (
    KpiDef("device busy", (("device_busy_fraction", "device busy"),)),
    KpiDef("step time", (("decode_step_time_ms", "decode step"), ("step_device_time", "step (all phases)")),
           note="median; device span of a step's own work, host blocks left out"),
    KpiDef("decode MBU", (("decode_mbu", "decode MBU"),), "decode_mbu_coverage"),
    KpiDef("decode MFU", (("decode_mfu", "decode MFU"),), "decode_mfu_coverage"),
    KpiDef("prefill MFU", (("prefill_mfu", "prefill MFU"),), "prefill_mfu_coverage"),
    KpiDef("output tokens/s", (("output_tokens_per_s", "output tokens/s"),)),
    KpiDef("TTFT p95", (("ttft_p95_ms", "TTFT p95"),)),
    KpiDef("$/1M output tokens", (("usd_per_1m_output_tokens", "$/1M output tokens"),)),
)

_SEVERITY_ORDER = "CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END"


@dataclass
class Kpi:
    label: str
    name: str  #: the metric it comes from
    value: float
    unit: str
    coverage: float | None = None  #: share of the run the value describes (fraction), when stated
    note: str = ""  #: what the number is, or why to distrust it


@dataclass
class KernelRow:
    name: str
    short: str  #: :func:`tracekit.names.short_kernel_names` of the listing
    kernel_class: str
    calls: int
    time_ns: int
    share: float  #: of the run's device kernel time


@dataclass
class Overview:
    run_id: str
    label: str | None
    workload: str | None
    format: str
    vendor: str | None
    device_name: str | None  #: as the trace names it
    catalog_device: str | None  #: the hardware-catalog device the analyzers costed against
    ranks: int
    captured_at: dt.datetime | None
    span_ns: int | None  #: the longest rank's span
    kernel_time_ns: int  #: Σ device_work durations
    window_ns: int | None = None  #: the busiest device's window (run_window), what device busy is over
    incomplete: str | None = None  #: why the timeline cannot be trusted (run_completeness), if so
    kpis: list[Kpi] = field(default_factory=list)
    classes: list[tuple[str, int, float]] = field(default_factory=list)  #: (class, time ns, share)
    kernels: list[KernelRow] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  #: the top ones, most severe first
    n_findings: dict[str, int] = field(default_factory=dict)  #: severity → count
    analyzed: bool = False  #: the run has stored metrics or findings

    @property
    def device_text(self) -> str:
        """The device as the trace names it, and the catalog device the analyzers costed against
        when that differs or is missing."""
        name = self.device_name or "not stated in the trace"
        if self.catalog_device:
            return name if self.catalog_device == name else f"{name} (costed as {self.catalog_device})"
        if self.vendor == "cpu":
            return name
        return name + " (not in the hardware catalog: no peaks)"


def run_overview(con: duckdb.DuckDBPyConnection, run_id: str, *, top: int = 5, findings: int = 3,
                 width: int = 44) -> Overview:
    """The overview of ``run_id`` (an existing, full id) from an open connection with the SQL
    library loaded: ``top`` kernels (names shortened to ``width``), ``findings`` findings."""
    r = con.execute(
        """SELECT label, workload, format, vendor, device_name, n_ranks, captured_at,
                  (SELECT max(last_ns - first_ns) FROM ranks WHERE run_id = $run)
           FROM runs WHERE run_id = $run""", {"run": run_id}).fetchall()[0]
    row, spec = run_device(con, run_id)
    ov = Overview(run_id, r[0], r[1], r[2], r[3], r[4], spec.name if spec else None, int(r[5] or 0), r[6],
                  None if r[7] is None else int(r[7]), 0)
    if row is not None and not ov.device_name:
        ov.device_name = row.get("name") or row.get("device_type")

    metrics = {n: (v, u) for n, v, u in con.execute(
        "SELECT name, value, unit FROM metrics WHERE run_id = ? AND value IS NOT NULL", [run_id]).fetchall()}
    counts = dict(con.execute(
        "SELECT severity, count(*) FROM findings WHERE run_id = ? GROUP BY ALL", [run_id]).fetchall())
    ov.analyzed = bool(metrics or counts)
    ov.n_findings = {str(k): int(v) for k, v in counts.items()}
    win = con.execute("""SELECT window_ns FROM run_window WHERE run_id = ?
                         ORDER BY busy_ns DESC NULLS LAST, rank, device LIMIT 1""", [run_id]).fetchall()
    ov.window_ns = int(win[0][0]) if win and win[0][0] is not None else None
    inc = con.execute("SELECT note FROM run_completeness WHERE run_id = ? AND incomplete", [run_id]).fetchall()
    ov.incomplete = str(inc[0][0] or "the trace is incomplete") if inc else None
    for d in HEADLINE_KPIS:
        picked = next(((n, lab) for n, lab in d.choices if n in metrics), None)
        if picked is None:
            continue
        name, label = picked
        v, u = metrics[name]
        cov = metrics.get(d.coverage, (None, None))[0] if d.coverage else None
        note = d.note
        if name == "device_busy_fraction" and ov.window_ns:
            note = f"of the busiest device's {fmt.duration_ns(ov.window_ns)} window"
            if ov.incomplete:
                note = "trace incomplete, not a timeline verdict: " + ov.incomplete
        ov.kpis.append(Kpi(label, name, float(v), str(u), None if cov is None else float(cov), note))

    cls = con.execute(
        """SELECT kernel_class, sum(dur_ns)::BIGINT AS t FROM device_work WHERE run_id = ?
           GROUP BY ALL ORDER BY t DESC, kernel_class""", [run_id]).fetchall()
    ov.kernel_time_ns = sum(int(t or 0) for _, t in cls)
    total = ov.kernel_time_ns or 1
    ov.classes = [(str(c), int(t or 0), int(t or 0) / total) for c, t in cls]
    krows = con.execute(
        f"""SELECT name, any_value(kernel_class), count(*), sum(dur_ns)::BIGINT AS t FROM device_work
            WHERE run_id = ? GROUP BY name ORDER BY t DESC, name LIMIT {int(top)}""", [run_id]).fetchall()
    shorts = short_kernel_names([k[0] for k in krows], width)
    ov.kernels = [KernelRow(str(n), s, str(c), int(k), int(t or 0), int(t or 0) / total)
                  for (n, c, k, t), s in zip(krows, shorts)]
    rel = con.execute(
        f"""SELECT severity, analyzer, title, detail, saving_ns, saving_fraction FROM findings
            WHERE run_id = ? ORDER BY {_SEVERITY_ORDER}, saving_ns DESC NULLS LAST, analyzer, title
            LIMIT {int(findings)}""", [run_id])
    cols = [c[0] for c in rel.description]
    ov.findings = [dict(zip(cols, f)) for f in rel.fetchall()]
    return ov
