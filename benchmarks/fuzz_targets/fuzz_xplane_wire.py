#!/usr/bin/env python3
"""Coverage-guided target of the C XSpace wire reader (``tracekit/parsers/_xplane_wire.c``).

The input is a serialized XSpace (protobuf wire format). ``split_space`` walks it (planes, lines,
metadata); every line it reports is then read by ``scan_line`` (with the plane's event names, some
ids to drop and a row cap taken from the input's first byte). Both may refuse with ``ValueError``;
any other exception, a span outside the buffer, or a crash is a bug.

    .venv/bin/python benchmarks/fuzz_targets/fuzz_xplane_wire.py -max_total_time=60     # with atheris
    .venv/bin/python benchmarks/fuzz_targets/fuzz_xplane_wire.py --fallback --seconds 60 # without
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[2]

from _driver import c_module

wire = c_module("_xplane_wire")

import numpy as np


def seeds() -> list[bytes]:
    """The bundled XPlane sample (whole, and cut to its first 64 KB) and fuzz_xplane's tiny space."""
    raw = gzip.decompress((ROOT / "sample_traces" / "jax_cpu_decode_recompile.xplane.pb.gz").read_bytes())
    out = [raw[:65536], raw]
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import fuzz_xplane

        out.append(fuzz_xplane.tiny_space())
    except (ImportError, AttributeError):
        pass
    return out


NAMES = {i: f"op.{i}" for i in range(1, 64)}


def one_input(data: bytes) -> None:
    if not data:
        return
    mode = data[0]
    raw = data[1:] if mode & 0x80 else data
    try:
        _stripped, planes = wire.split_space(raw)
    except ValueError:
        return
    drop = np.array([2, 3], dtype=np.int64) if mode & 1 else None
    max_rows = (mode >> 1) % 8 * 3
    for lines in planes:
        for span in lines[:50]:
            offset, size = span[0], span[1]
            assert 0 <= offset and 0 <= size and offset + size <= len(raw), (span, len(raw))
            start = 0
            for _ in range(1000):
                try:
                    res = wire.scan_line(raw[offset:offset + size], NAMES, drop, (), None, start, max_rows)
                except ValueError:
                    break
                nxt = res[-1]
                if not nxt or nxt <= start:
                    break
                start = nxt


if __name__ == "__main__":
    from _driver import main

    sys.exit(main("fuzz_xplane_wire", one_input, seeds))
