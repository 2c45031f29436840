"""What one input may cost: the memory budget, the longest event, the decompression ratio, and
the temp directory — each with its environment override, each refused in one line past it.

``docs/security.md`` explains the threat model these limits serve (untrusted trace files) and
how the fuzz and bomb suite measures them.

=============================  =========  ===================================================
environment variable           default    bounds
=============================  =========  ===================================================
``TRACEKIT_MEMORY_LIMIT``      512MB      DuckDB's memory (ingest and queries); whole-document
                                          readers refuse documents whose decoded form would
                                          not fit in it
``TRACEKIT_MAX_EVENT_BYTES``   64MiB      the longest single event, record, string or field
``TRACEKIT_MAX_INFLATE_RATIO`` 200        decompressed / compressed size, checked once more
                                          than 64 MiB came out of a gzip file (0: no cap)
``TRACEKIT_TMPDIR``            (system)   where parsers write temp files; must be a writable
                                          directory with room for the decompressed input
=============================  =========  ===================================================
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from tracekit.errors import ConfigError, TraceInputError

#: Default of ``TRACEKIT_MEMORY_LIMIT``, as DuckDB reads it.
DEFAULT_MEMORY_LIMIT = "512MB"
#: The smallest memory limit tracekit accepts (bytes): DuckDB cannot ingest or query below it.
MIN_MEMORY_BYTES = 64 << 20
#: The largest memory limit tracekit passes to DuckDB (bytes), which refuses much larger ones.
MAX_MEMORY_BYTES = 1 << 50
#: The smallest ``TRACEKIT_MAX_EVENT_BYTES`` (bytes): a Kineto event is hundreds of bytes.
MIN_EVENT_BYTES = 64 << 10
#: Default longest single event (bytes): 64 MiB, ~1,000x the longest kernel name in the corpus.
DEFAULT_MAX_EVENT_BYTES = 64 << 20
#: Default cap on decompressed / compressed bytes; the corpus' largest ratio is 30.
DEFAULT_MAX_INFLATE_RATIO = 200
#: Decompressed bytes allowed before the ratio is checked (bytes): small files may compress well.
INFLATE_FREE_BYTES = 64 << 20

_UNITS = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_size(text: str, variable: str) -> int:
    """Bytes in a size such as ``512MB``, ``2GiB`` or ``1048576`` (DuckDB's units: KB/MB/GB are
    powers of 1000, KiB/MiB/GiB powers of 1024). Raises :class:`ConfigError` naming ``variable``."""
    m = _SIZE.fullmatch(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise ConfigError(variable, f"{text!r} is not a size (e.g. 512MB, 2GB, 4GiB)")
    return int(float(m.group(1)) * _UNITS[unit])


def memory_limit_setting() -> str:
    """``TRACEKIT_MEMORY_LIMIT`` checked and normalised for DuckDB's ``memory_limit`` setting
    (bytes as ``<n>B``). Raises :class:`ConfigError` when it is not a size or is below 64 MiB."""
    return f"{memory_budget_bytes()}B"


def memory_budget_bytes() -> int:
    """The memory budget of one ingest or query (bytes): ``TRACEKIT_MEMORY_LIMIT``, default 512 MB."""
    text = os.environ.get("TRACEKIT_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT
    n = parse_size(text, "TRACEKIT_MEMORY_LIMIT")
    if n < MIN_MEMORY_BYTES:
        raise ConfigError("TRACEKIT_MEMORY_LIMIT", f"{text!r} is below the minimum of 64MiB")
    if n > MAX_MEMORY_BYTES:
        raise ConfigError("TRACEKIT_MEMORY_LIMIT", f"{text!r} is above the maximum of 1PiB")
    return n


def _positive_int(variable: str, default: int, *, size: bool) -> int:
    text = os.environ.get(variable)
    if not text:
        return default
    if size:
        return parse_size(text, variable)
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(variable, f"{text!r} is not a whole number") from None
    if value < 0:
        raise ConfigError(variable, f"{text!r} is negative")
    return value


def max_event_bytes() -> int:
    """The longest single event, record, string or field a parser accepts (bytes):
    ``TRACEKIT_MAX_EVENT_BYTES``, default 64 MiB."""
    n = _positive_int("TRACEKIT_MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES, size=True)
    if n < MIN_EVENT_BYTES:
        raise ConfigError("TRACEKIT_MAX_EVENT_BYTES", f"{n:,} bytes is below the minimum of 64KiB")
    return n


#: :func:`max_event_bytes` at import time, for code that needs a constant (bytes).
MAX_TOKEN_BYTES = DEFAULT_MAX_EVENT_BYTES


def max_inflate_ratio() -> int:
    """Largest decompressed / compressed size accepted past :data:`INFLATE_FREE_BYTES`:
    ``TRACEKIT_MAX_INFLATE_RATIO``, default 200; 0 turns the cap off."""
    return _positive_int("TRACEKIT_MAX_INFLATE_RATIO", DEFAULT_MAX_INFLATE_RATIO, size=False)


class InputLimitError(TraceInputError):
    """An input exceeds a documented limit (a decompression bomb, an event longer than
    ``TRACEKIT_MAX_EVENT_BYTES``, a document too big for the memory budget). The reason names the
    environment variable that lifts the limit."""


def check_inflation(path: str | Path, compressed: int, decompressed: int, ratio: int | None = None) -> None:
    """Raise :class:`InputLimitError` when ``decompressed`` bytes came out of ``compressed`` bytes
    of gzip more than the allowed ratio permits (past :data:`INFLATE_FREE_BYTES`)."""
    if decompressed <= INFLATE_FREE_BYTES:
        return
    ratio = max_inflate_ratio() if ratio is None else ratio
    if ratio and decompressed > ratio * max(compressed, 1):
        raise InputLimitError(
            path, f"gzip data inflates more than {ratio}x ({compressed:,} bytes gave over {decompressed:,}): "
                  "a decompression bomb? set TRACEKIT_MAX_INFLATE_RATIO=0 to read it anyway")


def event_too_long(path: str | Path, where: str, limit: int | None = None) -> InputLimitError:
    """The error for one event, string or field longer than :func:`max_event_bytes`; ``where``
    says where it starts (e.g. ``"at byte 1,234"``)."""
    limit = max_event_bytes() if limit is None else limit
    return InputLimitError(path, f"an event longer than {limit:,} bytes {where}; "
                                 "set TRACEKIT_MAX_EVENT_BYTES to accept it")


def temp_dir() -> Path:
    """Where parsers write temp files: ``TRACEKIT_TMPDIR`` when set (it must be an existing,
    writable directory), else the system's. Raises :class:`ConfigError` otherwise."""
    explicit = os.environ.get("TRACEKIT_TMPDIR")
    if not explicit:
        return Path(tempfile.gettempdir())
    p = Path(explicit)
    if not p.exists():
        raise ConfigError("TRACEKIT_TMPDIR", f"{explicit}: no such directory")
    if not p.is_dir():
        raise ConfigError("TRACEKIT_TMPDIR", f"{explicit}: not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError("TRACEKIT_TMPDIR", f"{explicit}: not writable")
    return p


def check_temp_space(needed: int, where: Path | None = None) -> None:
    """Raise :class:`ConfigError` when the temp directory has fewer than ``needed`` bytes free."""
    d = where if where is not None else temp_dir()
    try:
        free = shutil.disk_usage(d).free
    except OSError:
        return
    if free < needed:
        var = "TRACEKIT_TMPDIR" if os.environ.get("TRACEKIT_TMPDIR") else "the temp directory"
        raise ConfigError(var, f"{d}: {free:,} bytes free, {needed:,} needed (point TRACEKIT_TMPDIR elsewhere)")
