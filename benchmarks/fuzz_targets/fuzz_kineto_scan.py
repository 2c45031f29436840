#!/usr/bin/env python3
"""Coverage-guided target of the C Kineto scanner (``tracekit/parsers/_kineto_scan.c``).

The input is what the scanner sees in tracekit: the bytes after ``"traceEvents":[`` of a Kineto
trace. Its first byte picks how the input is cut into blocks (the scanner keeps state across
``scan`` calls: an event split over two blocks must scan as if it were whole) and whether
``python_function`` events are kept. The scanner may refuse with ``ScanError`` (a ``ValueError``);
any other exception, a crash, or a column table left allocated after a refusal is a bug.

    .venv/bin/python benchmarks/fuzz_targets/fuzz_kineto_scan.py -max_total_time=60     # with atheris
    .venv/bin/python benchmarks/fuzz_targets/fuzz_kineto_scan.py --fallback --seconds 60 # without
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[2]

from _driver import c_module, exact

scan = c_module("_kineto_scan")

from tracekit.parsers.kineto import _ARG_KEYS_BYTES, _DEVICE_CATS_BYTES, _NATIVE_COLUMNS

_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')


def seeds_of(path: Path) -> list[bytes]:
    """Inputs from one Kineto trace (``.json`` or ``.json.gz``): the first 32 KB and the last 8 KB
    after ``"traceEvents":[`` (none when it has no such array), each after a mode byte."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    m = _EVENTS.search(raw)
    if not m:
        return []
    body = raw[m.end():]
    return [b"\x00" + body[:32768], b"\x07" + body[-8192:]]


def seeds() -> list[bytes]:
    """The events of the bundled Kineto samples (:func:`seeds_of`, plus a tricky hand-made one)."""
    out = [x for p in sorted((ROOT / "sample_traces").rglob("*.pt.trace.json.gz")) for x in seeds_of(p)]
    out.append(b'\x03{"ph":"X","cat":"kernel","name":"k\\ud83d\\ude80","pid":0,"tid":3,"ts":10.5,"dur":1e-3,'
               b'"args":{"correlation":99,"grid":[1,2,3],"kind":{"a":[1.50,-0,"x y"]}}},{}],"x":1}')
    return out[:12]


def _export(batch: Any) -> None:
    """Export a taken batch as DuckDB would (an Arrow C stream), then drop it: a batch still
    referenced here would count as a leaked column table at the end of :func:`one_input`."""
    if batch is not None:
        assert len(batch) >= 0
        batch.__arrow_c_stream__()


def one_input(data: bytes) -> None:
    if not data:
        return
    mode = data[0]
    body = data[1:]
    keep_python = bool(mode & 1)
    cuts = sorted({(mode * 7919 * k) % (len(body) + 1) for k in range(1, 1 + (mode >> 1) % 4)})
    before = scan.live_tables()
    s = scan.Scanner(_ARG_KEYS_BYTES, _DEVICE_CATS_BYTES, keep_python)
    buf = bytearray()
    pos = 0
    try:
        for c in [*cuts, len(body)]:
            buf += body[pos:c]
            pos = c
            if s.done:
                break
            view = exact(buf)  # kept until the next scan, as the caller's buffer would be
            n = s.scan(view, c == len(body))
            assert 0 <= n <= len(buf), (n, len(buf))
            del buf[:n]
            for table in (0, 1):
                _export(s.take(table, _NATIVE_COLUMNS[table]))
        s.pending()
    except scan.ScanError as e:
        reason, at = e.args
        assert isinstance(reason, str) and "\n" not in reason and isinstance(at, int)
    del s
    assert scan.live_tables() == before, "column tables leaked"


if __name__ == "__main__":
    from _driver import main

    sys.exit(main("fuzz_kineto_scan", one_input, seeds))
