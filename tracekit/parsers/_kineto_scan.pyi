"""Type stub of the C module tracekit/parsers/_kineto_scan.c (built by setup.py when possible)."""

from collections.abc import Sequence
from typing import Any

class ScanError(ValueError):
    """args are (reason, offset in the buffer given to scan)."""

class Batch:
    def __len__(self) -> int: ...
    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any: ...

class Scanner:
    done: bool
    n_events: int
    n_python: int
    n_flow: int
    def __init__(
        self, arg_keys: Sequence[bytes], device_cats: Sequence[bytes], keep_python: bool = False
    ) -> None: ...
    def scan(self, buf: bytes | bytearray | memoryview, final: bool = False) -> int: ...
    def take(self, table: int, columns: Sequence[int] | None = None) -> Batch | None: ...
    def pending(self) -> tuple[int, int, int, int]: ...

def live_tables() -> int:
    """Column tables not yet freed (for leak checks)."""
