"""What a load produced: its request records (:class:`LoadResult`) and their summary.

The records themselves (:class:`~tracekit.request_rows.RequestRecord`), their log file and their
rows in the store are in :mod:`tracekit.request_rows`. :meth:`LoadResult.summary` has no
statistics of its own: it runs the ``serving`` analyzer's SQL
(:func:`tracekit.analysis.serving.request_stats`) over the records in an in-memory store, so the
numbers the load driver shows are those the analyzer stores for the same requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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


@dataclass
class LoadResult:
    """A finished load: ``started_ns``/``ended_ns`` (Unix ns) bound the whole load (first send to
    last request ended), ``records`` are sorted by request id. ``cancelled``: requests cut off by
    ``stop`` (not in ``records``). ``model`` and ``url``: what was sent where.
    ``server_metrics``: the server's Prometheus scrapes while the load ran (``tracekit capture``
    fills it; empty when the server has no ``/metrics``), ``server_metrics_errors`` why scrapes
    failed; ``notes``: what the capture should tell the user about the load; ``steady_state``:
    whether a sweep point's load reached steady state before its window opened (None when the
    capture did not wait for it, ``docs/portfolio.md``)."""

    spec: LoadSpec
    started_ns: int
    ended_ns: int
    records: list[RequestRecord] = field(default_factory=list)
    cancelled: int = 0
    model: str | None = None
    server_metrics: list[Scrape] = field(default_factory=list)
    server_metrics_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steady_state: bool | None = None

    def summary(self) -> LoadSummary:
        """p50/p95/p99 of TTFT, TPOT, ITL and e2e, throughput and errors (see :class:`LoadSummary`),
        computed by the ``serving`` analyzer's SQL (:func:`summarize`)."""
        return summarize(self.records)
