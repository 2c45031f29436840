"""The analysis SQL library: DuckDB views and macros in ``tracekit/analysis/sql/*.sql``, installed
as TEMP objects on a connection (read-only connections included), so the analyzers, ``report``,
``compare``, ``check``, the dashboard and ``tracekit query`` all read the same building blocks.

Modelled on Perfetto's trace-processor standard library: each object is preceded by a comment
block that documents it and every column it returns::

    -- One row per idle gap of a device inside the run window, with its cause.
    -- @column run_id    VARCHAR  the run
    -- @column dur_ns    BIGINT   the gap's length (ns)
    CREATE OR REPLACE TEMP VIEW idle_gaps AS ...;

``@column NAME TYPE description`` (one per output column, in order), ``@arg NAME TYPE
description`` for a macro's parameters and ``@returns TYPE description`` for a scalar macro.
:func:`objects` parses the blocks; the test suite fails when a view's or table macro's actual
columns differ from the documented ones, and ``docs/sql.md`` is generated from the same text
(:func:`markdown`). Files are installed in :data:`FILES` order (later files use earlier ones).

Placeholders ``{name}`` in a file are filled from :func:`_placeholders` (the one kernel-class
``CASE`` of :mod:`tracekit.analysis.categories`, the thresholds below), so Python and SQL share
one definition of each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import duckdb

from tracekit.sql_text import quote
from tracekit.sqldoc import comment_block, parse_block, split_word, statements

#: Library files in install order.
FILES = ("classes.sql", "timeline.sql", "idle.sql", "steps.sql", "workload.sql", "fusion.sql", "communication.sql",
         "models.sql", "serving.sql")

#: A device timeline is cut into separate sessions at gaps longer than this (ns): a run stitched
#: from unrelated captures (days apart) is judged on its busiest session, the rest reported as
#: trimmed. One minute: longer than any compile, warm-up or data-loading stall seen in the corpus
#: (the TPU v6e capture's 5.5 s gaps stay inside the window), shorter than the gap between two
#: separate captures.
SESSION_GAP_NS = 60_000_000_000
#: A gap shorter than this with work already queued is launch overhead between kernels (HTA's 30 µs).
KERNEL_WAIT_NS = 30_000
#: A host span explains an idle gap when it covers at least this share of it.
CAUSE_MIN_COVER = 0.5


@dataclass
class Column:
    name: str
    type: str
    doc: str


@dataclass
class SqlObject:
    """One documented view or macro of the library."""

    kind: str  # 'view' | 'macro' | 'table_macro'
    name: str
    doc: str
    file: str
    sql: str
    columns: list[Column] = field(default_factory=list)
    args: list[Column] = field(default_factory=list)
    returns: str | None = None


_CREATE = re.compile(
    r"^CREATE\s+OR\s+REPLACE\s+TEMP\s+(VIEW|MACRO)\s+([a-z_][a-z0-9_]*)", re.IGNORECASE | re.MULTILINE
)


def _placeholders() -> dict[str, str]:
    from tracekit.analysis.categories import category_case_sql

    return {
        "kernel_class_case": category_case_sql("name", "category", "hlo_category"),
        "session_gap_ns": str(SESSION_GAP_NS),
        "kernel_wait_ns": str(KERNEL_WAIT_NS),
        "cause_min_cover": repr(CAUSE_MIN_COVER),
    }


def _read(name: str) -> str:
    return resources.files("tracekit.analysis").joinpath("sql", name).read_text(encoding="utf-8")


@cache
def objects() -> tuple[SqlObject, ...]:
    """Every documented object of the library, in install order, with its SQL filled in."""
    fill = _placeholders()
    out: list[SqlObject] = []
    for fname in FILES:
        for stmt in statements(_read(fname)):
            m = _CREATE.search(stmt)
            if not m:
                continue
            block = comment_block(stmt[: m.start()])
            body = stmt[m.start():]
            for key, value in fill.items():
                body = body.replace("{" + key + "}", value)
            kind = m.group(1).lower()
            if kind == "macro":
                kind = "table_macro" if re.search(r"\)\s+AS\s+TABLE\b", body, re.IGNORECASE) else "macro"
            doc, tags = parse_block(block)
            obj = SqlObject(kind=kind, name=m.group(2), doc=doc, file=fname, sql=body)
            for tag, rest in tags:
                if tag == "returns":
                    obj.returns = rest
                    continue
                name, more = split_word(rest)
                typ, text = split_word(more)
                (obj.columns if tag == "column" else obj.args).append(Column(name, typ, text))
            out.append(obj)
    return tuple(out)


def _stub(o: SqlObject) -> str:
    """A view with ``o``'s documented columns and types and no rows (binds in microseconds)."""
    cols = ", ".join(f"CAST(NULL AS {c.type}) AS {c.name}" for c in o.columns)
    return f"CREATE OR REPLACE TEMP VIEW {o.name} AS SELECT {cols} WHERE false;"


