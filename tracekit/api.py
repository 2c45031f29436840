"""Read-side Python API used by the CLI (and by users): listing runs and read-only queries."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from tracekit.errors import QueryError
from tracekit.store import (
    default_store_path,
    first_line,
    match_run_id,
    open_store,
    resolve_run_id,
    update_run_meta,
    utc_now,
)

if TYPE_CHECKING:
    from tracekit.analysis.overview import Overview
    from tracekit.collectors.load import LoadResult

Rows = tuple[list[str], list[tuple[Any, ...]]]


def store_requests(run_id: str, result: LoadResult, store: str | Path | None = None) -> int:
    """Attach a load's request records to a run: :func:`tracekit.collectors.load.store_requests`
    (imported on use: the load driver's HTTP/SSL modules cost ~20 ms of every CLI start)."""
    from tracekit.collectors.load import store_requests as _store_requests

    return _store_requests(run_id, result, store)

RUNS_SQL = """
SELECT r.run_id, r.format, r.vendor, r.device_name, r.label, r.workload, r.n_ranks AS ranks,
       coalesce(k.n, 0) AS device_events,
       round(coalesce(k.busy_ns, 0) / 1e6, 3) AS device_time_ms,
       round(rk.span_ns / 1e6, 3) AS span_ms,
       r.captured_at, r.ingested_at, r.source
FROM runs r
LEFT JOIN (SELECT run_id, count(*) AS n, sum(dur_ns) AS busy_ns FROM kernels GROUP BY run_id) k
  USING (run_id)
LEFT JOIN (SELECT run_id, max(last_ns - first_ns) AS span_ns FROM ranks GROUP BY run_id) rk
  USING (run_id)
ORDER BY r.ingested_at DESC, r.run_id
"""


def list_runs(store: str | Path | None = None) -> Rows:
    """The store's runs with device-event count, summed device time (ms) and longest rank span (ms)."""
    return run_query(RUNS_SQL, store)


#: Statement kinds ``tracekit query`` runs: it reads. Anything else (INSERT, COPY, EXPORT, ATTACH,
#: SET, …) is refused by kind before DuckDB sees it; ``EXPLAIN`` only of a statement of these kinds.
_READS = frozenset({"SELECT", "EXPLAIN", "PRAGMA", "CALL"})


def _refuse_unless_read(con: duckdb.DuckDBPyConnection, statement: Any, path: Path) -> None:
    kind = statement.type.name
    if kind == "EXPLAIN":  # EXPLAIN ANALYZE runs its statement: check what it explains
        inner = re.sub(r"(?is)^\s*explain\s+(analy[sz]e\s+)?", "", statement.query)
        inner_statements = con.extract_statements(inner) if inner.strip() else []
        # what cannot be told apart (a comment before EXPLAIN, EXPLAIN of EXPLAIN) is refused
        kind = inner_statements[0].type.name if len(inner_statements) == 1 else "EXPLAIN"
        if kind == "EXPLAIN":
            kind = "EXPLAIN of an unrecognised statement"
    if kind not in _READS:
        raise QueryError(f"{path}: query: the store is read-only here ({kind} is refused); change runs "
                         "with `tracekit update` / `tracekit delete`, or copy rows out with --format csv")


def run_query(sql: str, store: str | Path | None = None) -> Rows:
    """Execute one read-only statement; return (column names, rows).

    The connection is read-only with external access disabled: statements that write, attach
    databases, read or write files are rejected by DuckDB and reported as :class:`QueryError`.
    """
    from tracekit.analysis import library

    path = Path(store) if store is not None else default_store_path()
    with open_store(path, read_only=True) as con:
        library.install(con)
        _register_functions(con)
        try:
            # DuckDB runs every statement of a script and returns the last one's rows: refuse a
            # script instead of silently dropping all but the last result
            statements = con.extract_statements(sql)
            if len(statements) != 1:
                raise QueryError(f"{path}: query: give exactly one SQL statement, got {len(statements)}")
            _refuse_unless_read(con, statements[0], path)
            rel = con.execute(sql)
            columns = [d[0] for d in rel.description] if rel.description else []
            rows = rel.fetchall() if rel.description else []
        except duckdb.OutOfMemoryException as exc:
            limit = os.environ.get("TRACEKIT_MEMORY_LIMIT") or "512MB"
            raise QueryError(f"TRACEKIT_MEMORY_LIMIT: {limit} is too little for this query "
                             f"({first_line(exc)}); raise it, e.g. TRACEKIT_MEMORY_LIMIT=4GB") from None
        except duckdb.Error as exc:
            raise QueryError(f"{path}: query failed: {first_line(exc)}") from None
        except RuntimeError as exc:  # DuckDB's answer to Ctrl-C: "Query interrupted"
            if "interrupt" in str(exc).lower():
                raise KeyboardInterrupt from None
            raise
    return columns, rows


def _register_functions(con: duckdb.DuckDBPyConnection) -> None:
    """The Python functions ``tracekit query`` offers besides the SQL library:
    ``short_kernel_name(name)`` (:func:`tracekit.names.short_kernel_name`, 60 characters), called
    once per row: group or filter first on large runs."""
    try:
        from duckdb.sqltypes import VARCHAR
    except ImportError:  # DuckDB 1.x
        from duckdb.typing import VARCHAR  # type: ignore[import-not-found,no-redef,unused-ignore]

    from tracekit.names import short_kernel_name

    def short(name: str) -> str:
        return short_kernel_name(name)

    con.create_function("short_kernel_name", short, [VARCHAR], VARCHAR, side_effects=False)


def top_activity(
    run_id: str, store: str | Path | None = None, limit: int = 5, *, con: duckdb.DuckDBPyConnection | None = None
) -> tuple[str, list[str], list[tuple[Any, ...]]]:
    """(title, columns, rows): a run's top device kernels by total time, or its top host ops
    (inclusive time) when the run has no device activity, e.g. a CPU capture. Times in ms.

    ``con``: query this open connection (e.g. an ingest's, before it commits) instead of opening
    ``store`` read-only."""

    def query(sql: str) -> Rows:
        if con is None:
            return run_query(sql, store)
        rel = con.execute(sql)
        return [d[0] for d in rel.description], rel.fetchall()

    columns, rows = query(
        f"""SELECT name, count(*) AS calls, sum(dur_ns) / 1e6 AS total_ms,
                   100 * sum(dur_ns) / sum(sum(dur_ns)) OVER () AS pct
            FROM kernels WHERE run_id = {_quote(run_id)}
            GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT {int(limit)}"""
    )
    if rows:
        return "top device kernels by total time", columns, rows
    columns, rows = query(
        f"""SELECT name, count(*) AS calls, sum(dur_ns) / 1e6 AS total_ms
            FROM ops WHERE run_id = {_quote(run_id)}
            GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT {int(limit)}"""
    )
    return "no device activity; top host ops by inclusive time", columns, rows


def ensure_analyzed(run_id: str, store: str | Path | None = None) -> tuple[str, bool]:
    """(the full run id of ``run_id`` — a unique prefix is enough —, whether it was analyzed now):
    a run with neither stored findings nor metrics is analyzed first (every registered analyzer,
    results stored), so the report and the summary always carry the analyzers' verdict."""
    path = Path(store) if store is not None else default_store_path()
    with open_store(path, read_only=True) as con:
        run_id = resolve_run_id(con, run_id, path)
        stored = con.execute("SELECT (SELECT count(*) FROM findings WHERE run_id = $1) + "
                             "(SELECT count(*) FROM metrics WHERE run_id = $1)", [run_id]).fetchall()[0][0]
    if stored:
        return run_id, False
    analyze_runs([run_id], path)
    return run_id, True


def run_summary(run_id: str, store: str | Path | None = None, *, top: int = 5, findings: int = 3,
                width: int = 44) -> Overview:
    """The one-screen overview of a run (:func:`tracekit.analysis.overview.run_overview`): device,
    headline KPIs with coverage, time by kernel class, top kernels, top findings. ``run_id`` may be
    a unique prefix. A run never analyzed is analyzed first (its findings stored), as the report
    does, so the overview always carries the analyzers' verdict."""
    from tracekit.analysis import library
    from tracekit.analysis.overview import run_overview

    path = Path(store) if store is not None else default_store_path()
    run_id, _ = ensure_analyzed(run_id, path)
    with open_store(path, read_only=True) as con:
        library.install(con)
        return run_overview(con, run_id, top=top, findings=findings, width=width)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def analyze_runs(
    run_ids: list[str], store: str | Path | None = None, *, only_new: bool = False
) -> list[dict[str, Any]]:
    """Run every registered analyzer on the runs (all runs without findings when ``only_new``
    and no ids are given), store the results, and return them as plain dicts."""
    from tracekit.analysis import analyze_run

    path = Path(store) if store is not None else default_store_path()
    with open_store(path) as con:
        known = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
        if not run_ids:
            done = {r[0] for r in con.execute("SELECT DISTINCT run_id FROM metric_rows").fetchall()}
            run_ids = sorted(known - done) if only_new else sorted(known)
        run_ids = list(dict.fromkeys(match_run_id(known, rid, path) for rid in run_ids))
        out = []
        # The writer connection runs DuckDB on one thread (cheap ingest, see store.connect); the
        # analyzers' sorts and joins over 1M-row runs use every core (benchmarks/bench_analyze.py),
        # still on this connection, so writes stay serialized by the store lock.
        threads = int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        con.execute(f"SET threads = {max(1, os.cpu_count() or 1)}")
        try:
            for rid in run_ids:
                results = analyze_run(con, rid)
                out.append(
                    {
                        "run_id": rid,
                        "findings": [
                            {"analyzer": name, **f.__dict__} for name, r in results.items() for f in r.findings
                        ],
                        "metrics": [
                            {"analyzer": name, **m.__dict__} for name, r in results.items() for m in r.metrics
                        ],
                    }
                )
        finally:
            con.execute(f"SET threads = {threads}")
    return out


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
    from tracekit.errors import TraceInputError

    path = Path(store) if store is not None else default_store_path()
    if con is not None:
        a, b = (resolve_run_id(con, x, path) for x in (a, b))
    else:
        with open_store(path, read_only=True) as c0:
            a, b = (resolve_run_id(c0, x, path) for x in (a, b))
    cats = ", ".join(f"({i}, {_quote(c)})" for i, c in enumerate(CATEGORIES))
    # one row per (run, name, category, hlo_category): the category regexes run once per distinct
    # kernel, not per row (1M-kernel runs: 40 ms instead of 2 s)
    per_kernel = f"""
        SELECT run_id, name, {category_case_sql()} AS cat, n, dur_ns
        FROM (SELECT run_id, name, category, hlo_category, count(*) AS n, sum(dur_ns) AS dur_ns
              FROM kernels WHERE run_id IN ({_quote(a)}, {_quote(b)}) AND category <> 'xla_async'
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
        LEFT JOIN s sa ON sa.cat = c.cat AND sa.run_id = {_quote(a)}
        LEFT JOIN s sb ON sb.cat = c.cat AND sb.run_id = {_quote(b)}
        LEFT JOIN t ta ON ta.run_id = {_quote(a)}
        LEFT JOIN t tb ON tb.run_id = {_quote(b)}
        ORDER BY c.ord"""
    top_sql = f"""
        WITH k AS ({per_kernel}),
        n AS (SELECT cat, name,
                     coalesce(sum(n) FILTER (WHERE run_id = {_quote(a)}), 0) AS a_kernels,
                     coalesce(sum(dur_ns) FILTER (WHERE run_id = {_quote(a)}), 0) AS a_ns,
                     coalesce(sum(n) FILTER (WHERE run_id = {_quote(b)}), 0) AS b_kernels,
                     coalesce(sum(dur_ns) FILTER (WHERE run_id = {_quote(b)}), 0) AS b_ns
              FROM k GROUP BY cat, name),
        r AS (SELECT *, row_number() OVER (PARTITION BY cat ORDER BY abs(b_ns - a_ns) DESC, name) AS rk
              FROM n WHERE (SELECT count(*) FROM n WHERE a_kernels > 0 AND b_kernels > 0) > 0)
        SELECT cat AS category, name, a_kernels, round(a_ns / 1e6, 3) AS a_ms, b_kernels,
               round(b_ns / 1e6, 3) AS b_ms, round((b_ns - a_ns) / 1e6, 3) AS delta_ms
        FROM r WHERE rk <= {int(top)} AND a_ns <> b_ns
        ORDER BY list_position([{", ".join(map(_quote, CATEGORIES))}], cat), rk"""
    def q(sql: str) -> Rows:
        if con is None:
            return run_query(sql, path)
        rel = con.execute(sql)
        return [d[0] for d in rel.description or []], rel.fetchall()

    known = {r[0] for r in q("SELECT run_id FROM runs")[1]}
    for rid in (a, b):
        if rid not in known:
            raise TraceInputError(path, f"no run {rid!r} in the store (see `tracekit runs`)")
    from tracekit.analysis.serving import METRICS as SERVING_METRICS

    serving_sql = f"""
        WITH m(ord, name) AS (VALUES {", ".join(f"({i}, {_quote(n)})" for i, n in enumerate(SERVING_METRICS))}),
        v AS (SELECT run_id, name, value, unit FROM metrics
              WHERE analyzer = 'serving' AND run_id IN ({_quote(a)}, {_quote(b)}))
        SELECT m.name AS metric, coalesce(va.unit, vb.unit) AS unit, round(va.value, 4) AS a,
               round(vb.value, 4) AS b, round(vb.value - va.value, 4) AS delta,
               round(100 * (vb.value - va.value) / nullif(va.value, 0), 1) AS delta_pct
        FROM m LEFT JOIN v va ON va.name = m.name AND va.run_id = {_quote(a)}
               LEFT JOIN v vb ON vb.name = m.name AND vb.run_id = {_quote(b)}
        WHERE va.value IS NOT NULL OR vb.value IS NOT NULL ORDER BY m.ord"""
    return {"a": a, "b": b, "categories": q(cat_sql), "top_kernels": q(top_sql), "serving": q(serving_sql)}


# ---------------------------------------------------------------------------------------------
# Chrome-trace (Perfetto) export

#: tracekit's device category → the Kineto ``cat`` that the Kineto parser maps back to it, so an
#: exported file re-ingests as the same device rows (``xla_async`` has no Kineto spelling and is
#: written as is; re-ingested it becomes a host event of category ``other``).
_KINETO_DEVICE_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset",
                      "mtia_ccp": "mtia_ccp_events"}

