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
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec

from tracekit.errors import TraceInputError
from tracekit.limits import event_too_long, max_event_bytes
from tracekit.parsers._io import prefetch
from tracekit.parsers.base import IngestContext
from tracekit.parsers.kineto import (
    DEVICE_CATS,
    EVENT_TABLES,
    JSON_SELECTS,
    MAX_NESTING,
    SKIPPED_CATS,
    EventCounts,
    KinetoFile,
    check_nesting,
    parse_trailer,
)
from tracekit.parsers.store_writer import duckdb_reason, insert_batch
from tracekit.sql_text import quote

_BOUNDARY = re.compile(rb"\}\s*,\s*(?=\{)")
_CHUNK_BYTES = 2 << 20  # JSON bytes per chunk file handed to DuckDB
_BATCH_BYTES = 6 << 20  # kept-event JSON bytes gathered before one INSERT over their chunk files
_BATCH_CHUNKS = 8  # chunks the producer may run ahead of DuckDB
_WINDOW = 256 << 10  # where to look for the last event boundary of a chunk
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")

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
    n_kept: int = 0  # complete events handed to DuckDB (some may be dropped there as invalid)



def chunk_files(kf: KinetoFile, directory: Path) -> Iterator[Chunk]:
    """Cut the events into chunks; write each one's kept events as JSON-array files under ``directory``.

    Kept: complete events (``ph == "X"``) except ``python_function`` (kept too with
    ``keep_python``); flows, instants, metadata and Python-stack events are only counted. Every cut
    is proven exact by decoding the chunk; ``kf.trailer`` gets the keys after the array.
    """
    assert kf._blocks is not None, "call open() first"
    buf = kf._buf
    kf.json_bytes += len(buf)  # decompressed bytes up to the end of buf (open() read ahead)
    index = 0
    limit = max_event_bytes()
    next_cut = _CHUNK_BYTES  # after a failed cut, wait for twice the bytes: linear time
    for block in kf._blocks:
        buf += block
        kf.json_bytes += len(block)
        if len(buf) < next_cut and len(buf) <= limit:
            continue
        events = _cut(kf, buf)
        if events is None:
            if len(buf) > limit:
                # no whole event in more than the limit: one event (or the keys after the
                # array) longer than it, or malformed JSON
                raise event_too_long(kf.path, f"at byte {kf.json_bytes - len(buf):,}", limit)
            next_cut = max(_CHUNK_BYTES, 2 * len(buf))
            continue
        next_cut = _CHUNK_BYTES
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
    for m in reversed(matches[-4:]):
        # A candidate '}' may sit inside a string or a nested object; decoding then fails
        # and an earlier candidate is tried. A decode that succeeds proves the cut exact.
        with memoryview(buf) as view:
            piece = b"".join((b"[", view[: m.start() + 1], b"]"))
        try:
            events = _decode(kf.path, piece)
        except msgspec.DecodeError:
            continue
        del buf[: m.end()]
        return events
    return None

def _finish(kf: KinetoFile, rest: bytes) -> list[Event]:
    """The last events, and the keys after the array (``traceName``, ...) into ``kf.trailer``,
    read as the C path reads them: the array ends at its first closing ']' (a second
    ``traceEvents`` key later is ignored) and the keys after it are decoded by
    :func:`tracekit.parsers.kineto.parse_trailer`."""
    data = b"[" + rest
    try:
        return _decode(kf.path, data)
    except msgspec.DecodeError as exc:
        m = _TRAILING.search(str(exc))
        if m is None:
            raise TraceInputError(kf.path, f"truncated or malformed JSON ({exc})") from None
    end = data.rindex(b"]", 0, int(m.group(1))) + 1
    try:
        events = _decode(kf.path, data[:end])
    except msgspec.DecodeError as exc:  # pragma: no cover - msgspec named the array's end
        raise TraceInputError(kf.path, f"truncated or malformed JSON ({exc})") from None
    if kf.array_format:
        raise TraceInputError(
            kf.path, "truncated or malformed JSON after the events (data after the closing ']')"
        )
    kf.trailer = parse_trailer(kf.path, data[end:])
    return events


def _decode(path: Path, data: bytes) -> list[Event]:
    """Decode a JSON array of events; a wrongly typed key is a user-facing error, not a crash.

    Nesting deeper than :data:`MAX_NESTING` levels inside an event is refused as the C scanner
    refuses it (see :func:`_with_nesting_budget`)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of small objects: the cyclic GC only costs time here
    try:
        events: list[Event] = _with_nesting_budget(path, _decode_events, data)
        return events
    except msgspec.ValidationError as exc:
        raise TraceInputError(path, f"unexpected value in an event: {exc}") from None
    finally:
        if gc_was_enabled:
            gc.enable()


# msgspec decodes recursively and raises RecursionError where Python's recursion budget ends
# (~990 levels from a shallow thread), while the C scanner refuses more than MAX_NESTING levels
# inside an event. So that both give the same verdict at every depth, the decode runs with exactly
# that budget: under enough padding Python frames (CPython 3.11 counts Python frames and msgspec's
# levels against one budget; measured per stack depth, and checked). Where padding does not
# change msgspec's budget (other CPython versions), every chunk is checked with the slower,
# exact kineto.nesting_depth instead.
_PADDING: dict[int, int | None] = {}  # stack depth -> frames to pad (None: padding does not work)


def _pad(n: int, fn: Any, data: Any) -> Any:
    return fn(data) if n <= 0 else _pad(n - 1, fn, data)


def _nested(depth: int) -> bytes:
    """One event whose args nest ``depth`` levels."""
    return b'[{"args":' + (b"[" * depth + b"]" * depth if depth else b"1") + b"}]"


def _run(pad: int, fn: Any, data: Any) -> tuple[bool, Any]:
    """(True, fn(data)) under ``pad`` extra frames, or (False, None) on RecursionError. The
    probes and the real decode both go through here from the same frame: the same stack."""
    try:
        return True, _pad(pad, fn, data)
    except RecursionError:
        return False, None


def _stack_depth() -> int:
    """Frames on the caller's stack."""
    n = 0
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        n, f = n + 1, f.f_back
    return n


