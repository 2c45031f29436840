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

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[2]

from _driver import c_module

scan = c_module("_kineto_scan")

from tracekit.parsers.kineto import _ARG_KEYS_BYTES, _DEVICE_CATS_BYTES, _NATIVE_COLUMNS

_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')


def seeds() -> list[bytes]:
    """The events of the bundled Kineto samples, cut to ~32 KB each (plus a tricky hand-made one)."""
    out = []
    for p in sorted((ROOT / "sample_traces").rglob("*.pt.trace.json.gz")):
        raw = gzip.decompress(p.read_bytes())
        m = _EVENTS.search(raw)
        if m:
            body = raw[m.end():]
            out.append(body[:32768])
            out.append(body[-8192:])
    out.append(b'{"ph":"X","cat":"kernel","name":"k\\ud83d\\ude80","pid":0,"tid":3,"ts":10.5,"dur":1e-3,'
               b'"args":{"correlation":99,"grid":[1,2,3],"kind":{"a":[1.50,-0,"x y"]}}},{}],"x":1}')
    return out[:12]


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
            n = s.scan(buf, c == len(body))
            assert 0 <= n <= len(buf), (n, len(buf))
            del buf[:n]
            for table in (0, 1):
                b = s.take(table, _NATIVE_COLUMNS[table])
                if b is not None:
                    assert len(b) >= 0
                    b.__arrow_c_stream__()
        s.pending()
    except scan.ScanError as e:
        reason, at = e.args
        assert isinstance(reason, str) and "\n" not in reason and isinstance(at, int)
    del s
    assert scan.live_tables() == before, "column tables leaked"


if __name__ == "__main__":
    from _driver import main

    sys.exit(main("fuzz_kineto_scan", one_input, seeds))