#: Host-event categories exported through the ops, runtime_calls and annotations views; every other
#: category (XPlane TraceMe rows, XLA module spans, syncs, Python frames, ...) is exported as is,
#: with its stored category as ``cat``.
_VIEWED_HOST = "('op', 'runtime', 'driver', 'annotation', 'gpu_annotation', 'step')"

#: Rows fetched from DuckDB per batch while streaming the events out.
EXPORT_BATCH_ROWS = 50_000

#: Evidence keys (integer ns on the trace clock) that place a finding's instant event.
_EVIDENCE_TIME_KEYS = ("start_ns", "window_start_ns", "first_start_ns", "ts_ns")


def _us(col: str) -> str:
    """SQL: an integer-ns column as the exact decimal text of µs with 3 decimals (no float)."""
    return (f"(CASE WHEN {col} < 0 THEN '-' ELSE '' END || (abs({col}) // 1000)::VARCHAR || '.' "
            f"|| lpad((abs({col}) % 1000)::VARCHAR, 3, '0'))")


def _us_text(ns: int) -> str:
    return f"{'-' if ns < 0 else ''}{abs(ns) // 1000}.{abs(ns) % 1000:03d}"


def export_perfetto(run_id: str, path: str | Path, store: str | Path | None = None, *,
                    force: bool = False) -> dict[str, Any]:
    """Write one run as a Chrome-trace JSON file (opens in ui.perfetto.dev and chrome://tracing).

    Device activity is ``ph: "X"`` on one process per (rank, device) and one thread per stream;
    host ops, runtime/driver calls, annotations and every other host event (XPlane TraceMe rows,
    XLA module spans, syncs; ``cat`` = the stored category) are ``ph: "X"`` on one process per
    rank and one thread per host thread; every runtime call with device activity gets a flow (``s``/``f``,
    ``id`` = correlation id, ``bp: "e"``) to its first kernel; stored findings become global
    instant events. ``ts``/``dur`` are µs written as exact decimals of the stored integer ns.
    ``cat`` is the Kineto category (``kernel``, ``gpu_memcpy``, ``cpu_op``, ``cuda_runtime``, ...)
    so the file re-ingests as a Kineto trace. Events are produced as JSON text by DuckDB and
    streamed to a temporary file in batches, then renamed onto ``path``
    (:func:`tracekit.outputs.open_output`: never onto a store, a directory or a device, and onto
    an existing file only with ``force``).

    Returns the counts written: events per kind, flows, findings, processes, threads.
    """
    from tracekit.errors import TraceInputError
    from tracekit.outputs import check_output, open_output

    store_path = Path(store) if store is not None else default_store_path()
    out_path = Path(path)
    check_output(out_path, store=store_path, force=force)  # before any work: a refused path fails fast
    counts: dict[str, Any] = {}
    with open_store(store_path, read_only=True) as con:
        run_id = resolve_run_id(con, run_id, store_path)
        run = con.execute(
            "SELECT format, vendor, device_name, label, workload, n_ranks FROM runs WHERE run_id = ?",
            [run_id],
        ).fetchall()
        if not run:
            raise TraceInputError(store_path, f"no run {run_id!r} in the store (see `tracekit runs`)")
        fmt, vendor, device_name, label, workload, n_ranks = run[0]
        con.execute("DROP TABLE IF EXISTS temp.tk_threads")
        con.execute(
            f"""CREATE TEMP TABLE tk_threads AS
            WITH t AS (
                SELECT DISTINCT rank, 'device' AS side, device, stream AS thread FROM kernels WHERE run_id = $r
                UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM ops WHERE run_id = $r
                UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM runtime_calls WHERE run_id = $r
                UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM annotations WHERE run_id = $r
                UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM host_events
                      WHERE run_id = $r AND category NOT IN {_VIEWED_HOST})
            SELECT rank, side, device, thread,
                   dense_rank() OVER (ORDER BY rank, side DESC, device) AS pid,
                   row_number() OVER (PARTITION BY rank, side, device
                                      ORDER BY TRY_CAST(thread AS BIGINT) NULLS LAST, thread) AS tid
            FROM t""",
            {"r": run_id},
        )
        threads = con.execute(
            "SELECT rank, side, device, thread, pid, tid FROM tk_threads ORDER BY pid, tid"
        ).fetchall()
        window = con.execute(
            "SELECT min(first_ns), max(last_ns) FROM ranks WHERE run_id = ?", [run_id]
        ).fetchall()[0]
        findings = con.execute(
            """SELECT analyzer, severity, title, detail, evidence::VARCHAR, saving_ns, saving_fraction
               FROM findings WHERE run_id = ? ORDER BY analyzer, title""",
            [run_id],
        ).fetchall()
        analyzed = bool(con.execute(
            "SELECT count(*) FROM metric_rows WHERE run_id = ?", [run_id]
        ).fetchall()[0][0]) or bool(findings)

        kineto_dev = "CASE k.category " + " ".join(
            f"WHEN '{k}' THEN '{v}'" for k, v in _KINETO_DEVICE_CAT.items()) + " ELSE k.category END"
        kineto_host = "h.category"
        def x(cat: str, name: str, s: str, d: str, args: str) -> str:
            return ("""'{"ph":"X","cat":' || to_json(""" + cat + """) || ',"name":' || to_json(""" + name
                    + """) || ',"pid":' || m.pid || ',"tid":' || m.tid || ',"ts":' || """ + _us(s)
                    + """ || ',"dur":' || """ + _us(d) + """ || ',"args":' || to_json(""" + args + """) || '}'""")

        queries: list[tuple[str, str]] = [
            ("kernels", f"""
                SELECT {x(cat=kineto_dev, name='k.name', s='k.start_ns', d='k.dur_ns', args='''struct_pack(
                    device := k.device, stream := k.stream, correlation := k.correlation_id,
                    "External id" := k.external_id, category := k.category,
                    trace_category := k.trace_category, grid := CASE WHEN k.grid_x IS NOT NULL THEN [k.grid_x, k.grid_y, k.grid_z] END,
                    block := CASE WHEN k.block_x IS NOT NULL THEN [k.block_x, k.block_y, k.block_z] END, "bytes" := k.bytes,
                    kind := k.kind, hlo_category := k.hlo_category)''')}
                FROM kernels k JOIN tk_threads m
                  ON m.side = 'device' AND m.rank = k.rank AND m.device IS NOT DISTINCT FROM k.device
                 AND m.thread IS NOT DISTINCT FROM k.stream
                WHERE k.run_id = $r ORDER BY k.rank, k.start_ns"""),
            ("ops", f"""
                SELECT {x(cat="'cpu_op'", name='h.name', s='h.start_ns', d='h.dur_ns', args='''struct_pack(
                    "External id" := h.external_id, "Sequence number" := h.sequence_number,
                    "Input Dims" := h.input_dims::JSON, "Input type" := h.input_types::JSON,
                    flops := h.flops, tid := h.tid)''')}
                FROM ops h JOIN tk_threads m
                  ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
                WHERE h.run_id = $r ORDER BY h.rank, h.start_ns"""),
            ("runtime_calls", f"""
                SELECT {x(cat=kineto_host, name='h.name', s='h.start_ns',
                                 d='h.dur_ns', args='''struct_pack(
                    correlation := h.correlation_id, "External id" := h.external_id, cbid := h.cbid,
                    tid := h.tid)''')}
                FROM (SELECT *, CASE WHEN trace_category IN ('cuda_driver', 'cuda_runtime', 'Runtime', 'mtia_runtime')
                      THEN trace_category ELSE 'cuda_runtime' END AS category FROM runtime_calls) h JOIN tk_threads m
                  ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
                WHERE h.run_id = $r ORDER BY h.rank, h.start_ns"""),
            ("annotations", f"""
                SELECT {x(cat="CASE WHEN h.on_device THEN 'gpu_user_annotation' ELSE 'user_annotation' END",
                                 name='h.name', s='h.start_ns', d='h.dur_ns', args='''struct_pack(
                    "External id" := h.external_id, on_device := h.on_device, step_num := h.step_num,
                    tid := h.tid)''')}
                FROM annotations h JOIN tk_threads m
                  ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
                WHERE h.run_id = $r ORDER BY h.rank, h.start_ns"""),
            ("host_events", f"""
                SELECT {x(cat='h.category', name='h.name', s='h.start_ns', d='h.dur_ns', args='''struct_pack(
                    category := h.category, trace_category := h.trace_category, device := h.device,
                    correlation := h.correlation_id, tid := h.tid)''')}
                FROM host_events h JOIN tk_threads m
                  ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
                WHERE h.run_id = $r AND h.category NOT IN {_VIEWED_HOST} ORDER BY h.rank, h.start_ns"""),
            ("flows", """
                WITH pairs AS (
                    SELECT c.rank, c.correlation_id,
                           arg_min(c.start_ns, c.start_ns) AS c_start, arg_min(c.tid, c.start_ns) AS c_tid,
                           arg_min(k.start_ns, k.start_ns) AS k_start,
                           arg_min(k.device, k.start_ns) AS k_device, arg_min(k.stream, k.start_ns) AS k_stream
                    FROM runtime_calls c JOIN kernels k
                      ON k.run_id = c.run_id AND k.rank = c.rank AND k.correlation_id = c.correlation_id
                    WHERE c.run_id = $r AND c.correlation_id IS NOT NULL
                    GROUP BY c.rank, c.correlation_id)
                SELECT '{"ph":"s","cat":"ac2g","name":' || to_json('ac2g' || CASE WHEN p.rank = 0 THEN ''
                           ELSE ' rank ' || p.rank END) || ',"id":' || p.correlation_id
                       || ',"pid":' || mh.pid || ',"tid":' || mh.tid || ',"ts":' || """ + _us("p.c_start") + """ || '}'
                       || E'\\n,' ||
                       '{"ph":"f","bp":"e","cat":"ac2g","name":' || to_json('ac2g' || CASE WHEN p.rank = 0 THEN ''
                           ELSE ' rank ' || p.rank END) || ',"id":' || p.correlation_id
                       || ',"pid":' || md.pid || ',"tid":' || md.tid || ',"ts":' || """ + _us("p.k_start") + """ || '}'
                FROM pairs p
                JOIN tk_threads mh ON mh.side = 'host' AND mh.rank = p.rank AND mh.thread IS NOT DISTINCT FROM p.c_tid
                JOIN tk_threads md ON md.side = 'device' AND md.rank = p.rank
                 AND md.device IS NOT DISTINCT FROM p.k_device AND md.thread IS NOT DISTINCT FROM p.k_stream
                ORDER BY p.rank, p.c_start"""),
        ]

        meta_events: list[dict[str, Any]] = []
        seen_pids: set[int] = set()
        for rank, side, device, thread, pid, tid in threads:
            if pid not in seen_pids:
                seen_pids.add(pid)
                pname = f"rank {rank} device {device}" if side == "device" else f"rank {rank} host"
                meta_events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                    "args": {"name": pname}})
                meta_events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                    "args": {"sort_index": pid}})
            tname = f"stream {thread}" if side == "device" else f"thread {thread}"
            meta_events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                "args": {"name": tname}})

        start = window[0] if window[0] is not None else 0
        finding_meta: list[dict[str, Any]] = []
        instant_lines: list[str] = []
        for analyzer, severity, title, detail, evidence, saving_ns, saving_fraction in findings:
            ev = json.loads(evidence) if evidence else None
            at = start
            if isinstance(ev, dict):
                for key in _EVIDENCE_TIME_KEYS:
                    if isinstance(ev.get(key), int) and not isinstance(ev.get(key), bool):
                        at = ev[key]
                        break
            item = {"analyzer": analyzer, "severity": severity, "title": title, "detail": detail,
                    "saving_ns": saving_ns, "saving_fraction": saving_fraction, "ts_ns": at}
            finding_meta.append({**item, "evidence": ev})
            args = {k: item[k] for k in ("detail", "severity", "analyzer", "saving_ns", "saving_fraction")}
            instant_lines.append(
                '{"ph":"i","s":"g","cat":"tracekit_finding","name":' + json.dumps(title)
                + ',"pid":' + str(min(seen_pids, default=1)) + ',"tid":0,"ts":' + _us_text(at)
                + ',"args":' + json.dumps(args, default=str) + "}"
            )

        metadata = {
            "tracekit": {"version": _version(), "run_id": run_id, "store": str(store_path)},
            "run": {"format": fmt, "vendor": vendor, "device_name": device_name, "label": label,
                    "workload": workload, "ranks": n_ranks},
            "window_ns": [window[0], window[1]],
            "analyzed": analyzed,
            "findings_present": bool(findings),
            "findings": finding_meta,
            "processes": len(seen_pids),
        }
        try:
            with open_output(out_path, store=store_path, force=force) as fh:
                fh.write('{"displayTimeUnit":"ns","traceEvents":[\n')
                first = True

                def write_lines(lines: list[str]) -> None:
                    nonlocal first
                    if not lines:
                        return
                    fh.write(("" if first else "\n,") + "\n,".join(lines))
                    first = False

                write_lines([json.dumps(e) for e in meta_events])
                for kind, sql in queries:
                    res = con.execute(sql, {"r": run_id})
                    n = 0
                    while True:
                        batch = res.fetchmany(EXPORT_BATCH_ROWS)
                        if not batch:
                            break
                        n += len(batch)
                        write_lines([row[0] for row in batch])
                    counts[kind] = n
                write_lines(instant_lines)
                counts["findings"] = len(instant_lines)
                counts["processes"] = len(seen_pids)
                counts["threads"] = len(threads)
                metadata["counts"] = counts
                fh.write("\n],\n\"metadata\":" + json.dumps(metadata, default=str) + "}\n")
        finally:
            con.execute("DROP TABLE IF EXISTS temp.tk_threads")
    return counts


