"""The store's schema as SQL files: the one source of its base tables, its public views and their
documentation (``docs/schema.md`` is generated from them by :mod:`tracekit.schema.doc`).

- ``tables.sql``: the base tables the parsers write, as a new store of the current schema has them.
  A ``--`` comment above each column says what it holds, starting with ``[unit]`` when it has one
  (``[ns]``, ``[bytes]``, ``[count]``, ``[%]``, …); the comment block above a ``CREATE TABLE``
  describes the table.
- ``views.sql``: the public views, the contract that tests, the dashboard, CI alerts and outside
  scripts query. The comment block above each view describes it (:mod:`tracekit.sqldoc`, the
  format of the analysis SQL library) with one ``@column NAME TYPE [unit] meaning`` line per
  column, in order, or ``@column NAME TYPE = table.column`` for a base-table column the view
  passes on unchanged (its text is that column's).
- ``migrate_<v>_to_<v+1>.sql``: the frozen SQL of a migration step (``tracekit.store.MIGRATIONS``).
  A step changes base tables only; the views are recreated from ``views.sql`` after the last one.

This module only reads the files (the store imports it); :mod:`tracekit.schema.doc` parses their
comments and writes ``docs/schema.md`` (``python -m tracekit.schema``).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

#: Base tables (``CREATE TABLE``), in creation order.
TABLES_FILE = "tables.sql"
#: Public views (``CREATE OR REPLACE VIEW``), in creation order.
VIEWS_FILE = "views.sql"


@cache
def read(name: str) -> str:
    """The text of one file beside this module (``tables.sql``, ``views.sql``, a migration; installed
    as package data)."""
    return (Path(__file__).parent / name).read_text(encoding="utf-8")


def tables_sql() -> str:
    """``CREATE TABLE`` statements of every base table of the current schema."""
    return read(TABLES_FILE)


def views_sql() -> str:
    """``CREATE OR REPLACE VIEW`` statements of every public view (run after every migration)."""
    return read(VIEWS_FILE)


def migration_sql(from_version: int) -> str:
    """The SQL of the migration step from schema ``from_version`` to the next one."""
    return read(f"migrate_{from_version}_to_{from_version + 1}.sql")
