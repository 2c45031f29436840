"""SQL text for values spliced into a statement: the one place tracekit quotes a string literal.

Bind parameters (``?``/``$name``) where DuckDB allows them; splice a literal only where it does
not (``VALUES`` lists built from Python constants, ``IN`` lists, ``CASE`` arms, SQL macros).
"""

from __future__ import annotations


def quote(text: str) -> str:
    """``text`` as a SQL string literal: single quotes around it, each ``'`` inside doubled
    (``O'Neil`` → ``'O''Neil'``). DuckDB and SQLite read it back as exactly ``text``."""
    return "'" + text.replace("'", "''") + "'"