def _version() -> str:
    from tracekit import __version__

    return __version__


def update_runs(
    run_ids: list[str], store: str | Path | None = None, *, label: str | None = None, workload: str | None = None,
    tags: dict[str, str] | None = None,
) -> dict[str, list[str]]:
    """Set the label and workload and merge tags of runs (ids or unique prefixes), in one
    transaction; return each full run id with the fields that changed."""
    path = Path(store) if store is not None else default_store_path()
    with open_store(path) as con:
        ids = list(dict.fromkeys(resolve_run_id(con, r, path) for r in run_ids))
        con.execute("BEGIN")
        try:
            out = {rid: update_run_meta(con, rid, label=label, workload=workload, tags=tags) for rid in ids}
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return out


def delete_runs(run_ids: list[str], store: str | Path | None = None) -> list[str]:
    """Remove runs (ids or unique prefixes) with all their rows in one transaction; return their ids."""
    from tracekit.store import delete_runs as _delete

    path = Path(store) if store is not None else default_store_path()
    with open_store(path) as con:
        ids = list(dict.fromkeys(resolve_run_id(con, r, path) for r in run_ids))
        _delete(con, ids)
    return ids


def attach_model(
    run_id: str,
    model: str,
    store: str | Path | None = None,
    *,
    tp: int | None = None,
    weights: str | None = None,
    expert_weights: str | None = None,
    kv_cache: str | None = None,
) -> dict[str, Any]:
    """Attach the model a run served (a catalog name or a Hugging Face ``config.json`` path,
    :func:`tracekit.analysis.models.load`) so the analyzers cost its steps by what they must move.

    ``tp``: ranks the weights are split over; without it the trace's world size
    (``ranks.world_size``, else 1), and ``tp_source`` says which. ``weights``/``expert_weights``/
    ``kv_cache`` override the storage formats. Replaces an earlier attachment; returns the stored
    row as a dict (``model``, ``origin``, ``tensor_parallel``, ``tp_source``)."""
    from tracekit.analysis import models
    from tracekit.errors import TraceInputError

    try:
        spec = models.load(model, weights=weights, expert_weights=expert_weights, kv_cache=kv_cache)
    except models.ModelError as exc:
        raise TraceInputError(Path(model), str(exc).removeprefix(f"{model}: ")) from None
    if tp is not None and tp < 1:
        raise TraceInputError(Path(model), f"--tp must be ≥ 1, got {tp}")
    path = Path(store) if store is not None else default_store_path()
    with open_store(path) as con:
        run_id = resolve_run_id(con, run_id, path)
        if tp is None:
            ws = con.execute("SELECT max(world_size) FROM ranks WHERE run_id = ?", [run_id]).fetchall()[0][0]
            if ws:
                tp, tp_source = int(ws), "the trace's world size (ranks.world_size)"
            else:
                tp, tp_source = 1, "default (no world size in the trace)"
        else:
            tp_source = "--tp"
        row = {"model": spec.key, "origin": spec.origin, "tensor_parallel": tp, "tp_source": tp_source}
        con.execute("BEGIN")
        con.execute("DELETE FROM model_rows WHERE run_id = ?", [run_id])
        con.execute("INSERT INTO model_rows VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [run_id, spec.key, spec.origin, models.to_json(spec), tp, tp_source,
                     json.dumps(spec.step_constants(tp)), utc_now()])
        con.execute("COMMIT")
    return row


