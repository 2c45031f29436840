"""Errors a user can cause, each rendered by the CLI as one line ``error: <path>: <reason>``."""

from __future__ import annotations

from pathlib import Path


class TracekitError(Exception):
    """Base class of every error tracekit reports to a user without a traceback."""


class TraceInputError(TracekitError):
    """A trace file or directory could not be read: truncated, malformed, unrecognized, unreadable."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class StoreError(TracekitError):
    """The store could not be opened, is locked past the timeout, or has an unknown schema version."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class CaptureError(TracekitError):
    """``tracekit capture`` could not capture: command not found, server unreachable, no trace
    written, a profiler tool missing. ``where`` is the command, URL or directory concerned."""

    def __init__(self, where: str | Path, reason: str) -> None:
        self.path = str(where)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class QueryError(TracekitError):
    """A read-only query was rejected or failed in DuckDB."""


class LoadInputError(TracekitError):
    """Bad input to the load driver: an unreadable or malformed prompts file, a bad length
    distribution, a URL that is not http(s) or an endpoint that cannot be reached."""

    def __init__(self, where: str | Path, reason: str) -> None:
        self.path = str(where)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ConfigError(TracekitError):
    """A setting is wrong: an environment variable (``TRACEKIT_MEMORY_LIMIT``,
    ``TRACEKIT_TMPDIR``, …) that is malformed, out of range or points at an unusable place.
    ``path`` names the setting, so the CLI's line reads ``error: TRACEKIT_TMPDIR: …``."""

    def __init__(self, setting: str, reason: str) -> None:
        self.path = setting
        self.reason = reason
        super().__init__(f"{setting}: {reason}")
