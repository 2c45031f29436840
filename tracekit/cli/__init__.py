"""Command line (Typer + Rich) over the Python API.

The console script enters at :func:`entry`, which starts ``tracekit ingest``'s read-ahead of the
first Kineto file before Typer and the command definitions (``tracekit.cli.main``) load: the
native scanner's thread then runs through the ~0.1 s of start-up. The start-up and exit tricks
live in :mod:`tracekit.cli.startup`, used only here and by :func:`tracekit.cli.main.main`.
"""

from __future__ import annotations

import importlib
import sys


def entry() -> None:
    """Console-script entry point: read ahead for ``ingest``, then run the Typer app; an
    ``ingest`` ends with ``os._exit`` once its output is flushed
    (:func:`tracekit.cli.startup.exit_without_teardown`)."""
    from tracekit.cli.startup import exit_without_teardown, start

    started = start(sys.argv[1:])
    cli = importlib.import_module("tracekit.cli.main")
    if not started.is_ingest:
        cli.main(started)
        return
    exit_without_teardown(lambda: cli.main(started))
