#!/usr/bin/env python3
"""Coverage-guided target of the C XSpace wire reader (``tracekit/parsers/_xplane_wire.c``).

The input is a serialized XSpace (protobuf wire format). ``split_space`` walks it (planes, lines,
metadata); every line it reports is then read by ``scan_line`` (with the plane's event names, some
ids to drop, a row cap, and where to cut the line short taken from the input's first byte: a line
cut at 1/8 .. 7/8 of its length ends inside an event; where the row cap stops a scan, the line is
also read cut 1 to 3 bytes after that event's start, inside its tag or length). Both may refuse with
``ValueError``; any other exception, a span outside the buffer, or a crash is a bug. Every buffer
reaches the C code in an allocation of exactly its size (``_driver.exact``).

    .venv/bin/python benchmarks/fuzz_targets/fuzz_xplane_wire.py -max_total_time=60     # with atheris
    .venv/bin/python benchmarks/fuzz_targets/fuzz_xplane_wire.py --fallback --seconds 60 # without
"""

from __future__ import annotations

import contextlib
import gzip
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from _driver import c_module, exact
from _driver import mutate as generic_mutate

wire = c_module("_xplane_wire")

import numpy as np


def _trimmed(raw: bytes, lines: int = 4, events: int = 16) -> bytes | None:
    """``raw`` with at most ``lines`` lines per plane, ``events`` events per line and no large
    event metadata (a small valid XSpace of the same shape, where a mutation lands in a line far
    more often), or None when it does not parse."""
    from google.protobuf.message import DecodeError

    from tracekit.parsers.proto import xplane_pb2  # type: ignore[attr-defined]

    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(raw)
    except DecodeError:
        return None
    for plane in space.planes:
        del plane.lines[lines:]
        for meta in plane.event_metadata.values():
            if meta.ByteSize() > 1024:  # serialized HLO modules and the like: most of the bytes
                meta.ClearField("metadata")
                meta.ClearField("stats")
        for line in plane.lines:
            del line.events[events:]
    return space.SerializeToString()


def seeds_of(path: Path, max_bytes: int = 256 << 10) -> list[bytes]:
    """Inputs from one serialized XSpace (``.xplane.pb`` or ``.pb.gz``): trimmed (:func:`_trimmed`),
    and whole when it is at most ``max_bytes``, each after a mode byte (0x80: the rest is the space)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    small = _trimmed(raw)
    return ([b"\xb5" + small] if small else []) + ([b"\x80" + raw] if len(raw) <= max_bytes else [])


def mutate(data: bytes, rng: random.Random, seeds: list[bytes]) -> bytes:
    """One time in four a wire-format-aware mutation (``tests/fuzz_xplane.py``: corrupt varints,
    lengths past the end, wrong wire types, deep nesting, ...; it walks the fields in Python, ~50x
    the cost of a byte mutation), else the generic byte mutator."""
    if rng.random() < 0.25 and data[:1] >= b"\x80":
        import fuzz_xplane

        return data[:1] + next(fuzz_xplane.mutations(rng.randrange(1 << 32), 1, [data[1:]]))
    return generic_mutate(data, rng, seeds)


def seeds() -> list[bytes]:
    """The bundled XPlane sample (:func:`seeds_of`) and fuzz_xplane's tiny space."""
    out = seeds_of(ROOT / "sample_traces" / "jax_cpu_decode_recompile.xplane.pb.gz")
    try:
        import fuzz_xplane

        out.append(b"\xc1" + fuzz_xplane.tiny_space())
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
        _stripped, planes = wire.split_space(exact(raw))
    except ValueError:
        return
    drop = np.array([2, 3], dtype=np.int64) if mode & 1 else None
    max_rows = (mode >> 1) % 8 * 3
    cut = (mode >> 4) & 7
    for lines in planes:
        for span in lines[:50]:
            offset, size = span[0], span[1]
            assert 0 <= offset and 0 <= size and offset + size <= len(raw), (span, len(raw))
            whole = raw[offset:offset + size]
            line = exact(whole[:size * (8 - cut) // 8])
            start = 0
            for _ in range(1000):
                try:
                    res = wire.scan_line(line, NAMES, drop, (), None, start, max_rows)
                except ValueError:
                    break
                nxt = res[-1]
                if not nxt or nxt <= start:
                    break
                if cut:  # where the row cap stopped is a field's start: cut the line inside its tag or length
                    with contextlib.suppress(ValueError):
                        wire.scan_line(exact(whole[:nxt + 1 + cut % 3]), NAMES, drop, (), None, nxt, max_rows)
                start = nxt


if __name__ == "__main__":
    from _driver import main

    sys.exit(main("fuzz_xplane_wire", one_input, seeds))
