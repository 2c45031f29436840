"""The one place that chooses between the native (C) helpers and their pure-Python twins.

Each C module (built by ``setup.py`` when a compiler is present) has a pure-Python twin that
stores the same rows; a failed build, or ``TRACEKIT_PURE_PYTHON=1``, selects the twin. The
parsers ask :func:`load` for their helper (the C module, or None for the twin) and never import a
C module or read ``TRACEKIT_PURE_PYTHON`` themselves; :func:`native_status` (``tracekit
--version``) reports the same choice. Only the C modules are imported here (well under a
millisecond), not the parsers (DuckDB, protobuf, numpy).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Literal, NamedTuple

__all__ = ["HELPERS", "NativeHelper", "built", "load", "native_status", "pure_python_forced", "status_line"]

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


def _import(module: str) -> tuple[ModuleType | None, str]:
    """(the C module, "") or (None, why its import failed)."""
    try:
        return importlib.import_module(module), ""
    except ImportError as exc:
        return None, str(exc)


def built(name: str) -> ModuleType | None:
    """The C module ``tracekit.parsers.<name>`` (e.g. ``_kineto_scan``) when it is built, else
    None; whether ``TRACEKIT_PURE_PYTHON`` turns it off is not considered (see :func:`load`)."""
    return _import(f"tracekit.parsers.{name}")[0]


def load(name: str) -> ModuleType | None:
    """The C module ``tracekit.parsers.<name>`` for ingest to use now: None when it is not built
    or ``TRACEKIT_PURE_PYTHON`` turns the native helpers off (the caller then uses its
    pure-Python twin). Read at every call, so the variable may change between ingests."""
    return None if pure_python_forced() else built(name)


def native_status() -> list[NativeHelper]:
    """Each C helper of :data:`HELPERS` with its state (see :class:`NativeHelper`)."""
    forced = pure_python_forced()
    found: list[NativeHelper] = []
    for name, module in HELPERS:
        mod, reason = _import(module)
        if mod is None:
            found.append(NativeHelper(name, module, "not built", reason))
        else:
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
