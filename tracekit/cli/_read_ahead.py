"""``tracekit ingest``'s speculative read-ahead, kept apart from the Typer app so the console
script can start it before Typer, the command definitions and DuckDB load."""

from __future__ import annotations


def read_ahead_for(argv: list[str]) -> bool:
    """``tracekit ingest FILE``: start reading the first Kineto file in the background now,
    before Typer parses the arguments and DuckDB loads (~0.15 s of start-up on which the native
    scanner's thread runs alongside). Speculative: the ingest picks the work up only if it reads
    the same file; anything else is abandoned at exit. A no-op for other commands. Returns
    whether the command is ``ingest``."""
    if len(argv) < 2 or argv[0] != "ingest":
        return False
    if any(a == "--format" or a.startswith("--format=") for a in argv) and "kineto" not in argv:
        return True
    paths = [a for a in argv[1:] if not a.startswith("-")]
    if not any(a.lower().endswith((".json", ".json.gz")) for a in paths):
        return True  # no Kineto-looking file: do not even import the Kineto parser (~0.05 s)
    from tracekit.parsers.kineto import read_ahead

    read_ahead(paths, "--python-events" in argv)
    return True
