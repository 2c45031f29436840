"""Doc comments of tracekit's SQL files, written the way Perfetto's trace-processor standard library
writes them: a block of ``--`` comment lines right above a ``CREATE`` statement describes the object,
and ``@tag`` lines in it describe its parts::

    -- One row per idle gap of a device inside the run window, with its cause.
    -- @column run_id    VARCHAR  the run
    -- @column dur_ns    BIGINT   the gap's length (ns)
    CREATE OR REPLACE TEMP VIEW idle_gaps AS ...;

A line of a block that is not a tag continues the last tag's text (or the object's description
before the first tag). Read by :mod:`tracekit.analysis.library` (the analysis SQL library) and
:mod:`tracekit.schema` (the store's tables and views).
"""

from __future__ import annotations

import re

_TAG = re.compile(r"^@([a-z_]+)\s+(.*)$")


def statements(text: str) -> list[str]:
    """Split a file into statements at a ``;`` that ends a line (the files never put one
    inside a string at a line end); a ``--`` comment line ending in ``;`` does not end one."""
    out, cur = [], []
    for line in text.splitlines():
        cur.append(line)
        if line.rstrip().endswith(";") and not line.lstrip().startswith("--"):
            out.append("\n".join(cur))
            cur = []
    if "".join(cur).strip():
        out.append("\n".join(cur))
    return out


def comment_block(head: str) -> list[str]:
    """The text of the run of ``--`` comment lines at the end of ``head`` (what precedes a
    statement's ``CREATE``), without the ``--``; blank lines before the run end it."""
    comment = [ln.strip()[2:].strip() if ln.strip().startswith("--") else None for ln in head.splitlines()]
    block: list[str] = []
    for ln in reversed(comment):
        if ln is None:
            if block:
                break
            continue
        block.append(ln)
    block.reverse()
    return block


def parse_block(block: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """A comment block as (description, [(tag, text), …]): lines before the first ``@tag`` are the
    description, a later line without a tag continues the previous tag's text."""
    text: list[str] = []
    tags: list[tuple[str, str]] = []
    for ln in block:
        t = _TAG.match(ln)
        if t is not None:
            tags.append((t.group(1), t.group(2)))
        elif tags:
            tag, rest = tags[-1]
            tags[-1] = (tag, f"{rest} {ln}")
        else:
            text.append(ln)
    return " ".join(text).strip(), tags


def split_word(text: str) -> tuple[str, str]:
    """``text``'s first word and the rest; a word runs to the first blank outside parentheses, so a
    type such as ``MAP(VARCHAR, VARCHAR)`` or ``DECIMAL(18, 3)`` is one word."""
    text = text.strip()
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch.isspace() and depth <= 0:
            return text[:i], text[i:].strip()
    return text, ""
