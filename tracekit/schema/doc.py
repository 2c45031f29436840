"""The documentation of the store's schema: the comments of ``tracekit/schema/tables.sql`` and
``views.sql`` parsed into tables, views and columns (format: :mod:`tracekit.schema`), and
``docs/schema.md`` generated from them and the hand-written prose of ``schema.md.in``
(:func:`markdown`, ``python -m tracekit.schema``). The tests fail when a column of a table or view
has no text, when a documented column or type differs from what a new store has, and when
``docs/schema.md`` is not what :func:`markdown` writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache

from tracekit.schema import TABLES_FILE, VIEWS_FILE, read
from tracekit.sqldoc import comment_block, parse_block, split_word, statements

#: The prose of ``docs/schema.md`` with ``{{views}}``, ``{{columns:VIEW}}`` and ``{{tables}}``
#: where the generated parts go (in the source tree; not installed with the package).
DOC_TEMPLATE = "schema.md.in"


@dataclass(frozen=True)
class Column:
    """One documented column of a table or view."""

    name: str
    type: str  # as DuckDB names it (``duckdb_columns().data_type``)
    unit: str  # '' when the column has none
    doc: str
    ref: str | None = None  # ``table.column`` whose unit and text a view column takes
    constraints: str = ""  # a table column's NOT NULL, DEFAULT, … as declared


@dataclass
class Relation:
    """A base table or public view with its description and columns."""

    kind: str  # 'table' | 'view'
    name: str
    doc: str
    columns: list[Column] = field(default_factory=list)


_TABLE = re.compile(r"^CREATE\s+TABLE\s+([a-z_][a-z0-9_]*)\s*\(\s*$", re.MULTILINE)
_VIEW = re.compile(r"^CREATE\s+OR\s+REPLACE\s+VIEW\s+([a-z_][a-z0-9_]*)\s+AS\b", re.MULTILINE)
_UNIT = re.compile(r"^\[([^\]]*)\]\s*(.*)$", re.DOTALL)
_PLACEHOLDER = re.compile(r"\{\{([a-z]+)(?::([a-z_][a-z0-9_]*))?\}\}")


def _split_unit(text: str) -> tuple[str, str]:
    m = _UNIT.match(text.strip())
    return (m.group(1).strip(), m.group(2).strip()) if m else ("", text.strip())


def _statements(name: str) -> list[str]:
    return statements(read(name))


def _table(name: str, doc: str, body: list[str]) -> Relation:
    rel = Relation("table", name, doc)
    pending: list[str] = []
    for line in body:
        text = line.strip()
        if text.startswith("--"):
            pending.append(text[2:].strip())
        elif text and not text.startswith(")"):
            if "--" in text:
                raise ValueError(f"{TABLES_FILE}: {name}: put the comment of `{text}` on the lines above it")
            col, rest = split_word(text.rstrip(","))
            typ, constraints = split_word(rest)
            unit, meaning = _split_unit(" ".join(pending))
            rel.columns.append(Column(col, typ, unit, meaning, constraints=constraints))
            pending = []
    return rel


def _creates(name: str, pattern: re.Pattern[str]) -> Iterator[tuple[str, str, list[tuple[str, str]], str]]:
    """(object name, description, tags, text after the match) of each statement of file ``name``
    that ``pattern`` finds, the description and tags from the comment block above it."""
    for stmt in _statements(name):
        m = pattern.search(stmt)
        if m is not None:
            doc, tags = parse_block(comment_block(stmt[: m.start()]))
            yield m.group(1), doc, tags, stmt[m.end():]


@cache
def tables() -> tuple[Relation, ...]:
    """Every base table of ``tables.sql`` with its documented columns, in file order."""
    out = []
    for name, doc, tags, body in _creates(TABLES_FILE, _TABLE):
        if tags:
            raise ValueError(f"{TABLES_FILE}: table {name}: a table's columns are documented above each column")
        out.append(_table(name, doc, body.splitlines()))
    return tuple(out)


@cache
def views() -> tuple[Relation, ...]:
    """Every public view of ``views.sql`` with its documented columns, in file order; a column
    written ``= table.column`` has that table column's unit and text (and ``ref`` set)."""
    by_table = {(t.name, c.name): c for t in tables() for c in t.columns}
    out = []
    for name, doc, tags, _body in _creates(VIEWS_FILE, _VIEW):
        rel = Relation("view", name, doc)
        for tag, rest in tags:
            if tag != "column":
                raise ValueError(f"{VIEWS_FILE}: view {rel.name}: unknown tag @{tag}")
            col, more = split_word(rest)
            typ, text = split_word(more)
            if text.startswith("="):
                ref = text[1:].strip()
                table, _, tcol = ref.partition(".")
                if (table, tcol) not in by_table:
                    raise ValueError(f"{VIEWS_FILE}: {rel.name}.{col} refers to {ref}, which tables.sql does not have")
                base = by_table[(table, tcol)]
                rel.columns.append(Column(col, typ, base.unit, base.doc, ref=ref))
            else:
                unit, meaning = _split_unit(text)
                rel.columns.append(Column(col, typ, unit, meaning))
        out.append(rel)
    return tuple(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _column_table(rel: Relation) -> list[str]:
    """A view's columns, or a table's, whose columns a view passes on point to the view's table."""
    shown: dict[str, str] = {}
    for v in views():
        for c in v.columns:
            if c.ref is not None:
                shown.setdefault(c.ref, v.name)
    lines = ["| column | type | unit | meaning |", "|---|---|---|---|"]
    for c in rel.columns:
        typ, doc = c.type, c.doc
        if rel.kind == "table":
            typ = f"{c.type} {c.constraints}".strip()
            view = shown.get(f"{rel.name}.{c.name}")
            doc = doc if view is None else f"as in [`{view}`](#{view})"
        lines.append(f"| {c.name} | {_cell(typ)} | {_cell(c.unit)} | {_cell(doc)} |")
    return lines


def _views_overview() -> list[str]:
    lines = ["| view | what it holds |", "|---|---|"]
    lines += [f"| [`{v.name}`](#{v.name}) | {_cell(v.doc)} |" for v in views()]
    return lines


def _tables_section() -> list[str]:
    lines: list[str] = []
    for t in tables():
        lines += [f"### {t.name}", "", t.doc, ""] + _column_table(t) + [""]
    return lines[:-1]


def markdown(template: str | None = None) -> str:
    """``docs/schema.md``: the prose of ``schema.md.in`` with the views' overview, each view's
    column table and the base tables filled in from the SQL files. Every view must be placed by
    exactly one ``{{columns:VIEW}}``."""
    text = read(DOC_TEMPLATE) if template is None else template
    by_name = {v.name: v for v in views()}
    placed: list[str] = []

    def fill(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "views" and arg is None:
            return "\n".join(_views_overview())
        if kind == "tables" and arg is None:
            return "\n".join(_tables_section())
        if kind == "columns" and arg in by_name:
            placed.append(arg)
            return "\n".join(_column_table(by_name[arg]))
        raise ValueError(f"{DOC_TEMPLATE}: unknown placeholder {m.group(0)}")

    out = _PLACEHOLDER.sub(fill, text)
    missing = [v for v in by_name if v not in placed]
    twice = sorted({v for v in placed if placed.count(v) > 1})
    if missing or twice:
        raise ValueError(f"{DOC_TEMPLATE}: views without a {{{{columns:VIEW}}}} section: {missing}; "
                         f"placed more than once: {twice}")
    return out
