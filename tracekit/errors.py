"""Errors a user can cause, each rendered by the CLI as one line ``error: <path>: <reason>``."""

from __future__ import annotations

from pathlib import Path


class TracekitError(Exception):
    """Base class of every error tracekit reports to a user without a traceback."""


class PathError(TracekitError):
    """An error about one thing a user named: ``path`` is the file, directory, URL, command or
    setting concerned (never a secret), ``reason`` what is wrong with it. The CLI prints
    ``error: <path>: <reason>``."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class TraceInputError(PathError):
    """A trace file or directory could not be read: truncated, malformed, unrecognized, unreadable."""


class StoreError(PathError):
    """The store could not be opened, is locked past the timeout, or has an unknown schema version."""


class CaptureError(PathError):
    """``tracekit capture`` could not capture: command not found, server unreachable, no trace
    written, a profiler tool missing. ``where`` is the command, URL or directory concerned."""


class QueryError(TracekitError):
    """A read-only query was rejected or failed in DuckDB."""


class LoadInputError(PathError):
    """Bad input to the load driver: an unreadable or malformed prompts file, a bad length
    distribution, a URL that is not http(s) or an endpoint that cannot be reached."""


class ConfigError(PathError):
    """A setting is wrong: an environment variable (``TRACEKIT_MEMORY_LIMIT``,
    ``TRACEKIT_TMPDIR``, …) that is malformed, out of range or points at an unusable place.
    ``path`` names the setting, so the CLI's line reads ``error: TRACEKIT_TMPDIR: …``."""


class StoreLockedError(StoreError):
    """The store stayed locked by another process (a writer: ingest, analyze, capture, …) for the
    whole wait. DuckDB allows one writer per file; while it holds the file, readers wait too."""


class OutputError(PathError):
    """An output path tracekit refuses to write (a store, a directory, a device, an existing
    file without ``--force``) or cannot write (no space, no permission)."""