def store_token_lengths(run_id: str, lengths_file: str | Path, store: str | Path | None = None) -> int:
    """Attach real (and padded) token counts per request to a run, for the padding analysis.

    The file has one request per line: ``real`` or ``real,padded`` (comma, tab or spaces; a
    header line and ``#`` comments are skipped). Without ``padded`` the request ran unpadded.
    Replaces the run's previous lengths; returns the number of requests stored.
    """
    from tracekit.errors import TraceInputError

    src = Path(lengths_file)
    try:
        text = src.read_text()
    except OSError as exc:
        raise TraceInputError(src, f"cannot read: {exc.strerror or exc}") from None
    rows: list[tuple[str, int, int, int, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = [f for f in re.split(r"[,\s]+", line.split("#", 1)[0].strip()) if f]
        if not fields:
            continue
        if not fields[0].isdigit():
            if rows or n > 1:
                raise TraceInputError(src, f"line {n}: expected 'real[,padded]' token counts, got {line.strip()!r}")
            continue  # a header
        if len(fields) > 2 or not all(f.isdigit() for f in fields):
            raise TraceInputError(src, f"line {n}: expected 'real[,padded]' token counts, got {line.strip()!r}")
        real = int(fields[0])
        padded = int(fields[1]) if len(fields) == 2 else real
        if padded < real:
            raise TraceInputError(src, f"line {n}: padded length {padded} is below the real length {real}")
        rows.append((run_id, len(rows), real, padded, str(src)))
    if not rows:
        raise TraceInputError(src, "no token counts found")
    path = Path(store) if store is not None else default_store_path()
    with open_store(path) as con:
        run_id = resolve_run_id(con, run_id, path)
        con.execute("BEGIN")
        con.execute("DELETE FROM token_length_rows WHERE run_id = ?", [run_id])
        con.executemany("INSERT INTO token_length_rows VALUES (?, ?, ?, ?, ?)", rows)
        con.execute("COMMIT")
    return len(rows)
