"""serving: request-level latency, throughput and cost per token of a load-driven run.

Inputs (views): ``requests`` (one row per request of the load driver,
:mod:`tracekit.collectors.load`; written by :func:`tracekit.api.store_requests`), ``devices`` and
``kernels`` (which devices the run used), and the hardware catalog merged with the user file
(:func:`tracekit.analysis.hardware.load_catalog`; prices are ``price_per_hour_usd``, USD per
device-hour, from the user file only). A run without requests gets nothing from this analyzer.

Math (all percentiles are DuckDB ``quantile_cont``, linear interpolation):

* TTFT, e2e: over requests without error; TPOT per request ``(e2e − ttft) / (output_tokens − 1)``
  (requests with ≥ 2 output tokens); ITL: every gap of every request without error, pooled.
* window = first request start → last request end (all requests); ``output_tokens_per_s`` =
  Σ output tokens of requests without error ÷ window; ``requests_per_s`` = requests without error
  ÷ window; ``request_error_rate`` = requests with an error ÷ requests (0..1).
* ``output_tokens_per_s_per_user`` = 1000 ÷ TPOT p50 (ms): the speed band a cost is measured at.
* ``usd_per_1m_output_tokens`` = instance USD/h ÷ (``output_tokens_per_s`` × 3600) × 10⁶. The
  devices are those with kernels in the run (all of the run's ``devices`` rows when it has no
  kernels), each identified in the catalog; every one of them must have a price on the run's price
  sheet (tag ``price_sheet``: ``rented`` (default) = ``price_per_hour_usd``; ``owned`` = capex ÷
  (years × 8766 h) + power kW × USD/kWh), otherwise there is no cost metric and an ``info``
  finding says why. The instance is the whole server: when the trace's world size
  (``ranks.world_size``: TP × DP × PP ranks, all of which produced the measured tokens) or else the
  attached model's tensor parallelism (``run_models``) exceeds the devices in the trace (a rank-0
  capture of a TP-8 server), the mean captured device price is charged for every device of the
  instance.

From the server's Prometheus metrics when the capture scraped them (view
``server_metric_summary``, docs/portfolio.md): ``server_output_tokens_per_s`` (Δ generation tokens
over the load's period: every token produced while the load ran, not only those of the requests
that started in the window), ``prefix_cache_hit_rate`` (Δ hits ÷ Δ queries, prompt tokens), ``kv_cache_usage_p95``, ``queue_depth_p95`` and ``preemptions`` (a ``warning`` when
any); for the agentic load profile, TTFT per turn (view ``ttft_by_turn``, an ``info`` finding).

Findings: request errors above :data:`ERROR_RATE_WARNING` (``warning``; ``critical`` from
:data:`ERROR_RATE_CRITICAL`), with the most frequent error texts; a TTFT tail (p99 ≥
:data:`TTFT_TAIL_RATIO` × p50 and ≥ :data:`TTFT_TAIL_MIN_MS` above it, with ≥
:data:`TTFT_TAIL_MIN_REQUESTS` requests): queueing before prefill, or long prompts when TTFT
follows prompt length (Pearson correlation ≥ :data:`PROMPT_CORRELATION`); no price for cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import duckdb

from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding, Metric, Severity
from tracekit.analysis.hardware import identify

ERROR_RATE_WARNING = 0.01  # fraction of requests
ERROR_RATE_CRITICAL = 0.10
TTFT_TAIL_RATIO = 3.0  # p99 / p50
TTFT_TAIL_MIN_MS = 20.0  # p99 − p50, ms
TTFT_TAIL_MIN_REQUESTS = 20
PROMPT_CORRELATION = 0.7
#: A turn of the agentic profile needs this many requests in the window for its TTFT percentiles.
TURN_MIN_REQUESTS = 5
#: Price sheets (run tag ``price_sheet``): rented = ``price_per_hour_usd``; owned = capex amortised
#: plus power (:meth:`tracekit.analysis.hardware.DeviceSpec.owned_per_hour_usd`).
PRICE_SHEETS = ("rented", "owned")

_STATS_SQL = """
WITH r AS (SELECT * FROM requests WHERE run_id = $run),
ok AS (SELECT * FROM r WHERE error IS NULL),
gaps AS (SELECT unnest(itl_ns) AS gap FROM ok)
SELECT
    (SELECT count(*) FROM r) AS n,
    (SELECT count(*) FROM ok) AS n_ok,
    (SELECT max(end_ns) - min(start_ns) FROM r) AS window_ns,
    (SELECT coalesce(sum(output_tokens), 0) FROM ok) AS out_tokens,
    (SELECT quantile_cont(ttft_ns, [0.5, 0.95, 0.99]) FROM ok) AS ttft,
    (SELECT quantile_cont(tpot_ns, [0.5, 0.95, 0.99]) FROM ok) AS tpot,
    (SELECT quantile_cont(gap, [0.5, 0.95, 0.99]) FROM gaps) AS itl,
    (SELECT quantile_cont(e2e_ns, [0.5, 0.95, 0.99]) FROM ok) AS e2e,
    (SELECT corr(ttft_ns, prompt_tokens) FROM ok) AS ttft_prompt_corr,
    (SELECT list(DISTINCT token_count_source ORDER BY token_count_source) FROM r) AS sources
