"""The pure-Python path of the Kineto parser (no C compiler at install time, or
``TRACEKIT_PURE_PYTHON=1``): msgspec-decoded chunks of events written as JSON files for DuckDB's
``read_json``. Imported only when used: msgspec costs ~15 ms of every CLI start.

A producer thread decompresses, cuts the ``traceEvents`` array into chunks of about 2 MiB at event
boundaries, decodes each chunk with msgspec into small structs (only ``ph cat name pid tid`` are
decoded; ``ts``, ``dur`` and ``args`` stay raw JSON text), drops what is not stored
(``python_function``, flows, instants, metadata: counted only) and writes the device and host
events back as two small JSON-array files in scratch space; the main thread has DuckDB read them
with ``read_json`` and insert them with the SQL of :func:`tracekit.parsers.kineto._insert_sql`.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tracekit.errors import TraceInputError
from tracekit.parsers._io import prefetch
from tracekit.parsers.base import IngestContext
from tracekit.parsers.kineto import (
    _INSERT_DEVICE,
    _INSERT_HOST,
    DEVICE_CATS,
    SKIPPED_CATS,
    KinetoFile,
    _duckdb_reason,
    _sql_str,
)

_BOUNDARY = re.compile(rb"\}\s*,\s*(?=\{)")
_CHUNK_BYTES = 2 << 20  # JSON bytes per chunk file handed to DuckDB
_BATCH_BYTES = 6 << 20  # kept-event JSON bytes gathered before one INSERT over their chunk files
_BATCH_CHUNKS = 8  # chunks the producer may run ahead of DuckDB
_WINDOW = 256 << 10  # where to look for the last event boundary of a chunk
_MAX_UNSPLIT = 64 << 20  # a buffer this large without a valid boundary means malformed JSON

_decode_any = msgspec.json.Decoder().decode
_decode_top = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_ABSENT = msgspec.Raw(b"")  # a key the event does not have (omitted again when re-encoded)


class Event(msgspec.Struct, gc=False, omit_defaults=True):
    """The keys of one trace event that tracekit keeps; ``args`` stays undecoded JSON."""

    ph: str | None = None
    cat: str | None = None
    name: str | int | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    #: ``ts``/``dur`` pass through as the trace's own number text, so DuckDB converts them to
    #: nanoseconds exactly (a double cannot hold Unix-epoch µs with ns digits).
    ts: msgspec.Raw = _ABSENT
    dur: msgspec.Raw = _ABSENT
    args: msgspec.Raw = _ABSENT


_decode_events = msgspec.json.Decoder(list[Event]).decode
_encode = msgspec.json.Encoder().encode


@dataclass
class Chunk:
    """One chunk of a trace, ready for DuckDB: device and host events as JSON-array files
    (None when the chunk has none), and counts of all events and of the dropped kinds."""

    device_path: Path | None
    host_path: Path | None
    n_events: int
    n_python: int
    n_flow: int
    input_bytes_done: int  # bytes of the input file read so far (for progress)



def chunk_files(kf: KinetoFile, directory: Path) -> Iterator[Chunk]:
    """Cut the events into chunks; write each one's kept events as JSON-array files under ``directory``.

    Kept: complete events (``ph == "X"``) except ``python_function`` (kept too with
    ``keep_python``); flows, instants, metadata and Python-stack events are only counted. Every cut
    is proven exact by decoding the chunk; ``kf.trailer`` gets the keys after the array.
    """
    assert kf._blocks is not None, "call open() first"
    buf = kf._buf
    index = 0
    for block in kf._blocks:
        buf += block
        kf.json_bytes += len(block)
        if len(buf) < _CHUNK_BYTES:
            continue
        events = _cut(kf, buf)
        if events is None:
            continue
        index += 1
        yield _write_chunk(directory, index, events, kf._read.n, kf.keep_python)
    events = _finish(kf, bytes(buf))
    buf.clear()
    index += 1
    yield _write_chunk(directory, index, events, kf._read.n, kf.keep_python)


def _cut(kf: KinetoFile, buf: bytearray) -> list[Event] | None:
    """Decode the whole events at the head of ``buf`` (removing them from it), or None."""
    lo = max(0, len(buf) - _WINDOW)
    matches = list(_BOUNDARY.finditer(buf, lo)) or (list(_BOUNDARY.finditer(buf)) if lo else [])
    error: msgspec.DecodeError | None = None
    for m in reversed(matches[-4:]):
        # A candidate '}' may sit inside a string or a nested object; decoding then fails
        # and an earlier candidate is tried. A decode that succeeds proves the cut exact.
        with memoryview(buf) as view:
            piece = b"".join((b"[", view[: m.start() + 1], b"]"))
        try:
            events = _decode(kf.path, piece)
        except msgspec.DecodeError as exc:
            error = exc
            continue
        del buf[: m.end()]
        return events
    if len(buf) > _MAX_UNSPLIT:
        detail = f" ({error})" if error else ""
        raise TraceInputError(
            kf.path,
            f"malformed JSON in traceEvents near byte {kf.json_bytes - len(buf):,}{detail}",
        )
    return None

def _finish(kf: KinetoFile, rest: bytes) -> list[Event]:
    try:
        if kf.array_format:
            return _decode(kf.path, b"[" + rest)
        # Keys after the array (traceName, baseTimeNanoseconds, ...) are decoded generically.
        top = _decode_top(b'{"traceEvents":[' + rest)
        kf.trailer = {k: _decode_any(v) for k, v in top.items() if k != "traceEvents"}
        return _decode(kf.path, top["traceEvents"])
    except msgspec.DecodeError as exc:
        raise TraceInputError(kf.path, f"truncated or malformed JSON ({exc})") from None


def _decode(path: Path, data: bytes | msgspec.Raw) -> list[Event]:
    """Decode a JSON array of events; a wrongly typed key is a user-facing error, not a crash."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of small objects: the cyclic GC only costs time here
    try:
        return _decode_events(data)
    except msgspec.ValidationError as exc:
        raise TraceInputError(path, f"unexpected value in an event: {exc}") from None
    finally:
        if gc_was_enabled:
            gc.enable()


