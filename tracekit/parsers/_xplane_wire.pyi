"""Type stub of the C module tracekit/parsers/_xplane_wire.c (built by setup.py when possible)."""

from typing import Any, TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

def split_space(raw: Buffer) -> tuple[bytes, list[list[tuple[int, int, int]]]]: ...
def check_space(raw: Buffer, max_leaf: int, release: bool = False) -> tuple[str, int, int] | None: ...
def split_message(msg: Buffer, field: int) -> tuple[bytes, int]: ...
def field_spans(msg: Buffer, field: int, start: int = 0, max_n: int = 0) -> tuple[list[tuple[int, int]], int]: ...
def strip_lines(
    plane: Buffer, start: int = 0, max_lines: int = 0
) -> tuple[bytes, list[tuple[int, int, int]], int]: ...
def scan_line(
    line: Buffer,
    names: dict[int, str],
    drop_ids: Any = None,
    split: tuple[str, ...] = (),
    op_ids: Any = None,
    start: int = 0,
    max_rows: int = 0,
    max_str: int = ...,
) -> tuple[int, int, bytes, bytes, bytes, bytes | None, list[str | None], tuple[list[Any], ...], int]: ...