"""

LATENCIES = ("ttft", "tpot", "itl", "e2e")

#: The metrics this analyzer writes, in display order (``compare`` lists them in this order).
METRICS = (
    "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p95_ms", "tpot_p99_ms", "itl_p95_ms",
    "e2e_p95_ms", "output_tokens_per_s", "output_tokens_per_s_per_user", "requests_per_s", "request_error_rate",
    "usd_per_1m_output_tokens", "server_output_tokens_per_s", "prefix_cache_hit_rate", "kv_cache_usage_p95",
    "queue_depth_p95", "preemptions",
)


def ms(ns: Any) -> float | None:
    """ns → ms (None stays None)."""
    return None if ns is None else float(ns) / 1e6


@dataclass(frozen=True)
class RequestStats:
    """A run's requests summarized (the definitions in the module docstring).

    ``latency_ms[name]``: (p50, p95, p99) in ms for ``ttft``, ``tpot``, ``itl``, ``e2e`` (None
    without samples). ``window_s``: first start → last end (s). ``output_tokens``: of the requests
    without error. ``ttft_prompt_corr``: Pearson correlation of TTFT and prompt tokens.
    ``token_count_sources``: ``usage`` and/or ``counted``."""

    requests: int
    errors: int
    window_s: float | None
    output_tokens: int
    latency_ms: dict[str, tuple[float | None, float | None, float | None]]
    ttft_prompt_corr: float | None
    token_count_sources: list[str]

    @property
    def output_tokens_per_s(self) -> float | None:
        return self.output_tokens / self.window_s if self.window_s else None

    @property
    def requests_per_s(self) -> float | None:
        return (self.requests - self.errors) / self.window_s if self.window_s else None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests


def request_stats(con: duckdb.DuckDBPyConnection, run_id: str) -> RequestStats | None:
    """Percentiles (DuckDB ``quantile_cont``), throughput and errors of a run's ``requests``;
    None when the run has none."""
    n, n_ok, window_ns, out_tokens, *lat, corr, sources = con.execute(_STATS_SQL, {"run": run_id}).fetchall()[0]
    if not n:
        return None
    return RequestStats(
        requests=int(n),
        errors=int(n - n_ok),
        window_s=window_ns / 1e9 if window_ns and window_ns > 0 else None,
        output_tokens=int(out_tokens),
        latency_ms={name: (ms(q[0]), ms(q[1]), ms(q[2])) if q else (None, None, None)
                    for name, q in zip(LATENCIES, lat, strict=True)},
        ttft_prompt_corr=None if corr is None or math.isnan(corr) else float(corr),
        token_count_sources=list(sources or []),
    )


class Serving(Analyzer, name="serving"):
    summary = "request latency percentiles (TTFT, TPOT, ITL, e2e), throughput, errors and cost per token"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        st = request_stats(con, run_id)
        if st is None:
            return AnalyzerResult()
        lat = st.latency_ms
        res = AnalyzerResult(metrics=[
            *(Metric(f"{name}_p{p}_ms", lat[name][i], "ms", "lower")
              for name in ("ttft", "tpot") for i, p in enumerate((50, 95, 99))),
            Metric("itl_p95_ms", lat["itl"][1], "ms", "lower"),
            Metric("e2e_p95_ms", lat["e2e"][1], "ms", "lower"),
            Metric("output_tokens_per_s", st.output_tokens_per_s, "tokens/s", "higher"),
            Metric("requests_per_s", st.requests_per_s, "req/s", "higher"),
            Metric("request_error_rate", st.error_rate, "fraction", "lower"),
        ])
        if st.error_rate > ERROR_RATE_WARNING:
            res.findings.append(self._errors(con, run_id, st.requests, st.errors, st.error_rate))
        p50, _, p99 = lat["ttft"]
        n_ok = st.requests - st.errors
        if (n_ok >= TTFT_TAIL_MIN_REQUESTS and p50 is not None and p99 is not None
                and p99 >= TTFT_TAIL_RATIO * p50 and p99 - p50 >= TTFT_TAIL_MIN_MS):
            res.findings.append(self._ttft_tail(p50, p99, st.ttft_prompt_corr, n_ok))
        tokens_per_s, sources = st.output_tokens_per_s, st.token_count_sources
        tpot50 = lat["tpot"][0]
        per_user = 1000.0 / tpot50 if tpot50 else None
        res.metrics.append(Metric("output_tokens_per_s_per_user", per_user, "tokens/s", "higher"))
        cost, why, evidence = self._cost(con, run_id, tokens_per_s)
        if cost is not None:
            res.metrics.append(Metric("usd_per_1m_output_tokens", cost, "USD/1M tokens", "lower"))
            res.findings.append(Finding(
                "info",
                f"${cost:.2f} per 1M output tokens at {tokens_per_s:,.0f} tokens/s"
                + (f" ({per_user:.0f} tokens/s per user)" if per_user else "")
                + f", {evidence['sheet']} prices for {evidence['instance_devices']} device(s)",
                f"{evidence['how']} Σ {evidence['usd_per_hour']:.2f} USD/h ÷ ({tokens_per_s:,.1f} output tokens/s × "
                f"3600) × 10⁶ = ${cost:.2f} per 1M output tokens, measured at a median "
                + (f"{per_user:.1f} output tokens/s per user (1000 ÷ TPOT p50 {tpot50:.2f} ms): the speed band "
                   "this price holds for; more concurrency buys tokens/s at the cost of each user's speed."
                   if per_user and tpot50 else "TPOT unknown (the speed band is not stated)."),
                {**evidence, "output_tokens_per_s": tokens_per_s, "output_tokens_per_s_per_user": per_user},
            ))
        else:
            res.findings.append(Finding(
                "info", "No cost per token: no device price",
                f"{why} Cost per token needs a price per device-hour: set price_per_hour_usd for the "
                "device in a user hardware file ($TRACEKIT_HARDWARE or ~/.config/tracekit/hardware.toml, "
                "docs/hardware.md).",
                {**evidence, "output_tokens_per_s": tokens_per_s, "token_count_sources": sources},
            ))
        self._server(con, run_id, res)
        turns = self._turns(con, run_id)
        if turns is not None:
            res.findings.append(turns)
        return res

    @staticmethod
    def _server(con: duckdb.DuckDBPyConnection, run_id: str, res: AnalyzerResult) -> None:
        """The server's own figures over the window (view ``server_metric_summary``), when it was scraped."""
        row = con.execute(
            """SELECT scrapes, prefix_cache_hit_rate, kv_cache_usage_p95, queue_depth_p95, preemptions,
                      output_tokens_per_s
               FROM server_metric_summary WHERE run_id = ?""", [run_id]).fetchone()
        if row is None:
            return
        scrapes, hit, kv95, q95, pre, server_tps = row
        res.metrics.extend([
            Metric("server_output_tokens_per_s", server_tps, "tokens/s", "higher"),
            Metric("prefix_cache_hit_rate", hit, "fraction", "higher"),
            Metric("kv_cache_usage_p95", kv95, "fraction", "lower"),
            Metric("queue_depth_p95", q95, "requests", "lower"),
            Metric("preemptions", pre, "requests", "lower"),
        ])
        if pre:
            res.findings.append(Finding(
                "warning", f"{pre:.0f} requests preempted: the KV cache ran full",
                f"The server preempted {pre:.0f} running requests in the window (KV-cache usage p95 "
                + (f"{100 * kv95:.0f} %" if kv95 is not None else "unknown")
                + "): their KV blocks were freed and their prefill is recomputed (or swapped back), which "
                "costs throughput and lengthens their latency. More KV-cache memory (a higher "
                "gpu-memory-utilization, a smaller weight or KV dtype, more tensor parallelism) or fewer "
                "concurrent sequences (max-num-seqs) stops it.",
                {"preemptions": pre, "kv_cache_usage_p95": kv95, "scrapes": scrapes},
            ))

    @staticmethod
    def _turns(con: duckdb.DuckDBPyConnection, run_id: str) -> Finding | None:
        """How TTFT grows over an agentic session's turns (view ``ttft_by_turn``)."""
        rows = con.execute(
            """SELECT turn, requests, prompt_tokens_mean, cached_share, ttft_p50_ms, ttft_p95_ms, ttft_p99_ms
               FROM ttft_by_turn WHERE run_id = ? AND requests >= ? ORDER BY turn""",
            [run_id, TURN_MIN_REQUESTS]).fetchall()
        if len(rows) < 2:
            return None
        first, last = rows[0], rows[-1]
        cached = [r[3] for r in rows if r[3] is not None]
        per_turn = [{"turn": int(r[0]), "requests": int(r[1]), "prompt_tokens_mean": r[2], "cached_share": r[3],
                     "ttft_p50_ms": r[4], "ttft_p95_ms": r[5], "ttft_p99_ms": r[6]} for r in rows]
        growth = last[5] / first[5] if first[5] else None
        return Finding(
            "info",
            f"TTFT p95 {first[5]:.1f} ms at turn {first[0]} → {last[5]:.1f} ms at turn {last[0]}"
            + (f" ({growth:.1f}×)" if growth else ""),
            f"Each turn of a session re-sends the whole conversation: the mean prompt grows from "
            f"{first[2]:.0f} to {last[2]:.0f} tokens over {len(rows)} turns"
            + (f", and the server's prefix cache served {100 * cached[-1]:.0f} % of the last turn's prompt "
               f"tokens ({100 * cached[0]:.0f} % of the first's)" if len(cached) >= 2 else "")
            + ". What is not served from the cache is prefilled again, so the tail of time to first token "
            "follows the context; prefix-aware routing keeps a session on the server that holds its prefix.",
            {"turns": per_turn, "ttft_p95_growth": growth},
        )

    @staticmethod
    def _errors(con: duckdb.DuckDBPyConnection, run_id: str, n: int, n_err: int, rate: float) -> Finding:
        top = con.execute(
            """SELECT error, status, count(*) AS n FROM requests WHERE run_id = ? AND error IS NOT NULL
               GROUP BY ALL ORDER BY n DESC, error LIMIT 5""",
            [run_id],
        ).fetchall()
        severity: Severity = "critical" if rate >= ERROR_RATE_CRITICAL else "warning"
        first = f"{top[0][0]} ({top[0][2]}×)" if top else ""
        return Finding(
            severity,
            f"{100 * rate:.1f} % of requests failed",
            f"{n_err} of {n} requests ended with an error; most frequent: {first}. Failed requests are "
            "left out of the latency percentiles and the throughput, so those flatter the server.",
            {"requests": n, "errors": n_err, "error_rate": rate,
             "top_errors": [{"error": e, "status": s, "count": int(c)} for e, s, c in top]},
        )

    @staticmethod
    def _ttft_tail(p50: float, p99: float, corr: float | None, n_ok: int) -> Finding:
        evidence: dict[str, Any] = {"ttft_p50_ms": p50, "ttft_p99_ms": p99, "ratio": p99 / p50 if p50 else None,
                                    "ttft_prompt_tokens_correlation": corr, "requests": n_ok}
        if corr is not None and corr >= PROMPT_CORRELATION:
            cause = (f"TTFT follows prompt length (correlation {corr:.2f}): the tail is the prefill of long "
                     "prompts; chunked prefill or a prefill-sized batch budget bounds it.")
        else:
            cause = ("TTFT does not follow prompt length: requests wait before their prefill starts (a full "
                     "batch, too few KV-cache blocks, or more concurrency than the server admits); raise "
                     "the batch/KV budget or lower the offered load.")
        return Finding(
            "warning",
            f"TTFT tail: p99 {p99:.1f} ms is {p99 / p50:.1f}× the p50 of {p50:.1f} ms",
            cause,
            evidence,
        )

    @staticmethod
    def _cost(
        con: duckdb.DuckDBPyConnection, run_id: str, tokens_per_s: float | None
    ) -> tuple[float | None, str, dict[str, Any]]:
        """(USD per 10⁶ output tokens or None, why not, evidence)."""
        cur = con.execute(
            """WITH used AS (SELECT DISTINCT rank, device FROM kernels WHERE run_id = $run)
               SELECT d.* FROM devices d
               WHERE d.run_id = $run
                 AND ((SELECT count(*) FROM used) = 0
                      OR EXISTS (SELECT 1 FROM used u
                                 WHERE u.rank = d.rank AND u.device IS NOT DISTINCT FROM d.device))
               ORDER BY d.rank, d.device""",
            {"run": run_id},
        )
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        if not rows:
            return None, "The run lists no accelerator device (a CPU capture has none).", {"devices": 0}
        tags = con.execute("SELECT tags FROM runs WHERE run_id = ?", [run_id]).fetchall()
        sheet = str((tags[0][0] or {}).get("price_sheet", "rented")) if tags else "rented"
        if sheet not in PRICE_SHEETS:
            return None, f"Unknown price sheet {sheet!r} (tag price_sheet: rented or owned).", {"devices": len(rows)}
        priced: list[dict[str, Any]] = []
        for row in rows:
            spec = identify(row)
            label = f"rank {row['rank']} device {row['device']} ({row.get('name') or row.get('device_type')})"
            if spec is None:
                return None, f"The device {label} is not identified in the hardware catalog.", {"devices": len(rows)}
            price = spec.price_per_hour_usd if sheet == "rented" else spec.owned_per_hour_usd()
            if price is None:
                need = ("price_per_hour_usd" if sheet == "rented"
                        else "owned_capex_usd, owned_years, owned_power_w and owned_usd_per_kwh")
                return None, (f"The device {label}, identified as {spec.key}, has no {sheet} price ({need})."), {
                    "devices": len(rows), "device": spec.key, "sheet": sheet}
            priced.append({"device": spec.key, "price_per_hour_usd": price})
        if not tokens_per_s:
            return None, "No output tokens were measured.", {"devices": len(rows)}
        # the whole serving instance: a rank-0 capture of a TP-8 server is one of 8 devices that
        # produced the measured tokens
        ranks = con.execute(
            """SELECT (SELECT tensor_parallel FROM run_models WHERE run_id = $run),
                      (SELECT max(world_size) FROM ranks WHERE run_id = $run)""", {"run": run_id}).fetchall()[0]
        instance, how = len(priced), f"The {len(priced)} device(s) of the trace,"
        tp, world = int(ranks[0] or 0), int(ranks[1] or 0)
        if world >= tp and world > len(priced):  # TP × DP (× PP) ranks all produced the measured tokens
            instance, how = world, (f"The whole instance: {world} devices (the trace's world size"
                                    + (f"; TP {tp} × {world // tp} data- or pipeline-parallel groups" if 0 < tp < world else "")
                                    + f"), {len(priced)} of them in the trace,")
        elif tp > len(priced):
            instance, how = tp, (f"The whole instance: {tp} devices (the attached model's tensor parallelism), "
                                 f"{len(priced)} of them in the trace,")
        usd_per_hour = sum(p["price_per_hour_usd"] for p in priced) * instance / len(priced)
        how += f" at the {sheet} price sheet:"
        return usd_per_hour / (tokens_per_s * 3600) * 1e6, "", {
            "devices": priced, "instance_devices": instance, "sheet": sheet, "usd_per_hour": usd_per_hour, "how": how}
