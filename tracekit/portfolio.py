"""The portfolio: which hardware serves a model cheapest at a given speed, from load-driven runs.

Every run measured under load (view ``portfolio_runs``: requests and the ``serving`` analyzer's
metrics) is a point: **output tokens/s per device** (the instance's output tokens/s ÷ its devices)
against **output tokens/s per user** (1000 ÷ TPOT p50: the speed each user sees), and **USD per 1M
output tokens** against the same per-user speed. Points are grouped by hardware and precision (a
*series*); a sweep (``tracekit capture --sweep``) gives one series its curve. docs/portfolio.md
explains how to read it; in short:

* **Cost** of a point = the instance's USD per hour ÷ (output tokens/s × 3600) × 10⁶, the instance's
  USD per hour = the device price on the chosen price sheet × ``devices``. Prices come from a price
  sheet file (``--price-sheet FILE``, :func:`read_price_sheet`) by hardware name, else from the
  hardware catalog merged with the user's hardware file (:mod:`tracekit.analysis.hardware`) for an
  identified device; ``rented`` = ``price_per_hour_usd``, ``owned`` = capex ÷ (years × 8766 h) + power
  kW × USD/kWh. A point without a price has no cost (it stays on the throughput plot).
* **Frontiers** (Pareto, per series): a point is on the throughput frontier unless another point of
  its series is at least as fast per user *and* gives at least as many tokens/s per device (one of
  the two strictly more); on the cost frontier unless another is at least as fast per user and at
  most as costly (one strictly). Only measured points: nothing is interpolated between them.
* **Series**: the points of one model, hardware, precision and load profile (named by
  :func:`_name_series`).
* **The band answer** (:class:`BandAnswer`): at ≥ ``min_speed`` tokens/s per user, each series'
  cheapest measured point that reaches the band and can answer for it (:meth:`Point.excluded`: at
  most :data:`MAX_ERROR_RATE` of its requests failed, and, in a sweep, its load reached steady
  state before the window opened); the cheapest series wins; what limits it there is
  its run's most severe finding (by severity, then saving) with its MBU, MFU, prefix-cache hit rate
  and queue depth. A series that never reaches the band is listed as such.

Read-only; :func:`portfolio` opens the store read-only (or uses the caller's connection).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb

from tracekit.analysis.hardware import DeviceSpec, HardwareConfigError
from tracekit.config_toml import read_toml, typed_value, unknown_keys
from tracekit.store import open_store, resolve_store

#: Price sheets: ``rented`` (``price_per_hour_usd``) or ``owned`` (capex amortised plus power).
Sheet = Literal["rented", "owned"]
SHEETS: tuple[Sheet, ...] = ("rented", "owned")
#: The per-user speed band the portfolio answers for when none is given (output tokens/s per user).
DEFAULT_MIN_SPEED = 50.0
#: A point whose requests failed more often than this (fraction) does not answer for a band: its
#: throughput counts only the requests that succeeded.
MAX_ERROR_RATE = 0.01
#: The price sheet file ``tracekit portfolio`` and the dashboard use when none is given.
PRICE_SHEET_ENV = "TRACEKIT_PRICE_SHEET"
_PRICE_FIELDS = ("price_per_hour_usd", "owned_capex_usd", "owned_years", "owned_power_w", "owned_usd_per_kwh")
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
#: Why a sweep point without a steady state answers no band, by its ``steady_state`` tag.
_NOT_STEADY = {"past_capacity": "past capacity: its queue grew during the window",
               "not_reached": "no steady state: the warm-up's requests had not drained",
               "interrupted": "interrupted before its window ended"}


@dataclass(frozen=True)
class PriceSheet:
    """Prices to cost the points with: ``sheet`` (which figures count) and, by hardware name (a
    catalog key or a run's ``hardware`` tag), USD per device-hour; ``source`` says where they came
    from (a file path, or ``catalog``)."""

    sheet: Sheet = "rented"
    prices: dict[str, float] = field(default_factory=dict)
    source: str = "catalog"


def read_price_sheet(path: Path, sheet: Sheet | None = None) -> PriceSheet:
    """A price sheet file (TOML)::

        sheet = "rented"                    # or "owned" (default rented)
        [prices."H100-SXM5-80GB"]           # a catalog key, or a run's tag hardware=...
        price_per_hour_usd = 2.49           # rented: USD per device-hour
        owned_capex_usd = 30000             # owned: all four below
        owned_years = 4
        owned_power_w = 1000
        owned_usd_per_kwh = 0.12

    ``sheet`` overrides the file's ``sheet``. Raises :class:`HardwareConfigError` (``path:
    reason``) for anything else."""
    doc = read_toml(path, HardwareConfigError)
    bad = unknown_keys(doc, {"sheet", "prices"})
    if bad:
        raise HardwareConfigError(path, f"unknown key(s) {', '.join(bad)} (expected sheet and [prices.NAME])")
    given = doc.get("sheet", "rented")
    if given not in SHEETS:
        raise HardwareConfigError(path, f"sheet must be 'rented' or 'owned', got {given!r}")
    sheet = sheet or given
    prices: dict[str, float] = {}
    tables = doc.get("prices", {})
    if not isinstance(tables, dict):
        raise HardwareConfigError(path, "prices must be tables: [prices.\"NAME\"]")
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise HardwareConfigError(path, f"prices.{name}: expected a table")
        bad = unknown_keys(table, set(_PRICE_FIELDS))
        if bad:
            raise HardwareConfigError(path, f"prices.{name}: unknown key(s) {', '.join(bad)}")
        try:
            vals = {k: typed_value(v, float, f"prices.{name}.{k}") for k, v in table.items()}
        except TypeError as exc:
            raise HardwareConfigError(path, str(exc)) from None
        if any(not (v >= 0 and math.isfinite(v)) for v in vals.values()):
            raise HardwareConfigError(path, f"prices.{name}: values must be finite and ≥ 0")
        price = _sheet_price(DeviceSpec(key=str(name), name=str(name), vendor="", **vals), sheet)
        if price is not None:
            prices[str(name)] = price
    return PriceSheet(sheet, prices, str(path))


def price_sheet(value: str | Path | None = None) -> PriceSheet:
    """``--price-sheet``'s value as prices: ``rented`` (also None) or ``owned`` (the catalog's), or
    a price sheet file (:func:`read_price_sheet`)."""
    text = str(value or "rented")
    if text in SHEETS:
        return PriceSheet(text)
    return read_price_sheet(Path(text))


def _sheet_price(spec: DeviceSpec, sheet: Sheet) -> float | None:
    return spec.price_per_hour_usd if sheet == "rented" else spec.owned_per_hour_usd()


@dataclass
class Point:
    """One load-driven run on the curves (the ``portfolio_runs`` view's columns, plus cost and the
    frontiers). Speeds in output tokens/s, cost in USD per 1M output tokens, fractions 0..1."""

    run_id: str
    label: str | None
    hardware: str
    precision: str | None
    model: str | None
    workload: str | None
    sweep_id: str | None
    sweep_param: str | None
    sweep_value: float | None
    load_profile: str | None
    devices: int
    prompt_tokens_mean: float | None
    output_tokens_mean: float | None
    output_tokens_per_s: float
    throughput_source: str
    per_device: float
    per_user: float | None
    ttft_p95_ms: float | None
    request_error_rate: float | None
    #: a sweep point's steady state (tag ``steady_state``: ``reached``, ``past_capacity``, ``not_reached``,
    #: ``interrupted``), None outside a sweep
    steady_state: str | None
    prefix_cache_hit_rate: float | None
    kv_cache_usage_p95: float | None
    queue_depth_p95: float | None
    mbu: float | None
    mfu: float | None
    usd_per_hour: float | None = None
    usd_per_1m: float | None = None
    price_source: str | None = None
    on_throughput_frontier: bool = False
    on_cost_frontier: bool = False
    top_finding: dict[str, Any] | None = None
    #: the series' name: its hardware, then precision, model and load profile where the points shown
    #: differ in them (:func:`_name_series`)
    series: str = ""

    def excluded(self) -> str | None:
        """Why this point cannot answer for a speed band, or None: more than :data:`MAX_ERROR_RATE`
        of its requests failed (its throughput counts only the rest), or, in a sweep, its load was
        not in steady state (tag ``steady_state``: past capacity, its queue and so its latency
        still growing; the warm-up never drained; or the point was interrupted)."""
        if (self.request_error_rate or 0.0) > MAX_ERROR_RATE:
            return f"{100 * (self.request_error_rate or 0.0):.1f}% of requests failed"
        return _NOT_STEADY.get(self.steady_state or "reached")

    def series_key(self) -> tuple[str, str, str, str]:
        """What a series holds constant: model, hardware, precision and load profile."""
        return (self.model or "", self.hardware, self.precision or "", self.load_profile or "")


@dataclass(frozen=True)
class SeriesAnswer:
    """One series at the band: its cheapest point at ≥ the band (None when it never gets there, or
    none of its points there has a price) and its fastest measured per-user speed."""

    series: str
    point: Point | None
    max_per_user: float | None
    reaches_band: bool


@dataclass(frozen=True)
class BandAnswer:
    """"At ≥ ``min_speed`` tokens/s per user, which hardware is cheapest, and what limits it there":
    ``cheapest`` (None when no priced point reaches the band) and every series' answer, cheapest
    first."""

    min_speed: float
    cheapest: SeriesAnswer | None
    series: list[SeriesAnswer]

    def sentence(self) -> str:
        """The answer in one sentence."""
        if self.cheapest is None or self.cheapest.point is None:
            reach = [s.series for s in self.series if s.reaches_band]
            if not reach:
                return f"No hardware reaches {self.min_speed:g} output tokens/s per user in these runs."
            return (f"At ≥ {self.min_speed:g} tokens/s per user, {', '.join(reach)} "
                    f"{'reaches' if len(reach) == 1 else 'reach'} the band but no point there has a price: "
                    "give a price sheet (--price-sheet, docs/portfolio.md).")
        p = self.cheapest.point
        assert p.usd_per_1m is not None and p.per_user is not None
        limit = ""
        if p.top_finding is not None:
            limit = f"; what limits it there: {p.top_finding['title']} ({p.top_finding['analyzer']})"
        others = [s for s in self.series if s is not self.cheapest and s.point is not None and s.point.usd_per_1m]
        vs = ""
        if others:
            o = others[0]
            assert o.point is not None and o.point.usd_per_1m is not None
            vs = f", {o.point.usd_per_1m / p.usd_per_1m:.2f}× cheaper than {o.series} (${o.point.usd_per_1m:.2f})"
        return (f"At ≥ {self.min_speed:g} tokens/s per user, {self.cheapest.series} is cheapest: "
                f"${p.usd_per_1m:.2f} per 1M output tokens at {p.per_user:.1f} tokens/s per user and "
                f"{p.per_device:,.1f} tokens/s per device (run {p.run_id}){vs}{limit}.")


@dataclass
class Portfolio:
    """The points (cost and frontiers filled in), the price sheet used and the band's answer."""

    points: list[Point]
    prices: PriceSheet
    answer: BandAnswer
    filters: dict[str, Any]

    def series(self) -> dict[str, list[Point]]:
        """Series name → its points, by per-user speed (ascending)."""
        out: dict[str, list[Point]] = {}
        for p in sorted(self.points, key=lambda p: (p.series, p.per_user or 0.0, p.run_id)):
            out.setdefault(p.series, []).append(p)
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: points, the sheet, the answer (its sentence included)."""
        ans = self.answer
        return {
            "filters": self.filters, "sheet": self.prices.sheet, "price_source": self.prices.source,
            "min_speed": ans.min_speed, "answer": ans.sentence(),
            "cheapest": None if ans.cheapest is None else ans.cheapest.series,
            "series": [{"series": s.series, "reaches_band": s.reaches_band, "max_per_user": s.max_per_user,
                        "run_id": s.point.run_id if s.point else None,
                        "usd_per_1m": s.point.usd_per_1m if s.point else None} for s in ans.series],
            "points": [{**asdict(p), "excluded": p.excluded()} for p in self.points],
        }


def portfolio(
    store: str | Path | None = None,
    *,
    workload: str | None = None,
    model: str | None = None,
    sweep: str | None = None,
    prices: PriceSheet | None = None,
    min_speed: float = DEFAULT_MIN_SPEED,
    con: duckdb.DuckDBPyConnection | None = None,
) -> Portfolio:
    """The portfolio of the store's load-driven runs (module docstring), filtered by ``workload``
    (the runs' workload name), ``model`` (view ``portfolio_runs.model``) and ``sweep`` (a sweep id,
    or a prefix of one). ``prices``: default the catalog's rented prices. ``con``: a read-only
    connection with the analysis library installed (the dashboard's)."""
    prices = prices or PriceSheet()
    if con is not None:
        points = _points(con, workload, model, sweep, prices)
    else:
        from tracekit.analysis import library

        with open_store(resolve_store(store), read_only=True) as c:
            library.install(c)
            points = _points(c, workload, model, sweep, prices)
    _name_series(points)
    _frontiers(points)
    return Portfolio(points, prices, band_answer(points, min_speed),
                     {"workload": workload, "model": model, "sweep": sweep})


_POINTS_SQL = """
SELECT p.*, f.finding
FROM portfolio_runs p
LEFT JOIN (
  SELECT run_id, arg_min({'severity': severity, 'title': title, 'analyzer': analyzer,
                          'saving_fraction': saving_fraction},
                         [CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END,
                          -coalesce(saving_fraction, 0)]) AS finding
  FROM (SELECT * FROM findings WHERE severity IN ('critical', 'warning')
        ORDER BY run_id, analyzer, title)  -- ties of severity and saving: the first by analyzer, title
  GROUP BY run_id) f USING (run_id)
WHERE ($workload IS NULL OR p.workload = $workload)
  AND ($model IS NULL OR p.model = $model)
  AND ($sweep IS NULL OR starts_with(p.sweep_id, $sweep))
ORDER BY p.hardware, p.precision, p.output_tokens_per_s_per_user, p.run_id
"""


def _points(con: duckdb.DuckDBPyConnection, workload: str | None, model: str | None, sweep: str | None,
            prices: PriceSheet) -> list[Point]:
    cur = con.execute(_POINTS_SQL, {"workload": workload, "model": model, "sweep": sweep})
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    specs = _identified(con) if any(not r["hardware_tagged"] for r in rows) else {}
    out: list[Point] = []
    for r in rows:
        hardware, spec = str(r["hardware"]), None
        if not r["hardware_tagged"]:
            spec = specs.get(r["run_id"])
            if spec is not None:
                hardware = spec.key
        p = Point(
            run_id=r["run_id"], label=r["label"], hardware=hardware, precision=r["precision"], model=r["model"],
            workload=r["workload"], sweep_id=r["sweep_id"], sweep_param=r["sweep_param"],
            sweep_value=r["sweep_value"], load_profile=r["load_profile"], devices=int(r["devices"]),
            prompt_tokens_mean=r["prompt_tokens_mean"], output_tokens_mean=r["output_tokens_mean"],
            output_tokens_per_s=float(r["output_tokens_per_s"]), throughput_source=r["throughput_source"],
            per_device=float(r["output_tokens_per_s_per_device"]), per_user=r["output_tokens_per_s_per_user"],
            ttft_p95_ms=r["ttft_p95_ms"], request_error_rate=r["request_error_rate"], steady_state=r["steady_state"],
            prefix_cache_hit_rate=r["prefix_cache_hit_rate"], kv_cache_usage_p95=r["kv_cache_usage_p95"],
            queue_depth_p95=r["queue_depth_p95"], mbu=r["mbu"], mfu=r["mfu"],
            top_finding=dict(r["finding"]) if r["finding"] else None,
        )
        _price(p, spec, prices)
        out.append(p)
    return out


def _identified(con: duckdb.DuckDBPyConnection) -> dict[str, DeviceSpec]:
    """Run id → the catalog spec of its main device (the runs' rollup: no event is read; each kind
    of device identified once); CPU runs and unidentified devices are left out."""
    from tracekit.analysis.hardware import device_kinds

    by_kind = {kind: spec for kind, _row, spec in device_kinds(con) if spec is not None}
    return {str(rid): by_kind[int(kind)] for rid, kind in con.execute("SELECT run_id, kind FROM run_device_kind").fetchall()
            if int(kind) in by_kind}


def _price(p: Point, spec: DeviceSpec | None, prices: PriceSheet) -> None:
    """Fill ``usd_per_hour`` and ``usd_per_1m`` from the sheet file, else the catalog."""
    per_device, source = prices.prices.get(p.hardware), prices.source
    if per_device is None and spec is not None:
        per_device, source = _sheet_price(spec, prices.sheet), "catalog"
    if per_device is None or not p.output_tokens_per_s:
        return
    p.usd_per_hour = per_device * p.devices
    p.usd_per_1m = p.usd_per_hour / (p.output_tokens_per_s * 3600) * 1e6
    p.price_source = source


def _name_series(points: list[Point]) -> None:
    """Name each point's series: the hardware, then `` · precision``, `` · model`` and `` · load
    profile`` where the points differ in them (one model swept on two chips reads ``H100``,
    ``MI300X``; two models read ``H100 · qwen3-8b``)."""
    varies = [len({p.series_key()[i] for p in points}) > 1 for i in range(4)]
    for p in points:
        model, hardware, precision, profile = p.series_key()
        parts = [hardware, precision if precision else ""]
        parts += [model if varies[0] else "", profile if varies[3] else ""]
        p.series = " · ".join(x for x in parts if x)


def _frontiers(points: list[Point]) -> None:
    """Mark each series' Pareto frontiers (module docstring)."""
    by_series: dict[str, list[Point]] = {}
    for p in points:
        by_series.setdefault(p.series, []).append(p)
    for group in by_series.values():
        speed = [p for p in group if p.per_user is not None]
        for p in speed:
            assert p.per_user is not None
            p.on_throughput_frontier = not any(
                q is not p and q.per_user is not None and q.per_user >= p.per_user and q.per_device >= p.per_device
                and (q.per_user > p.per_user or q.per_device > p.per_device) for q in speed)
            if p.usd_per_1m is not None:
                p.on_cost_frontier = not any(
                    q is not p and q.per_user is not None and q.usd_per_1m is not None and q.per_user >= p.per_user
                    and q.usd_per_1m <= p.usd_per_1m and (q.per_user > p.per_user or q.usd_per_1m < p.usd_per_1m)
                    for q in speed)


def band_answer(points: list[Point], min_speed: float) -> BandAnswer:
    """Each series' cheapest priced point at ≥ ``min_speed`` tokens/s per user, cheapest series first
    (series without such a point after, fastest first)."""
    by_series: dict[str, list[Point]] = {}
    for p in points:
        by_series.setdefault(p.series, []).append(p)
    answers: list[SeriesAnswer] = []
    for name, group in by_series.items():
        speeds = [p.per_user for p in group if p.per_user is not None]
        in_band = [p for p in group if p.per_user is not None and p.per_user >= min_speed and p.excluded() is None]
        priced = [p for p in in_band if p.usd_per_1m is not None]
        best = min(priced, key=lambda p: (p.usd_per_1m, -(p.per_user or 0.0), p.run_id)) if priced else None
        answers.append(SeriesAnswer(name, best, max(speeds) if speeds else None, bool(in_band)))
    answers.sort(key=lambda s: (s.point is None, s.point.usd_per_1m if s.point else 0.0,
                                -(s.max_per_user or 0.0), s.series))
    cheapest = answers[0] if answers and answers[0].point is not None else None
    return BandAnswer(min_speed, cheapest, answers)
