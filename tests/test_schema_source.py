"""The store's schema source (tracekit/schema/*.sql): every column of every base table and public
view documented, the documentation equal to what a new store holds, docs/schema.md generated from
it, and a migrated store equal to a new one."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tracekit.schema import doc as schema
from tracekit.schema import tables_sql
from tracekit.store import MIGRATIONS, SCHEMA_VERSION, close, connect, ensure_schema

ROOT = Path(__file__).resolve().parents[1]

Catalogue = dict[tuple[str, str], list[tuple[str, str]]]


def _store_columns(con: duckdb.DuckDBPyConnection) -> Catalogue:
    """(kind, name) → [(column, type), …] in order, for every table and public view of the store."""
    rows = con.execute(
        "SELECT CASE WHEN v.view_name IS NULL THEN 'table' ELSE 'view' END, c.table_name, c.column_name, c.data_type "
        "FROM duckdb_columns() c LEFT JOIN duckdb_views() v "
        "  ON v.view_name = c.table_name AND v.database_name = c.database_name AND v.schema_name = c.schema_name "
        "WHERE c.database_name = current_database() AND c.schema_name = 'main' AND NOT c.internal "
        "ORDER BY c.table_name, c.column_index").fetchall()
    out: Catalogue = {}
    for kind, rel, col, typ in rows:
        out.setdefault((kind, rel), []).append((col, typ))
    return out


def _problems(relations: tuple[schema.Relation, ...], store: Catalogue) -> list[str]:
    """What is wrong between the documented relations and a store's catalogue: a column without
    text, a documented column or type the store does not have, a store column not documented."""
    problems = [f"{r.kind} {r.name}.{c.name}: no documentation" for r in relations for c in r.columns
                if not c.doc.strip()]
    documented = {(r.kind, r.name): [(c.name, c.type) for c in r.columns] for r in relations}
    for key in sorted(set(documented) | set(store)):
        have, doc = store.get(key, []), documented.get(key, [])
        if have != doc:
            missing = [c for c in have if c not in doc]
            extra = [c for c in doc if c not in have]
            problems.append(f"{key[0]} {key[1]}: undocumented columns {missing}, documented but not in the store "
                            f"{extra}" + ("" if missing or extra else " (order differs)"))
    return problems


@pytest.fixture(scope="module")
def new_store() -> Catalogue:
    con = duckdb.connect(":memory:")
    ensure_schema(con)
    try:
        return _store_columns(con)
    finally:
        con.close()


def test_every_column_of_a_new_store_is_documented_in_the_sql(new_store: Catalogue) -> None:
    relations = schema.tables() + schema.views()
    assert _problems(relations, new_store) == []
    # the contract is all of it: every base table and every public view, not a sample
    assert {k for k in new_store if k[0] == "view"} == {("view", v.name) for v in schema.views()}
    assert sum(len(cols) for (kind, _), cols in new_store.items() if kind == "view") > 300


def test_the_check_catches_an_undocumented_column_and_a_stale_one() -> None:
    runs = next(v for v in schema.views() if v.name == "runs")
    last = runs.columns[-1]
    bare = schema.Relation("view", "runs", runs.doc, [*runs.columns[:-1], schema.Column(last.name, last.type, "", "")])
    store = {("view", "runs"): [(c.name, c.type) for c in runs.columns] + [("n_new", "BIGINT")]}
    assert _problems((bare,), store) == [
        f"view runs.{last.name}: no documentation",
        "view runs: undocumented columns [('n_new', 'BIGINT')], documented but not in the store []"]


def test_units_follow_the_column_names() -> None:
    """A time in ns says so, a byte size says bytes, a count says count: the unit is part of the text."""
    wrong = []
    for r in schema.tables() + schema.views():
        for c in r.columns:
            if ((c.name.endswith("_ns") and "ns" not in c.unit)
                    or (c.name.endswith("_bytes") and "bytes" not in c.unit)
                    or (c.name.startswith("n_") and c.unit != "count")
                    or (c.name.endswith("_pct") and c.unit != "%")):
                wrong.append(f"{r.name}.{c.name}: [{c.unit}]")
    assert wrong == []


def test_docs_schema_md_is_generated_from_the_sql() -> None:
    assert (ROOT / "docs" / "schema.md").read_text(encoding="utf-8") == schema.markdown(), (
        "docs/schema.md is stale: run `python -m tracekit.schema`")


def test_every_view_has_its_section_in_the_docs() -> None:
    template = schema.read(schema.DOC_TEMPLATE)
    with pytest.raises(ValueError, match=r"views without a \{\{columns:VIEW\}\} section: \['runs'\]"):
        schema.markdown(template.replace("{{columns:runs}}", ""))


def _catalogue(con: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return con.execute(
        "SELECT 'column', table_name, column_index::VARCHAR, column_name, data_type, column_default, is_nullable::VARCHAR "
        "FROM duckdb_columns() WHERE database_name = current_database() "
        "UNION ALL SELECT 'constraint', table_name, constraint_index::VARCHAR, constraint_type, constraint_text, "
        "NULL, NULL FROM duckdb_constraints() WHERE database_name = current_database() "
        "UNION ALL SELECT 'view', view_name, NULL, sql, NULL, NULL, NULL FROM duckdb_views() "
        "WHERE NOT internal AND database_name = current_database() ORDER BY ALL").fetchall()


def test_a_schema_1_store_migrates_to_what_tables_sql_creates(tmp_path: Path) -> None:
    """The migration steps' frozen SQL and tables.sql agree: a store of schema 1 (no model_rows, no
    invalid-event counts, no run rollups, no request sessions, no server_metric_rows) migrated by a writer has the catalogue of a new store, column defaults,
    order and constraints included."""
    assert set(MIGRATIONS) == set(range(1, SCHEMA_VERSION))
    con = connect(tmp_path / "new.duckdb")
    try:
        fresh = _catalogue(con)
    finally:
        close(con)
    old = tmp_path / "old.duckdb"
    con = duckdb.connect(str(old))
    con.execute(tables_sql())
    con.execute("DROP TABLE model_rows")
    con.execute("DROP TABLE server_metric_rows")
    for column in ("session_id", "turn", "cached_tokens"):
        con.execute(f"ALTER TABLE request_rows DROP COLUMN {column}")
    for table in ("run_meta", "rank_meta"):
        con.execute(f"ALTER TABLE {table} DROP COLUMN n_invalid_events")
    for column in ("n_device_events", "n_host_events", "device_time_ns", "main_rank", "main_device"):
        con.execute(f"ALTER TABLE run_meta DROP COLUMN {column}")
    con.execute("INSERT INTO tracekit_schema VALUES (1, now()::TIMESTAMP)")
    con.close()
    con = connect(old)
    try:
        assert [r[0] for r in con.execute("SELECT version FROM tracekit_schema ORDER BY 1").fetchall()] == list(
            range(1, SCHEMA_VERSION + 1))
        assert _catalogue(con) == fresh
    finally:
        close(con)
