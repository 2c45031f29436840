"""Which native (C) helpers the parsers use, for ``tracekit --version``.

Each C module (built by ``setup.py`` when a compiler is present) has a pure-Python twin that
stores the same rows; a failed build, or ``TRACEKIT_PURE_PYTHON=1``, selects the twin.
:func:`native_status` says which is active without importing the parsers themselves (DuckDB,
protobuf, numpy): only the C modules are imported, which takes well under a millisecond.
"""

from __future__ import annotations

import importlib
import os
from typing import Literal, NamedTuple

__all__ = ["HELPERS", "NativeHelper", "native_status", "pure_python_forced", "status_line"]

#: The C helpers: (what it does, its module).
HELPERS: tuple[tuple[str, str], ...] = (
    ("kineto scanner", "tracekit.parsers._kineto_scan"),
    ("xplane wire reader", "tracekit.parsers._xplane_wire"),
)

#: How much slower the pure-Python twins ingest (measured for issue 18 on the corpus).
PURE_SLOWDOWN = "1.2–2.0x slower"

State = Literal["active", "disabled", "not built"]


class NativeHelper(NamedTuple):
    """One C helper and whether ingest uses it.

    Attributes:
        name: What it does, e.g. ``kineto scanner``.
        module: Its import path.
        state: ``active``; ``disabled`` (built, turned off by ``TRACEKIT_PURE_PYTHON``); or
            ``not built`` (its import failed: no compiler at install time, or a broken build).
        reason: Why it is not built (the import error), else empty.
    """

    name: str
    module: str
    state: State
    reason: str = ""

    def describe(self) -> str:
        """One phrase: ``kineto scanner (C) active`` and the like."""
        state = "disabled by TRACEKIT_PURE_PYTHON" if self.state == "disabled" else self.state
        return f"{self.name} (C) {state}"


def pure_python_forced() -> bool:
    """True when ``TRACEKIT_PURE_PYTHON`` is set to anything but empty or ``0``."""
    return os.environ.get("TRACEKIT_PURE_PYTHON", "") not in ("", "0")


def native_status() -> list[NativeHelper]:
    """Each C helper of :data:`HELPERS` with its state (see :class:`NativeHelper`)."""
    forced = pure_python_forced()
    found: list[NativeHelper] = []
    for name, module in HELPERS:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            found.append(NativeHelper(name, module, "not built", str(exc)))
            continue
        found.append(NativeHelper(name, module, "disabled" if forced else "active"))
    return found


def status_line(helpers: list[NativeHelper] | None = None) -> str:
    """``native: kineto scanner (C) active, xplane wire reader (C) active`` (the helpers of
    :func:`native_status` unless given), followed by which readers run as pure Python instead,
    e.g. ``…: pure Python for the kineto scanner (1.2–2.0x slower)``."""
    helpers = native_status() if helpers is None else helpers
    line = "native: " + ", ".join(h.describe() for h in helpers)
    pure = [h.name for h in helpers if h.state != "active"]
    if pure:
        line += f": pure Python for the {' and the '.join(pure)} ({PURE_SLOWDOWN})"
    return line
