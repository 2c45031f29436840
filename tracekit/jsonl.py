"""Reading a JSON-lines log that a capture directory carries (the request log, the server's
metric scrapes): one JSON object per non-blank line, every fault one :class:`TraceInputError`
that names the file and the line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracekit.errors import TraceInputError


def json_objects(path: str | Path, what: str, item: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``path`` (``what`` names the file in
    the error: ``the request log``; ``item`` what a line holds: ``request``). Raises :class:`TraceInputError` for an unreadable file, a line
    that is not JSON, or one that is not an object."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceInputError(path, f"cannot read {what}: {exc}") from None
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError as exc:
            raise TraceInputError(path, f"line {i}: not JSON ({exc})") from None
        except RecursionError:
            raise TraceInputError(path, f"line {i}: JSON nested too deeply") from None
        if not isinstance(doc, dict):
            raise TraceInputError(path, f"line {i}: expected a JSON object per {item}")
        yield i, doc