#: Store views newer than schema 2, as empty stand-ins for a store opened read-only before its
#: migration (read-only opens never migrate): an older store simply has no model attached.
_NEWER_STORE_VIEWS = {
    "server_metrics": ("SELECT NULL::VARCHAR AS run_id, NULL::BIGINT AS t_ns, NULL::VARCHAR AS name, "
                       "NULL::VARCHAR AS labels, NULL::DOUBLE AS value WHERE false"),
    "run_models": (
        "SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS model, NULL::VARCHAR AS origin, NULL::JSON AS spec, "
        "NULL::INTEGER AS tensor_parallel, NULL::VARCHAR AS tp_source, NULL::DOUBLE AS weight_bytes_fixed, "
        "NULL::DOUBLE AS expert_bytes, NULL::INTEGER AS num_experts, NULL::INTEGER AS experts_per_token, "
        "NULL::DOUBLE AS kv_bytes_per_token_global, NULL::DOUBLE AS kv_bytes_per_token_window, "
        "NULL::BIGINT AS sliding_window, NULL::DOUBLE AS flops_per_token, NULL::DOUBLE AS lm_head_flops_per_seq, "
        "NULL::DOUBLE AS attn_flops_per_pair_global, NULL::DOUBLE AS attn_flops_per_pair_window, "
        "NULL::DOUBLE AS activation_bytes_per_token, NULL::DOUBLE AS embedding_bytes, NULL::TIMESTAMP AS attached_at "
        "WHERE false"),
}


def _older_store_stubs(con: duckdb.DuckDBPyConnection) -> None:
    have = {r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE view_name IN ? AND database_name = current_database()",
        [list(_NEWER_STORE_VIEWS)]).fetchall()}
    for name, body in _NEWER_STORE_VIEWS.items():
        if name not in have:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {body}")
    # a schema-5 store file read before its migration: its requests view has no session columns
    # (schema 6). Only a store's own view: a lake's views are TEMP views of the current schema.
    cols = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE column_name = 'turn') FROM duckdb_columns() "
        "WHERE table_name = 'requests' AND database_name = current_database() AND schema_name = 'main'").fetchone()
    db = con.execute("SELECT current_database()").fetchone()
    if cols is not None and cols[0] and not cols[1] and db is not None:
        ident = '"' + str(db[0]).replace('"', '""') + '"'
        con.execute(f"CREATE OR REPLACE TEMP VIEW requests AS SELECT *, NULL::BIGINT AS session_id, "
                    f"NULL::INTEGER AS turn, NULL::BIGINT AS cached_tokens FROM {ident}.main.requests")


def install(con: duckdb.DuckDBPyConnection) -> None:
    """Create (or replace) every library object as a TEMP view/macro on ``con``. Idempotent and
    cheap (no data is read); works on read-only connections.

    DuckDB binds a view's whole query tree when the view is created, and the library's views are
    nested (``idle_gaps`` → ``busy_intervals`` → ``device_work`` → the kernel-class ``CASE`` with
    its regexes): created in order, the deep ones were bound again for every view above them
    (0.4–0.5 s per install). So every view is first created as a stub with its documented columns
    (the test suite checks they are the real ones), then the real views are created last to first,
    each bound over stubs; views are re-bound from their text at query time, so the result is the
    same library."""
    objs = objects()
    _older_store_stubs(con)
    con.execute("\n".join(_stub(o) for o in objs if o.kind == "view"))
    con.execute("\n".join(o.sql if o.sql.rstrip().endswith(";") else o.sql + ";"
                          for o in objs if o.kind != "view"))
    con.execute("\n".join(o.sql if o.sql.rstrip().endswith(";") else o.sql + ";"
                          for o in reversed(objs) if o.kind == "view"))


#: Views that several analyzers read: analyze materializes them once per run (:func:`scoped`).
MATERIALIZE = ("runtime_calls_in_scope", "device_work", "busy_intervals", "device_sessions", "run_window", "idle_cause_spans", "idle_gaps",
               "idle_by_cause", "steps", "run_workload", "run_completeness")


