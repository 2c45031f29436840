"""What a load produced: its request records (:class:`LoadResult`) and their summary.

The records themselves (:class:`~tracekit.request_rows.RequestRecord`), their log file and their
rows in the store are in :mod:`tracekit.request_rows`. :meth:`LoadResult.summary` has no
statistics of its own: it runs the ``serving`` analyzer's SQL
(:func:`tracekit.analysis.serving.request_stats`) over the records in an in-memory store, so the
numbers the load driver shows are those the analyzer stores for the same requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tracekit.request_rows import MEMORY_RUN_ID, RequestRecord, memory_store
from tracekit.server_metric_rows import Scrape

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.collectors.load.client import LoadSpec


@dataclass(frozen=True)
class Percentiles:
    """p50/p95/p99 in ms (DuckDB ``quantile_cont``: linear interpolation between order statistics,
    numpy's default method); None without samples."""

    p50: float | None
    p95: float | None
    p99: float | None


_NONE = Percentiles(None, None, None)


@dataclass(frozen=True)
class LoadSummary:
    """Aggregates of a load run. Latencies in ms over the requests without error (ITL: all their
    gaps pooled); ``window_s``: first request start to last request end (s); throughputs are
    successful requests' output tokens and successful requests per second of that window;
    ``error_rate``: errors / requests (0..1)."""

    requests: int
    errors: int
    output_tokens: int
    window_s: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    output_tokens_per_s: float | None
    requests_per_s: float | None
    error_rate: float | None

    def as_dict(self) -> dict[str, Any]:
        """Flat dict: ``ttft_p50_ms``, …, ``output_tokens_per_s``, ``requests_per_s``, …"""
        out: dict[str, Any] = {k: getattr(self, k) for k in ("requests", "errors", "output_tokens", "window_s")}
        for name in ("ttft", "tpot", "itl", "e2e"):
            p: Percentiles = getattr(self, f"{name}_ms")
            out.update({f"{name}_p50_ms": p.p50, f"{name}_p95_ms": p.p95, f"{name}_p99_ms": p.p99})
        out.update(output_tokens_per_s=self.output_tokens_per_s, requests_per_s=self.requests_per_s,
                   error_rate=self.error_rate)
        return out


def summarize(records: Sequence[RequestRecord]) -> LoadSummary:
    """The :class:`LoadSummary` of ``records``, computed by the ``serving`` analyzer's SQL
    (:func:`tracekit.analysis.serving.request_stats`) over them in an in-memory store."""
    if not records:
        return LoadSummary(0, 0, 0, 0.0, _NONE, _NONE, _NONE, _NONE, None, None, None)
    # imported on use: ``import tracekit.collectors`` (which imports the load driver) stays cheap
    from tracekit.analysis.serving import request_stats

    con = memory_store(records)
    try:
        st = request_stats(con, MEMORY_RUN_ID)
    finally:
        con.close()
    assert st is not None  # the store holds len(records) ≥ 1 requests
    lat = {name: Percentiles(*q) for name, q in st.latency_ms.items()}
    return LoadSummary(
        requests=st.requests,
        errors=st.errors,
        output_tokens=st.output_tokens,
        window_s=st.window_s or 0.0,
        ttft_ms=lat["ttft"],
        tpot_ms=lat["tpot"],
        itl_ms=lat["itl"],
        e2e_ms=lat["e2e"],
        output_tokens_per_s=st.output_tokens_per_s,
        requests_per_s=st.requests_per_s,
        error_rate=st.error_rate,
    )


#: A sweep point's steady state (run tag ``steady_state``): ``reached``; ``not_reached`` (the
#: requests sent during the warm-up had not all completed by ``--steady-timeout``, or the load
#: ended first); ``past_capacity`` (an open loop whose requests arrived faster than they completed
#: during the window, beyond chance: :func:`past_capacity`); ``interrupted`` (stopped before or
#: during its window).
SteadyState = Literal["reached", "not_reached", "past_capacity", "interrupted"]


def past_capacity(arrived: int, completed: int) -> bool:
    """Whether an open loop's ``arrived`` and ``completed`` requests over one window say its queue
    grew beyond chance: completions short of arrivals by more than 10 % of the arrivals and by
    more than three standard deviations of the difference of two independent Poisson counts
    (3 √(arrived + completed): the case of requests as long as the window, the noisiest). A stable
    server's shortfall is the change in the requests it holds, which does not grow with the
    window; past capacity it grows as (arrival rate − service rate) × window."""
    shortfall = arrived - completed
    return shortfall > 0.1 * arrived and shortfall > 3 * math.sqrt(arrived + completed)


@dataclass
class LoadResult:
    """A finished load: ``started_ns``/``ended_ns`` (Unix ns) bound the whole load (first send to
    last request ended), ``records`` are sorted by request id. ``cancelled``: requests cut off by
    ``stop`` (not in ``records``). ``model`` and ``url``: what was sent where.
    ``server_metrics``: the server's Prometheus scrapes while the load ran (``tracekit capture``
    fills it; empty when the server has no ``/metrics``), ``server_metrics_errors`` why scrapes
    failed; ``notes``: what the capture should tell the user about the load; ``steady_state``: a
    sweep point's verdict (:data:`SteadyState`; None when the capture did not ask,
    ``docs/portfolio.md``); ``arrivals_ns``: an open loop's scheduled arrival of every request
    (Unix ns, sent or still waiting for a free slot; empty for a closed loop)."""

    spec: LoadSpec
    started_ns: int
    ended_ns: int
    records: list[RequestRecord] = field(default_factory=list)
    cancelled: int = 0
    model: str | None = None
    server_metrics: list[Scrape] = field(default_factory=list)
    server_metrics_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steady_state: SteadyState | None = None
    arrivals_ns: list[int] = field(default_factory=list)

    def backlog_growth(self, t0_ns: int, t1_ns: int) -> tuple[int, int] | None:
        """An open loop's arrivals and completions (requests ended, with or without error) in
        ``[t0_ns, t1_ns]``: their difference is how much the requests waiting or in service grew
        in that interval. None for a closed loop (its clients never outrun the server)."""
        if self.spec.rate_rps is None:
            return None
        arrived = sum(t0_ns <= t <= t1_ns for t in self.arrivals_ns)
        completed = sum(t0_ns <= r.start_ns + r.e2e_ns <= t1_ns for r in self.records)
        return arrived, completed

    def summary(self) -> LoadSummary:
        """p50/p95/p99 of TTFT, TPOT, ITL and e2e, throughput and errors (see :class:`LoadSummary`),
        computed by the ``serving`` analyzer's SQL (:func:`summarize`)."""
        return summarize(self.records)
