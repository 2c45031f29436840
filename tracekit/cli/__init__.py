"""Command line (Typer + Rich) over the Python API.

The console script enters at :func:`entry`, which starts ``tracekit ingest``'s read-ahead of the
first Kineto file before Typer and the command definitions (``tracekit.cli.main``) load: the
native scanner's thread then runs through the ~0.1 s of start-up.
"""

from __future__ import annotations

import importlib
import sys


def entry() -> None:
    """Console-script entry point: read ahead for ``ingest``, then run the Typer app."""
    from tracekit.cli._read_ahead import read_ahead_for

    read_ahead_for(sys.argv[1:])
    importlib.import_module("tracekit.cli.main").main()
