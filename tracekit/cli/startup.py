"""The ``tracekit`` process's start-up and exit tricks, kept here and used only by the CLI's entry
points (:func:`tracekit.cli.entry`, :func:`tracekit.cli.main.main`): nothing below the CLI
depends on them, and the library behaves the same without them.

* :func:`start`: ``tracekit ingest FILE`` starts reading the first Kineto file before Typer, the
  command definitions and DuckDB load (~0.15 s on which the native scanner's thread runs
  alongside). The :class:`Startup` it returns is handed to the Typer app (as the click context's
  ``obj``) and from the ``ingest`` command to :func:`tracekit.ingest.ingest` (``read_ahead=``):
  passed explicitly, never through a module global.
* :func:`fixed_mmap_threshold`: glibc's ``mallopt`` through ctypes, so large freed buffers go
  back to the OS (peak RSS).
* :func:`exit_without_teardown`: an ``ingest`` leaves through ``os._exit`` once its output is
  flushed.

Kept apart from the Typer app so the console script can use it before Typer loads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.parsers.kineto import ReadAhead


@dataclass(frozen=True)
class Startup:
    """What the entry point found and started before Typer loaded, for the command to use.

    Attributes:
        is_ingest: The command is ``ingest``.
        read_ahead: The first Kineto file of an ``ingest``, being read in the background (None
            when there is none, or the native scanner is off).
    """

    is_ingest: bool = False
    read_ahead: ReadAhead | None = None


def start(argv: list[str]) -> Startup:
    """``tracekit ingest FILE``: start reading the first Kineto file in the background now,
    before Typer parses the arguments and DuckDB loads. Speculative: the ingest uses the work
    only if it reads the same file (:meth:`ReadAhead.claim`); anything else is stopped by the
    ingest or abandoned at exit. Nothing is started for other commands."""
    if len(argv) < 2 or argv[0] != "ingest":
        return Startup()
    if any(a == "--format" or a.startswith("--format=") for a in argv) and "kineto" not in argv:
        return Startup(is_ingest=True)
    paths = [a for a in argv[1:] if not a.startswith("-")]
    if not any(a.lower().endswith((".json", ".json.gz")) for a in paths):
        return Startup(is_ingest=True)  # no Kineto-looking file: do not even import the Kineto parser (~0.05 s)
    from tracekit.parsers.kineto import read_ahead

    return Startup(is_ingest=True, read_ahead=read_ahead(paths, "--python-events" in argv))


def fixed_mmap_threshold() -> None:
    """glibc: serve allocations of 1 MiB or more with mmap, returned to the OS when freed.

    By default glibc raises its mmap threshold each time such a block is freed (up to 32 MiB), so
    the multi-MiB buffers of a streaming ingest (inflated blocks, chunk JSON) end up on the heap,
    which fragments and is not given back: fixing the threshold keeps the peak RSS of ingesting
    the 62 MB benchmark trace at ~144 MB instead of ~160 MB, at no measurable time cost
    (docs/performance.md). A no-op where glibc's ``mallopt`` is not available."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def exit_without_teardown(run: Callable[[], None]) -> None:
    """Run ``run`` (the CLI), flush stdout and stderr, and end the process with ``os._exit`` and
    the exit code ``run`` gave (a ``SystemExit``'s code; a message code is printed, exit 1).

    For ``ingest``: by then the store is committed and closed and nothing else is open, and
    tearing down the interpreter (every module, DuckDB's static destructors) took 0.03 s, 6 % of
    ingesting the 62 MB benchmark trace."""
    try:
        run()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe (e.g. `| head`): nothing more to say
            pass
    os._exit(code)
