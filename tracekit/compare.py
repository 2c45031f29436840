"""Two runs side by side (``tracekit compare``, the dashboard's Compare page, ``tracekit check``'s
regression detail): device time per kernel category, the kernels that moved most, and the
``serving`` analyzer's metrics. Read-only; the rows are rendered by the caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from tracekit.errors import TraceInputError
from tracekit.queries import read_rows
from tracekit.sql_text import quote
from tracekit.store import open_store, resolve_run_id, resolve_store

COMPARE_TOP_KERNELS = 5  # kernels per category in compare_runs' top_kernels table


def compare_runs(
    a: str, b: str, store: str | Path | None = None, *, top: int = COMPARE_TOP_KERNELS,
    con: duckdb.DuckDBPyConnection | None = None,
) -> dict[str, Any]:
    """Per-category device time of two runs (any vendors) and the change B − A.

    Rows are the ``kernels`` view's rows of each run, classified by
    :func:`tracekit.analysis.categories.category_case_sql`; XPlane ``xla_async`` rows (the
    in-flight spans of async TPU ops, which overlap the ops on the ``XLA Ops`` line) are left
    out. Returns ``{"a", "b", "categories": Rows, "top_kernels": Rows}``: ``categories`` has one
    row per category in :data:`~tracekit.analysis.categories.CATEGORIES` order with each run's
    kernel count, device time (ms, summed ``dur_ns`` over all ranks and streams), share of that
    run's device time (%), ``delta_ms`` = B − A and ``delta_pct`` = 100·(B − A)/A (NULL when A is
    0). ``top_kernels`` (empty when the runs share no kernel name) has, per category, the ``top``
    names with the largest absolute change in summed time (a name missing from one run counts 0
    there). ``con``: an open read-only connection to use instead of opening the store (the
    dashboard renders a page on one connection). ``serving`` (empty unless a run was load-driven
    and analyzed) has the ``serving`` analyzer's stored metrics side by side: ``metric``, ``unit``,
    ``a``, ``b``, ``delta`` = B − A and ``delta_pct`` = 100·(B − A)/A.
    """
    from tracekit.analysis.categories import CATEGORIES, category_case_sql

    path = resolve_store(store)
    if con is not None:
        a, b = (resolve_run_id(con, x, path) for x in (a, b))
    else:
        with open_store(path, read_only=True) as c0:
            a, b = (resolve_run_id(c0, x, path) for x in (a, b))
    cats = ", ".join(f"({i}, {quote(c)})" for i, c in enumerate(CATEGORIES))
    # one row per (run, name, category, hlo_category): the category regexes run once per distinct
    # kernel, not per row (1M-kernel runs: 40 ms instead of 2 s)
    per_kernel = f"""
        SELECT run_id, name, {category_case_sql()} AS cat, n, dur_ns
        FROM (SELECT run_id, name, category, hlo_category, count(*) AS n, sum(dur_ns) AS dur_ns
              FROM kernels WHERE run_id IN ({quote(a)}, {quote(b)}) AND category <> 'xla_async'
              GROUP BY ALL)"""
    cat_sql = f"""
        WITH k AS ({per_kernel}),
        s AS (SELECT run_id, cat, sum(n) AS n, sum(dur_ns) AS ns FROM k GROUP BY run_id, cat),
        t AS (SELECT run_id, sum(ns) AS total FROM s GROUP BY run_id),
        c(ord, cat) AS (VALUES {cats})
        SELECT c.cat AS category,
               coalesce(sa.n, 0) AS a_kernels,
               round(coalesce(sa.ns, 0) / 1e6, 3) AS a_ms,
               round(100 * coalesce(sa.ns, 0) / nullif(ta.total, 0), 1) AS a_pct,
               coalesce(sb.n, 0) AS b_kernels,
               round(coalesce(sb.ns, 0) / 1e6, 3) AS b_ms,
               round(100 * coalesce(sb.ns, 0) / nullif(tb.total, 0), 1) AS b_pct,
               round((coalesce(sb.ns, 0) - coalesce(sa.ns, 0)) / 1e6, 3) AS delta_ms,
               round(100 * (coalesce(sb.ns, 0) - coalesce(sa.ns, 0)) / nullif(sa.ns, 0), 1) AS delta_pct
        FROM c
        LEFT JOIN s sa ON sa.cat = c.cat AND sa.run_id = {quote(a)}
        LEFT JOIN s sb ON sb.cat = c.cat AND sb.run_id = {quote(b)}
        LEFT JOIN t ta ON ta.run_id = {quote(a)}
        LEFT JOIN t tb ON tb.run_id = {quote(b)}
        ORDER BY c.ord"""
    top_sql = f"""
        WITH k AS ({per_kernel}),
        n AS (SELECT cat, name,
                     coalesce(sum(n) FILTER (WHERE run_id = {quote(a)}), 0) AS a_kernels,
                     coalesce(sum(dur_ns) FILTER (WHERE run_id = {quote(a)}), 0) AS a_ns,
                     coalesce(sum(n) FILTER (WHERE run_id = {quote(b)}), 0) AS b_kernels,
                     coalesce(sum(dur_ns) FILTER (WHERE run_id = {quote(b)}), 0) AS b_ns
              FROM k GROUP BY cat, name),
        r AS (SELECT *, row_number() OVER (PARTITION BY cat ORDER BY abs(b_ns - a_ns) DESC, name) AS rk
              FROM n WHERE (SELECT count(*) FROM n WHERE a_kernels > 0 AND b_kernels > 0) > 0)
        SELECT cat AS category, name, a_kernels, round(a_ns / 1e6, 3) AS a_ms, b_kernels,
               round(b_ns / 1e6, 3) AS b_ms, round((b_ns - a_ns) / 1e6, 3) AS delta_ms
        FROM r WHERE rk <= {int(top)} AND a_ns <> b_ns
        ORDER BY list_position([{", ".join(map(quote, CATEGORIES))}], cat), rk"""

    known = {r[0] for r in read_rows("SELECT run_id FROM runs", path, con)[1]}
    for rid in (a, b):
        if rid not in known:
            raise TraceInputError(path, f"no run {rid!r} in the store (see `tracekit runs`)")
    from tracekit.analysis.serving import METRICS as SERVING_METRICS

    serving_sql = f"""
        WITH m(ord, name) AS (VALUES {", ".join(f"({i}, {quote(n)})" for i, n in enumerate(SERVING_METRICS))}),
        v AS (SELECT run_id, name, value, unit FROM metrics
              WHERE analyzer = 'serving' AND run_id IN ({quote(a)}, {quote(b)}))
        SELECT m.name AS metric, coalesce(va.unit, vb.unit) AS unit, round(va.value, 4) AS a,
               round(vb.value, 4) AS b, round(vb.value - va.value, 4) AS delta,
               round(100 * (vb.value - va.value) / nullif(va.value, 0), 1) AS delta_pct
        FROM m LEFT JOIN v va ON va.name = m.name AND va.run_id = {quote(a)}
               LEFT JOIN v vb ON vb.name = m.name AND vb.run_id = {quote(b)}
        WHERE va.value IS NOT NULL OR vb.value IS NOT NULL ORDER BY m.ord"""
    return {"a": a, "b": b, "categories": read_rows(cat_sql, path, con),
            "top_kernels": read_rows(top_sql, path, con), "serving": read_rows(serving_sql, path, con)}


