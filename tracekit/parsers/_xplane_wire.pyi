"""Type stub of the C module tracekit/parsers/_xplane_wire.c (built by setup.py when possible)."""

from typing import Any, TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

def split_space(raw: Buffer) -> tuple[bytes, list[list[tuple[int, int, int]]]]: ...
def scan_line(
    line: Buffer,
    names: dict[int, str],
    drop_ids: Any = None,
    split: tuple[str, ...] = (),
    op_ids: Any = None,
    start: int = 0,
    max_rows: int = 0,
) -> tuple[int, int, bytes, bytes, bytes, bytes | None, list[str | None], tuple[list[Any], ...], int]: ...