def _write_chunk(
    directory: Path, index: int, events: list[Event], input_bytes_done: int, keep_python: bool
) -> Chunk:
    device = [e for e in events if e.cat in DEVICE_CATS and e.ph == "X"]
    skipped = frozenset() if keep_python else SKIPPED_CATS
    host = [e for e in events if e.ph == "X" and e.cat not in DEVICE_CATS and e.cat not in skipped]
    n_python = sum(1 for e in events if e.cat in skipped)
    n_flow = sum(1 for e in events if e.ph in _FLOW_PHASES)
    return Chunk(
        _write_events(directory / f"{index:06d}.device.json", device),
        _write_events(directory / f"{index:06d}.host.json", host),
        len(events),
        n_python,
        n_flow,
        input_bytes_done,
    )


def _write_events(path: Path, events: list[Event]) -> Path | None:
    if not events:
        return None
    data = _encode(events)  # a JSON array; args keep their original text (may hold newlines)
    # The 2021 schema spells the key "external id" next to "External id"; DuckDB struct fields
    # are case-insensitive, so the old spelling is renamed before DuckDB reads the chunk.
    if b'"external id"' in data:
        data = data.replace(b'"external id"', b'"external_id_2021"')
    path.write_bytes(data)
    return path


_FLOW_PHASES = frozenset(("s", "f", "t"))


def stream_json(
    kf: KinetoFile, ctx: IngestContext, params: dict[str, Any], tmp: Path
) -> tuple[int, int, int]:
    """The pure-Python path: msgspec-decoded chunks written as JSON files for DuckDB's read_json.

    Returns (events, python_function events, flow events)."""
    import duckdb

    con = ctx.con
    n_total = n_python = n_flow = bytes_done = 0
    pending: dict[str, list[Path]] = {_INSERT_DEVICE: [], _INSERT_HOST: []}
    pending_bytes = 0

    def flush() -> None:
        # One INSERT over several chunk files: each read_json call costs a few ms of set-up,
        # which dominated when every 2 MiB chunk had its own (27 calls: 0.23 s vs 0.11 s).
        for sql, paths in pending.items():
            if not paths:
                continue
            files = "[" + ", ".join(_sql_str(str(p)) for p in paths) + "]"
            try:
                con.execute(sql.replace("{path}", files), params)
            except duckdb.Error as exc:
                raise TraceInputError(kf.path, f"unexpected value in an event: {_duckdb_reason(exc)}") from None
            finally:
                for p in paths:
                    p.unlink(missing_ok=True)
                paths.clear()

    # The producer thread decodes and writes the next chunks while DuckDB inserts earlier ones.
    try:
        for chunk in prefetch(chunk_files(kf, tmp), depth=_BATCH_CHUNKS + 1):
            for sql, path in ((_INSERT_DEVICE, chunk.device_path), (_INSERT_HOST, chunk.host_path)):
                if path is not None:
                    pending[sql].append(path)
                    pending_bytes += path.stat().st_size
            if pending_bytes >= _BATCH_BYTES:
                flush()
                pending_bytes = 0
            n_total += chunk.n_events
            n_python += chunk.n_python
            n_flow += chunk.n_flow
            ctx.progress(chunk.n_events, chunk.input_bytes_done - bytes_done)
            bytes_done = chunk.input_bytes_done
        flush()
    finally:
        for paths in pending.values():
            for p in paths:
                p.unlink(missing_ok=True)
    return n_total, n_python, n_flow