def _with_nesting_budget(path: Path, decode: Any, data: bytes) -> Any:
    depth = _stack_depth()
    if depth not in _PADDING:
        # measured from this frame, where the decode below runs: the deepest args msgspec
        # decodes without padding, then the padding that leaves exactly MAX_NESTING
        lo, hi = 0, 4 * MAX_NESTING
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _run(0, _decode_events, _nested(mid))[0]:
                lo = mid
            else:
                hi = mid - 1
        pad: int | None = lo - MAX_NESTING
        if pad is None or pad < 0 or not _run(pad, _decode_events, _nested(MAX_NESTING))[0] or _run(pad, _decode_events, _nested(MAX_NESTING + 1))[0]:
            pad = None
        _PADDING[depth] = pad  # a race only recomputes the same value
    pad = _PADDING[depth]
    if pad is None:
        check_nesting(path, bytes(data), "in traceEvents", extra_levels=2)
        pad = 0
    ok, events = _run(pad, decode, data)
    if not ok:
        raise TraceInputError(path, f"nesting deeper than {MAX_NESTING} levels in traceEvents")
    return events


def _write_chunk(
    directory: Path, index: int, events: list[Event], input_bytes_done: int, keep_python: bool
) -> Chunk:
    device = [e for e in events if e.cat in DEVICE_CATS and e.ph == "X"]
    skipped = frozenset() if keep_python else SKIPPED_CATS
    host = [e for e in events if e.ph == "X" and e.cat not in DEVICE_CATS and e.cat not in skipped]
    n_kept = len(device) + len(host)
    n_python = sum(1 for e in events if e.cat in skipped)
    n_flow = sum(1 for e in events if e.ph in _FLOW_PHASES)
    return Chunk(
        _write_events(directory / f"{index:06d}.device.json", device),
        _write_events(directory / f"{index:06d}.host.json", host),
        len(events),
        n_python,
        n_flow,
        input_bytes_done,
        n_kept,
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
) -> EventCounts:
    """The pure-Python path: msgspec-decoded chunks written as JSON files for DuckDB's read_json.

    Returns (events, python_function events, flow events, complete events handed to DuckDB)."""
    import duckdb

    con = ctx.con
    n_total = n_python = n_flow = n_kept = bytes_done = 0
    pending: dict[str, list[Path]] = {table: [] for table in EVENT_TABLES}
    pending_bytes = 0

    def flush() -> None:
        # One INSERT over several chunk files: each read_json call costs a few ms of set-up,
        # which dominated when every 2 MiB chunk had its own (27 calls: 0.23 s vs 0.11 s).
        for table, paths in pending.items():
            if not paths:
                continue
            files = "[" + ", ".join(quote(str(p)) for p in paths) + "]"
            try:
                insert_batch(con, table, select=JSON_SELECTS[table].replace("{path}", files), params=params,
                             source=kf.path, what="unexpected value in an event")
            except duckdb.OutOfMemoryException:
                raise  # the memory limit, not the trace: the ingest says so
            except duckdb.Error as exc:  # reading a chunk file
                raise TraceInputError(kf.path, f"unexpected value in an event: {duckdb_reason(exc)}") from None
            finally:
                for p in paths:
                    p.unlink(missing_ok=True)
                paths.clear()

    # The producer thread decodes and writes the next chunks while DuckDB inserts earlier ones.
    try:
        for chunk in prefetch(chunk_files(kf, tmp), depth=_BATCH_CHUNKS + 1):
            for table, path in zip(EVENT_TABLES, (chunk.device_path, chunk.host_path)):
                if path is not None:
                    pending[table].append(path)
                    pending_bytes += path.stat().st_size
            if pending_bytes >= _BATCH_BYTES:
                flush()
                pending_bytes = 0
            n_total += chunk.n_events
            n_python += chunk.n_python
            n_flow += chunk.n_flow
            n_kept += chunk.n_kept
            ctx.progress(chunk.n_events, chunk.input_bytes_done - bytes_done)
            bytes_done = chunk.input_bytes_done
        flush()
    finally:
        for paths in pending.values():
            for p in paths:
                p.unlink(missing_ok=True)
    return EventCounts(n_total, n_python, n_flow, n_kept)