_VIEW_BODY = re.compile(r"^CREATE\s+OR\s+REPLACE\s+TEMP\s+VIEW\s+[a-z_][a-z0-9_]*\s+AS\s+", re.IGNORECASE)


@contextmanager
def scoped(con: duckdb.DuckDBPyConnection, run_id: str, materialize: Iterable[str] = MATERIALIZE) -> Iterator[None]:
    """Install the library on ``con`` scoped to one run (session variable ``tracekit_run``, see the
    ``in_scope`` macro) and compute the shared views once: each view of ``materialize`` is stored
    in a TEMP table ``_tk_<name>`` as it is installed, and the view is pointed at it, so the views
    built on it, and every analyzer, read the stored rows instead of recomputing the interval union,
    the gaps and the steps (each view above a materialized one binds over a plain table: cheap,
    see :func:`install`). ``device_work`` and
    ``busy_intervals`` are computed by :mod:`tracekit.analysis.fastpath` (same rows, checked by
    the tests). On exit the tables are dropped and the unscoped library is installed again."""
    from tracekit.analysis import fastpath

    chosen = set(materialize)
    run = quote(run_id)
    con.execute(f"SET VARIABLE tracekit_run = {run}")
    made: list[str] = []
    try:
        for o in objects():
            if o.name in chosen and o.name in fastpath.FAST:  # same rows as the view's SQL, faster
                fastpath.FAST[o.name](con, run_id)
            elif o.name in chosen:
                body = _VIEW_BODY.sub("", o.sql.strip(), count=1).rstrip().rstrip(";")
                # run_id is the one run in scope: stored once, as a literal of the view (copying
                # a string per row is a good part of a million-row table's cost)
                con.execute(f"CREATE OR REPLACE TEMP TABLE _tk_{o.name} AS SELECT * EXCLUDE (run_id) FROM ({body}) "
                            f"WHERE run_id = {run}")
                con.execute(f"CREATE OR REPLACE TEMP VIEW {o.name} AS SELECT {run} AS run_id, * FROM _tk_{o.name}")
            else:
                con.execute(o.sql)
                continue
            made.append(o.name)
        yield
    finally:
        con.execute("RESET VARIABLE tracekit_run")
        install(con)  # the unscoped library again (views over the base tables)
        for name in made:
            con.execute(f"DROP TABLE IF EXISTS _tk_{name}")
        fastpath.release(con)


def names() -> list[str]:
    """Names of the library's views and macros (what ``tracekit query`` can call)."""
    return [o.name for o in objects()]


def markdown() -> str:
    """``docs/sql.md``: every object with its description and columns (generated, checked by a test)."""
    lines = [
        "# The analysis SQL library",
        "",
        ("<!-- generated from tracekit/analysis/sql/*.sql by `python -m tracekit.analysis.library`; "
         "do not edit by hand -->"),
        "",
        ("DuckDB views and macros that the analyzers, `report`, `compare`, `check` and the dashboard "
         "build on, installed as TEMP objects on every connection tracekit opens for analysis and on "
         "`tracekit query`'s read-only connection, so they can be called from there:"),
        "",
        "```sh",
        "tracekit query \"SELECT cause, count(*), sum(dur_ns)/1e6 AS ms FROM idle_gaps WHERE run_id = 'RUN' GROUP BY ALL\"",
        "```",
        "",
        ("Times are integer nanoseconds on the trace's clock unless a column says otherwise; "
         "fractions are 0..1. Every view covers every run of the store: filter on `run_id` "
         "(DuckDB pushes the filter down to the base tables)."),
        "",
    ]
    for fname in FILES:
        objs = [o for o in objects() if o.file == fname]
        if not objs:
            continue
        lines += [f"## `{fname}`", ""]
        for o in objs:
            sig = o.name
            if o.kind != "view":
                sig += "(" + ", ".join(a.name for a in o.args) + ")"
            lines += [f"### `{sig}` ({o.kind.replace('_', ' ')})", "", o.doc, ""]
            if o.args:
                lines += ["| argument | type | meaning |", "|---|---|---|"]
                lines += [f"| `{a.name}` | {a.type} | {a.doc} |" for a in o.args]
                lines.append("")
            if o.returns:
                lines += [f"Returns: {o.returns}", ""]
            if o.columns:
                lines += ["| column | type | meaning |", "|---|---|---|"]
                lines += [f"| `{c.name}` | {c.type} | {c.doc} |" for c in o.columns]
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":  # regenerate docs/sql.md
    import sys
    from pathlib import Path

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "sql.md"
    target.write_text(markdown(), encoding="utf-8")
    print(f"wrote {target}")
