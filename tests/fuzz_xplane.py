"""XPlane (``.xplane.pb``) inputs for the hostile-input tests and benchmarks.

* :func:`mutations` — a seeded mutator over the bundled XPlane sample and small corpus files
  (truncations, byte flips, varint corruption, lengths past the end, wrong wire types, deep
  nesting, huge counts, huge claimed lengths), for the fuzz suite.
* :func:`write_synthetic` — a big synthetic XSpace written straight to disk (never held in memory):
  many lines with a few events each, or one line with millions of events, with the plane's
  metadata after its lines (the order TSL writes) or before them.

Only the standard library is used (and ``gzip``), so benchmarks can import this file too.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
CORPUS = Path("/work/shared/corpus")

# ---------------------------------------------------------------------------------------------
# Wire format


def varint(v: int) -> bytes:
    """Protobuf base-128 varint of a non-negative ``v`` (negative int64s: add 2**64 first)."""
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return key(number, 2) + varint(len(payload)) + payload


def vfield(number: int, value: int) -> bytes:
    """A varint field (wire type 0)."""
    return key(number, 0) + varint(value % (1 << 64))


def _meta_entry(map_field: int, mid: int, message: bytes) -> bytes:
    return field(map_field, vfield(1, mid) + field(2, message))


def tiny_space() -> bytes:
    """A small valid XSpace: a host plane and a TPU plane, stats of every kind."""
    host_line = field(2, b"python") + vfield(3, 1000) + b"".join(
        field(4, vfield(1, 1 + i % 2) + vfield(2, 100 * i) + vfield(3, 50)
              + field(4, vfield(1, 1) + vfield(4, i))) for i in range(4))
    host = (vfield(1, 1) + field(2, b"/host:CPU") + field(3, host_line)
            + _meta_entry(4, 1, vfield(1, 1) + field(2, b"step")) + _meta_entry(4, 2, vfield(1, 2) + field(2, b"$py"))
            + _meta_entry(5, 1, vfield(1, 1) + field(2, b"step_num")))
    op_line = field(2, b"XLA Ops") + vfield(3, 2000) + b"".join(
        field(4, vfield(1, 7) + vfield(2, 1000 * i) + vfield(3, 300)
              + field(4, vfield(1, 2) + vfield(3, 250)) + field(4, vfield(1, 3) + field(5, b"fusion.1"))
              + field(4, vfield(1, 4) + vfield(7, 5)) + field(4, vfield(1, 6) + key(2, 1) + b"\0" * 7 + b"\x40"))
        for i in range(3))
    tpu = (vfield(1, 2) + field(2, b"/device:TPU:0") + field(3, op_line)
           + _meta_entry(4, 7, vfield(1, 7) + field(2, b"%fusion.1 = f32[8]") + field(4, b"fusion.1")
                         + field(5, vfield(1, 1) + vfield(4, 1000)))
           + b"".join(_meta_entry(5, i, vfield(1, i) + field(2, n)) for i, n in
                      ((1, b"flops"), (2, b"device_duration_ps"), (3, b"hlo_op"), (4, b"ref"),
                       (5, b"interned"), (6, b"dbl")))
           + field(6, vfield(1, 1) + key(2, 1) + b"\0" * 6 + b"\xf0\x3f"))
    return field(1, host) + field(1, tpu) + field(4, b"host0")


# ---------------------------------------------------------------------------------------------
# Mutations


def seed_files() -> list[bytes]:
    """Serialized XSpaces to mutate: the bundled sample, small corpus files (< 1 MB), a tiny one."""
    out = [tiny_space()]
    for p in sorted(SAMPLES.glob("*.xplane.pb*")):
        raw = p.read_bytes()
        out.append(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if (CORPUS / "xplane").is_dir():
        out += [p.read_bytes() for p in sorted((CORPUS / "xplane").rglob("*.xplane.pb"))
                if p.stat().st_size < 400_000]
    return out


def _field_starts(raw: bytes, limit: int = 4096) -> list[int]:
    """Offsets of field keys found by walking nested messages (best effort, at most ``limit``)."""
    starts: list[int] = []
    stack = [(0, len(raw))]
    while stack and len(starts) < limit:
        pos, end = stack.pop()
        while pos < end and len(starts) < limit:
            starts.append(pos)
            k, p = _read_varint(raw, pos, end)
            if k is None:
                break
            wt = k & 7
            if wt == 0:
                _, p2 = _read_varint(raw, p, end)
                if p2 is None:
                    break
                pos = p2
            elif wt == 2:
                n, p2 = _read_varint(raw, p, end)
                if n is None or p2 is None or p2 + n > end:
                    break
                if n > 1:
                    stack.append((p2, p2 + n))
                pos = p2 + n
            elif wt == 1:
                pos = p + 8
            elif wt == 5:
                pos = p + 4
            else:
                break
    return starts


def _read_varint(raw: bytes, pos: int, end: int) -> tuple[int | None, int]:
    v = shift = 0
    while pos < end and shift < 70:
        b = raw[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7
    return None, pos


def _nested(depth: int) -> bytes:
    """``depth`` levels of messages inside field 1 (XSpace.planes → XPlane.id ...: wrong types)."""
    inner = b""
    for _ in range(depth):
        inner = field(1, inner)
    return inner


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    n = len(raw)
    kind = rng.randrange(12)
    if kind == 0:  # truncation
        return raw[: rng.randrange(max(n, 1))]
    if kind == 1:  # byte flips
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 2:  # random bytes
        b = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    starts = _field_starts(raw)
    at = rng.choice(starts) if starts else 0
    k, p = _read_varint(raw, at, n)
    if kind == 3:  # corrupt varint: all continuation bits (an endless varint), or 11 bytes
        return raw[:p] + b"\xff" * rng.choice((3, 10, 11)) + raw[p:]
    if kind == 4:  # a length pointing past the end, or a huge claimed length
        huge = rng.choice((n + 1, 1 << 31, 1 << 32, 1 << 60, (1 << 64) - 1))
        if k is not None and k & 7 == 2:
            ln, p2 = _read_varint(raw, p, n)
            return raw[:p] + varint(huge) + raw[p2:]
        return raw[:at] + key(1, 2) + varint(huge) + raw[at:]
    if kind == 5:  # wrong wire type on a known field
        if k is not None:
            wt = rng.choice([w for w in (0, 1, 2, 3, 4, 5, 6, 7) if w != k & 7])
            return raw[:at] + varint((k >> 3) << 3 | wt) + raw[p:]
        return raw
    if kind == 6:  # deep nesting
        return raw[:at] + _nested(rng.choice((64, 200, 2000, 20000))) + raw[at:]
    if kind == 7:  # huge counts: one field repeated many times
        if k is not None and k & 7 == 2:
            ln, p2 = _read_varint(raw, p, n)
            if ln is not None and p2 + ln <= n and ln < 200:
                one = raw[at : p2 + ln]
                return raw[:at] + one * rng.choice((1000, 20000)) + raw[at:]
        return raw + field(4, b"h") * 5000
    if kind == 8:  # splice: a chunk of the file copied elsewhere
        a = rng.randrange(max(n, 1))
        b_ = min(n, a + rng.randrange(1, 64))
        c = rng.randrange(max(n, 1))
        return raw[:c] + raw[a:b_] + raw[c:]
    if kind == 9:  # field number 0 or out of range
        return raw[:at] + rng.choice((b"\x00", varint((1 << 29) << 3), varint((1 << 32) << 3))) + b"\x01" + raw[at:]
    if kind == 10:  # bad UTF-8 in a string field
        idx = raw.find(b"XLA")
        idx = idx if idx >= 0 else raw.find(b"/host")
        if idx >= 0:
            return raw[:idx] + b"\xc3\x28" + raw[idx + 2 :]
        return raw + field(4, b"\xff\xfe")
    # kind == 11: a group start without its end, or a stray end group
    return raw[:at] + rng.choice((key(9, 3), key(9, 4), key(9, 3) + key(10, 4))) + raw[at:]


def mutations(seed: int, n: int | None = None, seeds: list[bytes] | None = None) -> Iterator[bytes]:
    """Mutated serialized XSpaces (plain bytes, not gzip), deterministic for a ``seed``.

    Endless unless ``n`` is given; ``seeds`` defaults to :func:`seed_files`. One in 20 is a
    mutation of a mutation (two steps)."""
    rng = random.Random(seed)
    bases = seeds if seeds is not None else seed_files()
    i = 0
    while n is None or i < n:
        raw = _mutate(rng, rng.choice(bases))
        if rng.random() < 0.05:
            raw = _mutate(rng, raw)
        yield raw
        i += 1


# ---------------------------------------------------------------------------------------------
# Big synthetic XSpaces, streamed to disk


def _event(i: int, n_meta: int) -> bytes:
    return (vfield(1, 1 + i % n_meta) + vfield(2, 1000 + 7 * i) + vfield(3, 500 + i % 97)
            + field(4, vfield(1, 1) + vfield(4, i)))


def write_synthetic(
    path: Path, *, n_lines: int = 1_000_000, events_per_line: int = 3, big_line_events: int = 0,
    metadata_first: bool = False, device: bool = False, compress: bool = False,
) -> int:
    """Write a synthetic XSpace to ``path`` (gzip when ``compress``) and return the event count.

    One plane (``/host:CPU`` lines named ``thread NNNNNNN``, or with ``device`` a
    ``/device:TPU:0`` whose lines are all ``XLA Ops``) with ``n_lines`` lines of
    ``events_per_line`` events, plus one more line of ``big_line_events`` events when that is
    non-zero. The plane's event/stat metadata follows its lines (the wire order TSL writes)
    unless ``metadata_first``."""
    n_meta = 8
    plane_name = b"/device:TPU:0" if device else b"/host:CPU"
    meta = b"".join(_meta_entry(4, m, vfield(1, m) + field(2, b"op.%d" % m)) for m in range(1, n_meta + 1))
    meta += _meta_entry(5, 1, vfield(1, 1) + field(2, b"step_num" if not device else b"program_id"))
    head = vfield(1, 1) + field(2, plane_name)
    events = b"".join(field(4, _event(i, n_meta)) for i in range(events_per_line))

    def line(i: int, body: bytes) -> bytes:
        name = b"XLA Ops" if device else b"thread %07d" % i
        return field(3, vfield(1, (1 << 21) + i) + field(2, name) + vfield(3, 10**9 + i) + body)

    line_size = len(line(0, events))
    big_body_len = 0
    if big_line_events:
        chunk = b"".join(field(4, _event(i, n_meta)) for i in range(10000))
        tail = b"".join(field(4, _event(i, n_meta)) for i in range(big_line_events % 10000))
        big_body_len = len(chunk) * (big_line_events // 10000) + len(tail)
    big_header = b""
    if big_line_events:
        inner = vfield(1, n_lines + 1) + field(2, b"XLA Ops" if device else b"big thread") + vfield(3, 10**9)
        big_header = key(3, 2) + varint(len(inner) + big_body_len) + inner
    plane_len = len(head) + len(meta) + n_lines * line_size + len(big_header) + big_body_len
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        out: BinaryIO = f  # type: ignore[assignment]
        out.write(key(1, 2) + varint(plane_len) + head)
        if metadata_first:
            out.write(meta)
        buf = []
        for i in range(n_lines):
            buf.append(line(i, events))
            if len(buf) >= 10000:
                out.write(b"".join(buf))
                buf.clear()
        out.write(b"".join(buf))
        if big_line_events:
            out.write(big_header)
            out.writelines(chunk for _ in range(big_line_events // 10000))
            out.write(tail)
        if not metadata_first:
            out.write(meta)
        out.write(field(4, b"synthetic"))
    return n_lines * events_per_line + big_line_events
