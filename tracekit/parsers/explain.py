"""Why a file whose name suggests a format is not readable as it: the text of every parser's
:meth:`tracekit.parsers.base.Parser.explain` that opens the file to find out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracekit.errors import TraceInputError


def refusal(check: Callable[[Path], object], path: Path, otherwise: str) -> str:
    """The one-line reason ``check(path)`` refuses ``path`` (its :class:`TraceInputError`'s
    reason), or ``otherwise`` when ``check`` finds nothing wrong with it."""
    try:
        check(path)
    except TraceInputError as exc:
        return exc.reason
    return otherwise
