"""How :mod:`tracekit.parsers.xplane` reads XSpace protobufs (imported only when an XPlane file
is ingested, so that other formats do not load protobuf and NumPy).

Profiles are written by ``jax.profiler``, ``torch_xla.debug.profiler`` and TensorFlow on TPU, GPU and CPU. Read
with protobuf from the project's own schema (``proto/xplane.proto``), never via the trace-viewer
JSON (which drops ``flops``/``program_id`` and stops at 1M events). What goes where:

* **device activity** → ``device_activity`` (the ``kernels`` view), one row per event:
  TPU ``XLA Ops`` (category ``kernel``; ``Async XLA Ops`` as ``xla_async``) and GPU stream lines
  ``Stream #N(Kernel|Compute|MemcpyH2D|…)`` / ``Stream #N`` (kernel, memcpy, memset). ``device`` is
  the plane's index (``/device:TPU:2`` → 2). TPU ops keep both clocks: ``dur_ns`` is the event's
  own duration on the trace timeline; ``device_dur_ns`` is the ``device_duration_ps`` stat that
  XProf reports. Per-op costs from the op's metadata (``flops``, ``bytes_accessed``, HBM bytes from
  ``memory_access_breakdown``, ``hlo_category``, ``program_id``) are copied onto each row and kept
  in full in ``xla_op_costs``. On a CPU-only capture (no device plane) the XLA ops executed on the
  ``tf_XLA…CpuClient`` threads (events with an ``hlo_op`` stat) are the device activity.
* **device spans** that are not activities (``XLA Modules`` executions, ``XLA TraceMe``,
  ``Steps``, TensorFlow/Framework op and name-scope lines) → ``host_events`` with categories
  ``xla_module``, ``device_traceme``, ``step``, ``framework_op``, ``name_scope``.
* **host TraceMe events** (one line per thread on ``/host:CPU``) → ``host_events`` (category
  ``traceme``), with their stats as JSON in ``args``. Python-tracer events (``/host:python-tracer``
  plane, or names starting with ``$``) are only counted, as Kineto's ``python_function`` are.
* ``/host:metadata`` → ``xla_module_meta``: each compiled module with its entry signature.
* plane stats (peak TFLOP/s and HBM GB/s on TPU; clock, core count, memory bandwidth on GPU) →
  ``device_meta``.

The file is streamed (issue 17): memory does not grow with the number of planes, lines or
events. A serialized XSpace over 32 MiB is mapped read-only (a ``.gz`` is first inflated into an
anonymous temp file in ``TRACEKIT_TMPDIR``, under the shared inflation cap), the C helper checks
every byte of it once (structure, UTF-8 of event strings, no string/bytes field over
``TRACEKIT_MAX_EVENT_BYTES``), and each plane is then read in two passes over its bytes: its
metadata first (it follows the lines on the wire, as TSL writes it; any order is read), then its
lines a batch at a time; pages read are given back as the reader moves on. Without the helper
the same walk is done in Python and protobuf parses one plane's metadata or one line at a time.

Events are read line by line into :class:`_LineEvents` columns, by the C helper ``_xplane_wire``
straight from the serialized XSpace (a few ns per byte) or, without it, through protobuf's Python
wrappers (microseconds per event and stat; same columns, the tests hold the two to each other).
Per-line constants (thread, category, the line's start) are spread over their rows when a batch
is inserted; the columns reach DuckDB as NumPy arrays through ``store_writer.insert_batch`` (a
replacement scan: no catalog entry, so each batch is freed once inserted); names, costs and
categories are joined in SQL.
"""

from __future__ import annotations

import gc
import itertools
import json
import mmap
import operator
import os
import re
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
from google.protobuf.message import DecodeError

from tracekit.errors import ConfigError, TraceInputError
from tracekit.limits import InputLimitError, check_temp_space, event_too_long, max_event_bytes, temp_dir
from tracekit.parsers import native
from tracekit.parsers._io import GZIP_MAGIC, iter_decompressed
from tracekit.parsers.base import DeviceInfo, IngestContext, RankInfo
from tracekit.parsers.proto import hlo_subset_pb2, xplane_pb2
from tracekit.parsers.store_writer import create_temp_table, insert_batch, insert_rows, rank_span

if TYPE_CHECKING:
    from tracekit.parsers import _xplane_wire as _wire
else:  # the C helper when setup.py built it, else None: wire_enabled() says whether it is used
    _wire = native.built("_xplane_wire")

_METADATA_ID = operator.attrgetter("metadata_id")

#: Largest message protobuf parses (2 GiB - 1).
PROTOBUF_LIMIT = (1 << 31) - 1

_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU|CUSTOM|[A-Z_]+):(\d+)(?: (.*))?$")
_STREAM_LINE = re.compile(r"^Stream #(\d+)(?:\((.*)\))?$")
_PYTHON_PLANES = {"/host:python-tracer"}
_SKIPPED_HOST_PLANES = {"/host:metadata", "Task Environment", "/host:tfstreamz"}

#: TPU / XLA device lines → host_events category (``None``: device activity, handled apart).
_DEVICE_SPAN_LINES = {
    "XLA Modules": "xla_module",
    "Sparse Core Modules": "xla_module",
    "XLA TraceMe": "device_traceme",
    "Steps": "step",
    "Sparse Core Steps": "step",
    "Framework Ops": "framework_op",
    "TensorFlow Ops": "framework_op",
    "Framework Name Scope": "name_scope",
    "TensorFlow Name Scope": "name_scope",
    "Source code": "source",
    "Host Offload Ops": "host_offload_op",
}
_OP_LINES = {"XLA Ops": "kernel", "Sparse Core Ops": "kernel", "Async XLA Ops": "xla_async"}

_PRIMITIVE = {
    1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64",
    10: "f16", 11: "f32", 12: "f64", 15: "c64", 16: "bf16", 18: "c128", 19: "f8e5m2",
    20: "f8e4m3fn", 21: "s4", 22: "u4", 26: "s2", 27: "u2", 28: "f8e4m3", 13: "tuple",
    14: "opaque", 17: "token",
}


# ---------------------------------------------------------------------------------------------
# Reading and decoding


def read_xspace(path: Path) -> xplane_pb2.XSpace:
    """Parse one ``.xplane.pb`` / ``.xplane.pb.gz`` whole with protobuf (tests and tools; ingest
    streams with :func:`decode_xspace`); raise TraceInputError with the reason."""
    return _parse(path, _read_bytes(path))


def _read_bytes(path: Path) -> bytes:
    """The serialized XSpace of a file (gzip inflated), whole in memory."""
    source = XSpaceSource(path, in_memory=True)
    return bytes(source.data)


def _parse(path: Path, raw: bytes) -> xplane_pb2.XSpace:
    """protobuf's parse of a serialized XSpace, with its limits and errors in one line each."""
    if len(raw) > PROTOBUF_LIMIT:
        raise TraceInputError(
            path,
            f"{len(raw):,} bytes is over protobuf's 2 GiB message limit; capture fewer devices or a "
            "shorter window (one file per host or per chip)",
        )
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(raw)
    except DecodeError as exc:
        raise TraceInputError(path, f"not a valid XSpace protobuf (corrupt or truncated: {exc})") from None
    if not space.planes:
        raise TraceInputError(path, "not an XPlane profile (no planes)")
    if not any(p.name for p in space.planes):
        raise TraceInputError(path, "not an XPlane profile (planes without names)")
    return space


#: A serialized XSpace up to this size (bytes) is read into memory; a bigger one is mapped
#: read-only (a plain file) or inflated into a temp file that is mapped (gzip).
IN_MEMORY_BYTES = 32 << 20
#: Pages of a mapped XSpace are given back to the kernel once this many bytes behind the reader.
_RELEASE_BYTES = 32 << 20
#: Most planes in one XSpace (real captures have tens; each plane costs a few DuckDB statements).
MAX_PLANES = 10_000
#: Lines per protobuf parse of line headers (the C helper strips their events).
_LINE_BATCH = 4096


class XSpaceSource:
    """The serialized XSpace of one file: ``data`` is bytes (small files) or a read-only mapping
    of the file, or of the temp file its gzip was inflated into (unlinked when made: nothing is
    left behind, even after a crash). Memory stays bounded for any size: mapped pages read are
    given back with :meth:`release` as the reader moves on."""

    def __init__(self, path: Path, *, in_memory: bool = False) -> None:
        self.path = path
        self.mapped: mmap.mmap | None = None
        self._file: Any = None
        self._unreleased: int | None = None  # start of the bytes read and not yet released
        try:
            with path.open("rb") as f:
                head = f.read(2)
                size = os.fstat(f.fileno()).st_size
                if not head:
                    raise TraceInputError(path, "empty file")
                if head != GZIP_MAGIC and (in_memory or size <= IN_MEMORY_BYTES):
                    f.seek(0)
                    self.data: bytes | mmap.mmap = f.read()
                elif head != GZIP_MAGIC:
                    self.data = self.mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                else:
                    self.data = self._inflate(in_memory)
        except OSError as exc:
            raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None
        self.view = memoryview(self.data)

    def _inflate(self, in_memory: bool) -> bytes | mmap.mmap:
        """The gzip file inflated (through :func:`iter_decompressed`: its ratio cap applies): in
        memory up to :data:`IN_MEMORY_BYTES`, else into an anonymous temp file in
        ``TRACEKIT_TMPDIR`` (free space checked as it grows) that is then mapped."""
        buf = bytearray()
        blocks = iter_decompressed(self.path)
        for block in blocks:
            buf += block
            if len(buf) > IN_MEMORY_BYTES and not in_memory:
                break
        else:
            if not buf:
                raise TraceInputError(self.path, "empty file (gzip of nothing)")
            return bytes(buf)
        where = temp_dir()
        check_temp_space(2 * len(buf), where)
        f = tempfile.TemporaryFile(dir=where, prefix="tracekit-xplane-")  # noqa: SIM115 - closed by close()
        self._file = f
        try:
            f.write(buf)
            written, checked = len(buf), len(buf)
            del buf
            for block in blocks:
                f.write(block)
                written += len(block)
                if written - checked >= 64 << 20:  # room for the next 64 MiB and as much again
                    check_temp_space(128 << 20, where)
                    checked = written
            f.flush()
        except OSError as exc:
            f.close()
            var = "TRACEKIT_TMPDIR" if os.environ.get("TRACEKIT_TMPDIR") else "the temp directory"
            raise ConfigError(var, f"{where}: cannot write the inflated {self.path.name} "
                                   f"({exc.strerror or exc}); point TRACEKIT_TMPDIR elsewhere") from None
        self.mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self.mapped

    def release(self, start: int, end: int) -> None:
        """Say that bytes [start, end) have been read: once the ranges said so span 32 MiB,
        their mapped pages are given back to the kernel (read again from the file if needed).
        Nothing for in-memory data."""
        if self.mapped is None:
            return
        lo = start if self._unreleased is None else min(self._unreleased, start)
        if end - lo < _RELEASE_BYTES:
            self._unreleased = lo
            return
        self._unreleased = None
        page = mmap.PAGESIZE
        first = -(-lo // page) * page
        last = end // page * page
        if last > first:
            self.mapped.madvise(mmap.MADV_DONTNEED, first, last - first)

    def close(self) -> None:
        self.view.release()
        if self.mapped is not None:
            try:
                self.mapped.close()
            except BufferError:  # a view still alive somewhere: the GC closes it
                pass
        if self._file is not None:
            self._file.close()


@dataclass
class DecodedSpace:
    """An XSpace ready for :class:`XSpaceReader`, read plane by plane and line by line.

    ``space`` is protobuf's parse of the XSpace *without its planes* (hostnames, errors,
    warnings); ``planes`` holds (offset, size, name) of each plane's bytes in ``source``. Every
    byte was checked by the C helper when ``wire`` (the helper then reads the events); without
    it each plane and line is checked by protobuf as it is parsed."""

    source: XSpaceSource
    space: xplane_pb2.XSpace
    planes: list[tuple[int, int, str]]
    wire: bool

    @property
    def lines(self) -> bool | None:
        """True when the C helper reads the events (None: protobuf's wrappers)."""
        return True if self.wire else None

    def close(self) -> None:
        self.source.close()


def wire_enabled() -> bool:
    """True when the C helper is built and not turned off with ``TRACEKIT_PURE_PYTHON=1``
    (:func:`tracekit.parsers.native.load` chooses)."""
    return native.load("_xplane_wire") is not None


def decode_xspace(path: Path) -> DecodedSpace:
    """Open one ``.xplane.pb`` / ``.xplane.pb.gz`` for ingest: the whole file checked (C helper),
    the planes found; raise TraceInputError with the reason. Close the result when done."""
    source = XSpaceSource(path)
    try:
        return _decode(path, source)
    except BaseException:
        source.close()
        raise


def _decode(path: Path, source: XSpaceSource) -> DecodedSpace:
    view, wire = source.view, wire_enabled()
    max_leaf = max_event_bytes()
    if wire:
        verdict = _wire.check_space(view, max_leaf, source.mapped is not None)
        if verdict is not None:
            what, at, n = verdict
            if what == "too long":
                raise event_too_long(path, f"(a {n:,}-byte field at byte {at:,})", max_leaf)
            raise TraceInputError(path, f"not a valid XSpace protobuf (malformed wire data at byte {at:,})")
    rest = _split(path, view, 1, wire)
    space = _parse_part(path, xplane_pb2.XSpace, rest)
    planes: list[tuple[int, int, str]] = []
    for offset, size in _spans(path, view, 1, wire):
        if len(planes) >= MAX_PLANES:
            raise InputLimitError(path, f"more than {MAX_PLANES:,} planes (captures have tens): not read")
        name_spans = _spans(path, view[offset : offset + size], 2, wire)
        name = b""
        for o, s in name_spans:  # the last one counts, as in protobuf
            name = bytes(view[offset + o : offset + o + s])
        planes.append((offset, size, name.decode("utf-8", "replace")))
    if not planes:
        raise TraceInputError(path, "not an XPlane profile (no planes)")
    if not any(name for _, _, name in planes):
        raise TraceInputError(path, "not an XPlane profile (planes without names)")
    return DecodedSpace(source, space, planes, wire)


def _parse_part(path: Path, cls: Any, data: bytes | memoryview) -> Any:
    """protobuf's parse of one part of the XSpace (the XSpace or a plane without planes/lines,
    line headers, a line): one line when it is refused."""
    if len(data) > PROTOBUF_LIMIT:
        raise TraceInputError(path, f"a part of {len(data):,} bytes is over protobuf's 2 GiB message limit")
    try:
        return cls.FromString(data)
    except DecodeError as exc:
        raise TraceInputError(path, f"not a valid XSpace protobuf (corrupt or truncated: {exc})") from None


# -- the wire format, for the pure-Python path (the C helper has the same walk) ---------------


def _py_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``pos``; -1 as position when malformed."""
    v = shift = 0
    while shift < 64:
        if pos >= end:
            return 0, -1
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    return 0, -1


def _py_fields(buf: Any, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field, wire type, start, end, key position) of each field of the message [start, end);
    for length-delimited fields start/end bound the payload. Raises ValueError when malformed
    (the same checks as the C helper's walk: field numbers 1 .. 2^29-1, no groups)."""
    pos = start
    while pos < end:
        at = pos
        k, pos = _py_varint(buf, pos, end)
        f, wt = k >> 3, k & 7
        if pos < 0 or f == 0 or f > 0x1FFFFFFF:
            raise ValueError(f"malformed wire data at byte {at}")
        if wt == 0:
            _, pos = _py_varint(buf, pos, end)
            if pos < 0:
                raise ValueError(f"malformed wire data at byte {at}")
            yield f, wt, pos, pos, at
        elif wt == 2:
            n, p = _py_varint(buf, pos, end)
            if p < 0 or n > end - p:
                raise ValueError(f"malformed wire data at byte {at}")
            pos = p + n
            yield f, wt, p, pos, at
        elif wt in (1, 5):
            width = 8 if wt == 1 else 4
            if end - pos < width:
                raise ValueError(f"malformed wire data at byte {at}")
            pos += width
            yield f, wt, pos - width, pos, at
        else:
            raise ValueError(f"malformed wire data at byte {at}")


#: Message kinds of the length-delimited fields that are messages (the rest are strings/bytes).
_CHILD = {
    "space": {1: "plane"}, "plane": {3: "line", 4: "emeta_entry", 5: "smeta_entry", 6: "stat"},
    "line": {4: "event"}, "event": {4: "stat"}, "emeta_entry": {2: "emeta"}, "smeta_entry": {2: "smeta"},
    "emeta": {5: "stat"},
}


def _py_check_leaves(path: Path, buf: Any, start: int, end: int, kind: str, max_leaf: int) -> None:
    """Refuse a string/bytes field longer than ``max_leaf`` in message [start, end) of ``kind``
    (only messages longer than that can hold one, so only those are walked)."""
    if end - start <= max_leaf:
        return
    children = _CHILD.get(kind, {})
    try:
        for f, wt, s, e, at in _py_fields(buf, start, end):
            if wt != 2:
                continue
            child = children.get(f)
            if child is not None:
                _py_check_leaves(path, buf, s, e, child, max_leaf)
            elif e - s > max_leaf:
                raise event_too_long(path, f"(a {e - s:,}-byte field at byte {at:,})", max_leaf)
    except ValueError as exc:
        raise TraceInputError(path, f"not a valid XSpace protobuf ({exc})") from None


def _split(path: Path, view: memoryview, field: int, wire: bool) -> bytes:
    """The message without its length-delimited fields ``field`` (C helper or Python)."""
    try:
        if wire:
            return bytes(_wire.split_message(view, field)[0])
        return b"".join(view[at:e] for f, wt, _, e, at in _py_fields(view, 0, len(view))
                        if not (f == field and wt == 2))
    except ValueError as exc:
        raise TraceInputError(path, f"not a valid XSpace protobuf ({exc})") from None


def _spans(path: Path, view: memoryview, field: int, wire: bool) -> Iterator[tuple[int, int]]:
    """(offset, size) of the payloads of the length-delimited fields ``field`` of the message."""
    try:
        if wire:
            start = 0
            while start >= 0:
                spans, start = _wire.field_spans(view, field, start, 4096)
                yield from spans
        else:
            for f, wt, s, e, _ in _py_fields(view, 0, len(view)):
                if f == field and wt == 2:
                    yield s, e - s
    except ValueError as exc:
        raise TraceInputError(path, f"not a valid XSpace protobuf ({exc})") from None


def _inflate_stat(data: bytes, limit: int) -> str:
    """A ``compressed_str_value``: gzip/zlib (auto-detected), else raw deflate, inflated to the
    stream's end, UTF-8 with replacement; its hex when neither inflates. OverflowError past
    ``limit`` bytes, without inflating further (the C helper does the same)."""
    for wbits in (47, -15):
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error:
            continue
        if len(out) > limit:
            raise OverflowError(f"{_INFLATE_PREFIX} {limit} bytes")
        if d.eof:
            return out.decode("utf-8", "replace")
    return data.hex()


_INFLATE_PREFIX = "a compressed string stat inflates past"


def stat_value(st: xplane_pb2.XStat, stat_names: dict[int, str]) -> Any:
    """The Python value of one stat: interned strings resolved, compressed strings inflated."""
    kind = st.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(st.ref_value, "")
    if kind == "compressed_str_value":
        return _inflate_stat(st.compressed_str_value, max_event_bytes())
    if kind is None:
        return None
    return getattr(st, kind)


def _stats(stats: Iterable[xplane_pb2.XStat], stat_names: dict[int, str]) -> dict[str, Any]:
    return {stat_names.get(st.metadata_id, str(st.metadata_id)): stat_value(st, stat_names) for st in stats}


def _json_safe(d: dict[str, Any]) -> str:
    """Stats as compact JSON text; bytes values (serialized protos) become a size note."""
    if any(type(v) is bytes for v in d.values()):
        d = {k: (f"<{len(v)} bytes>" if type(v) is bytes else v) for k, v in d.items()}
    global _encode_json
    if _encode_json is None:  # msgspec only for the pure-Python path (the C helper writes JSON itself)
        import msgspec

        _encode_json = msgspec.json.Encoder().encode
    return _encode_json(d).decode()


_encode_json: Callable[[Any], bytes] | None = None


def shape_text(sh: hlo_subset_pb2.ShapeProto) -> str:
    """XLA's short shape syntax, e.g. ``bf16[8,128]`` or ``(f32[2], s32[])``."""
    if sh.element_type == 13:  # TUPLE
        return "(" + ", ".join(shape_text(t) for t in sh.tuple_shapes) + ")"
    dtype = _PRIMITIVE.get(sh.element_type, f"type{sh.element_type}")
    if sh.element_type in (14, 17):
        return dtype
    return f"{dtype}[{','.join(str(d) for d in sh.dimensions)}]"


def _hbm_bytes(breakdown: bytes) -> tuple[float | None, float | None, str | None]:
    """(HBM read bytes, HBM write bytes, JSON list) from a serialized MemoryAccessBreakdown."""
    if not breakdown:
        return None, None, None
    msg = xplane_pb2.MemoryAccessBreakdown()
    try:
        msg.ParseFromString(breakdown)
    except DecodeError:
        return None, None, None
    rows = [
        {"op": {1: "read", 2: "write"}.get(m.operation_type, str(m.operation_type)),
         "memory_space": m.memory_space, "bytes": m.bytes_accessed}
        for m in msg.memory_accessed
    ]
    read = sum(float(r["bytes"]) for r in rows if r["memory_space"] == 1 and r["op"] == "read")
    write = sum(float(r["bytes"]) for r in rows if r["memory_space"] == 1 and r["op"] == "write")
    return read, write, json.dumps(rows)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# The events of one line, and batches of them


@dataclass
class _LineEvents:
    """The kept, timed events of one XLine as columns (offsets and durations in ps).

    ``args`` holds each event's stats as compact JSON (None when none is left), except those
    named in the reader's ``split``, whose values are in ``split[name]`` (None where absent).
    ``is_op`` flags the events carrying an op-marking stat (CPU-only captures); the split then
    applies to those events only.
    """

    n_dropped: int  # events whose metadata id was in drop_ids (Python-tracer events)
    n_untimed: int  # aggregated events (num_occurrences): no start time
    metadata_id: np.ndarray  # int64
    offset_ps: np.ndarray  # int64, from the line's timestamp_ns
    dur_ps: np.ndarray  # int64
    is_op: np.ndarray | None  # bool
    args: list[str | None]
    split: dict[str, list[Any]]

    def __len__(self) -> int:
        return len(self.args)

    def take(self, index: np.ndarray) -> _LineEvents:
        """The events at positions ``index`` (counts are not carried over)."""
        rows = index.tolist()
        return _LineEvents(
            0, 0, self.metadata_id[index], self.offset_ps[index], self.dur_ps[index],
            None if self.is_op is None else self.is_op[index],
            [self.args[i] for i in rows], {k: [v[i] for i in rows] for k, v in self.split.items()},
        )


def _line_events_wire(
    data: memoryview, names: dict[int, str], drop_ids: np.ndarray | None, split: tuple[str, ...],
    op_ids: np.ndarray | None, start: int = 0, max_rows: int = 0, max_str: int = 64 << 20,
) -> tuple[_LineEvents, int]:
    """:class:`_LineEvents` of one serialized XLine from byte ``start``, at most ``max_rows`` kept
    events (0: all), by the C helper; and the byte to go on from (-1: the line is done)."""
    n_dropped, n_untimed, ids, offsets, durs, flags, args, values, next_start = _wire.scan_line(
        data, names, drop_ids if drop_ids is not None and len(drop_ids) else None, split, op_ids,
        start, max_rows, max_str)
    return _LineEvents(
        n_dropped, n_untimed, np.frombuffer(ids, dtype=np.int64), np.frombuffer(offsets, dtype=np.int64),
        np.frombuffer(durs, dtype=np.int64),
        None if flags is None else np.frombuffer(flags, dtype=np.bool_),
        args, dict(zip(split, values)),
    ), next_start


def _line_events_py(
    line: xplane_pb2.XLine, names: dict[int, str], drop_ids: np.ndarray | None, split: tuple[str, ...],
    op_ids: np.ndarray | None,
) -> _LineEvents:
    """:class:`_LineEvents` of one parsed XLine, through protobuf's wrappers (no C helper)."""
    events: Sequence[xplane_pb2.XEvent] = line.events
    n_all = len(events)
    if drop_ids is not None and len(drop_ids):
        mids = np.fromiter(map(_METADATA_ID, events), dtype=np.int64, count=n_all)
        keep = np.flatnonzero(~np.isin(mids, drop_ids))
        if len(keep) < n_all:
            events = [events[i] for i in keep.tolist()]
    n_dropped = n_all - len(events)
    timed = _timed(events)
    n = len(timed)
    op_set = None if op_ids is None else set(op_ids.tolist())
    flags: list[bool] = []
    args: list[str | None] = []
    values: dict[str, list[Any]] = {k: [] for k in split}
    for e in timed:
        st = _stats(e.stats, names) if e.stats else {}
        is_op = op_set is not None and any(s.metadata_id in op_set for s in e.stats)
        flags.append(is_op)
        do_split = op_set is None or is_op
        for k in split:
            values[k].append(st.pop(k, None) if do_split else None)
        args.append(_json_safe(st) if st else None)
    return _LineEvents(
        n_dropped, len(events) - n,
        np.fromiter((e.metadata_id for e in timed), dtype=np.int64, count=n),
        np.fromiter((e.offset_ps for e in timed), dtype=np.int64, count=n),
        np.fromiter((e.duration_ps for e in timed), dtype=np.int64, count=n),
        None if op_set is None else np.array(flags, dtype=np.bool_),
        args, values,
    )


class _Batch:
    """Rows of one target table gathered line by line, inserted with one scan.

    Per-row columns are NumPy arrays (int64 ids/offsets/durations, object for the rest); what is
    constant over a line (thread, category, the line's start in ns, ...) is kept once per line
    and spread over the line's rows when the batch is inserted (a NumPy take: SQL list
    parameters indexed per row cost DuckDB time quadratic in the number of lines)."""

    def __init__(self, columns: tuple[str, ...], line_fields: tuple[str, ...]) -> None:
        self.columns = columns
        self.line_fields = line_fields
        self.lines: dict[str, list[Any]] = {f: [] for f in line_fields}
        self.counts: list[int] = []
        self.chunks: dict[str, list[Any]] = {c: [] for c in columns}
        self.rows = 0

    def add(self, line: dict[str, Any], ev: _LineEvents, **cols: list[Any]) -> None:
        n = len(ev)
        if not n:
            return
        for f in self.line_fields:
            self.lines[f].append(line[f])
        self.counts.append(n)
        given = {"metadata_id": ev.metadata_id, "offset_ps": ev.offset_ps, "dur_ps": ev.dur_ps,
                 "args": ev.args, **cols}
        for c in self.columns:
            self.chunks[c].append(given.get(c, (None,) * n))
        self.rows += n

    def full(self) -> bool:
        """Time to insert: ``_FLUSH_ROWS`` rows, or ``_FLUSH_LINES`` lines (each line costs a few
        small arrays until then)."""
        return self.rows >= _FLUSH_ROWS or len(self.counts) >= _FLUSH_LINES

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for c, parts in self.chunks.items():
            if all(isinstance(p, np.ndarray) for p in parts):
                out[c] = np.concatenate(parts)
            else:
                out[c] = np.fromiter(itertools.chain.from_iterable(parts), dtype=object, count=self.rows)
        li = np.repeat(np.arange(len(self.counts), dtype=np.intp), self.counts)
        for f, values in self.lines.items():
            kind = np.int64 if f == "base_ns" else object
            per_line = np.empty(len(values), dtype=kind)
            per_line[:] = values
            out[f] = per_line[li]
        return out

    def clear(self) -> None:
        for v in self.lines.values():
            v.clear()
        for v in self.chunks.values():
            v.clear()
        self.counts.clear()
        self.rows = 0


#: Stats of device activity kept in columns of their own (the rest go to ``args``).
_DEVICE_STATS = ("device_offset_ps", "device_duration_ps", "correlation_id", "kernel_details",
                 "hlo_op", "hlo_module", "program_id", "memcpy_details")
#: Stats of an XLA op executed on a CPU-only capture's client threads.
_CPU_OP_STATS = ("hlo_op", "hlo_module", "program_id")

_DEVICE_COLS = (
    "metadata_id", "offset_ps", "dur_ps", "device_offset_ps", "device_duration_ps", "correlation_id",
    "kernel_details", "hlo_op", "hlo_module", "program_id", "memcpy_details", "args",
)
_DEVICE_LINE = ("stream", "category", "tid", "kind", "base_ns")
_HOST_COLS = ("metadata_id", "offset_ps", "dur_ps", "args")
_HOST_LINE = ("tid", "category", "base_ns")

_FLUSH_ROWS = 200_000
_FLUSH_LINES = 20_000

_DEVICE_TEMPLATE = """
SELECT
    $run_id AS run_id,
    $rank AS rank,
    $device AS device,
    b.stream AS stream,
    CASE WHEN b.category = 'stream'
         THEN CASE WHEN m.name ILIKE 'memcpy%' OR x.memcpy_bytes IS NOT NULL THEN 'memcpy'
                   WHEN m.name ILIKE 'memset%' THEN 'memset' ELSE 'kernel' END
         ELSE b.category END AS category,
    coalesce(nullif(CAST(m.display_name AS VARCHAR), ''), CAST(m.name AS VARCHAR), '') AS name,
    b.base_ns + CAST(round(b.offset_ps / 1000) AS BIGINT) AS start_ns,
    CAST(round(b.dur_ps / 1000) AS BIGINT) AS dur_ns,
    TRY_CAST(b.correlation_id AS BIGINT) AS correlation_id,
    'xplane:' || b.kind AS trace_category,
    $plane AS pid,
    b.tid AS tid,
    {kernel_details} x.memcpy_bytes AS bytes,
    b.hlo_op AS kind,
    CAST(round(TRY_CAST(b.device_offset_ps AS DOUBLE) / 1000) AS BIGINT) AS device_start_ns,
    CAST(round(TRY_CAST(b.device_duration_ps AS DOUBLE) / 1000) AS BIGINT) AS device_dur_ns,
    b.metadata_id AS op_metadata_id,
    coalesce(CAST(b.hlo_module AS VARCHAR), CAST(m.hlo_module AS VARCHAR)) AS hlo_module,
    m.hlo_category AS hlo_category,
    coalesce(CAST(b.program_id AS VARCHAR), CAST(m.program_id AS VARCHAR)) AS program_id,
    m.flops AS flops,
    m.model_flops AS model_flops,
    m.bytes_accessed AS bytes_accessed,
    m.hbm_read_bytes + m.hbm_write_bytes AS hbm_bytes,
    b.args AS args
FROM batch b LEFT JOIN plane_meta m ON m.metadata_id = b.metadata_id,
    LATERAL (SELECT {memcpy_bytes} AS memcpy_bytes) x
"""

#: grid_x .. est_occupancy_pct from GPU kernels' ``kernel_details`` stat, and copy sizes from
#: ``memcpy_details`` (13 regular expressions: their compilation is most of the statement's ~8 ms
#: fixed cost, so batches without either stat (TPU, CPU) use NULLs instead).
_KERNEL_DETAILS_SQL = """
    TRY_CAST(regexp_extract(b.kernel_details, 'grid:(\\d+),(\\d+),(\\d+)', 1) AS INTEGER) AS grid_x,
    TRY_CAST(regexp_extract(b.kernel_details, 'grid:(\\d+),(\\d+),(\\d+)', 2) AS INTEGER) AS grid_y,
    TRY_CAST(regexp_extract(b.kernel_details, 'grid:(\\d+),(\\d+),(\\d+)', 3) AS INTEGER) AS grid_z,
    TRY_CAST(regexp_extract(b.kernel_details, 'block:(\\d+),(\\d+),(\\d+)', 1) AS INTEGER) AS block_x,
    TRY_CAST(regexp_extract(b.kernel_details, 'block:(\\d+),(\\d+),(\\d+)', 2) AS INTEGER) AS block_y,
    TRY_CAST(regexp_extract(b.kernel_details, 'block:(\\d+),(\\d+),(\\d+)', 3) AS INTEGER) AS block_z,
    TRY_CAST(nullif(regexp_extract(b.kernel_details, 'regs:(\\d+)', 1), '') AS INTEGER) AS registers_per_thread,
    coalesce(
        TRY_CAST(nullif(regexp_extract(b.kernel_details, 'group_mem:(\\d+)', 1), '') AS BIGINT),
        TRY_CAST(nullif(regexp_extract(b.kernel_details, 'shm:(\\d+)', 1), '') AS BIGINT),
        TRY_CAST(nullif(regexp_extract(b.kernel_details, 'static_shared:(\\d+)', 1), '') AS BIGINT)
          + coalesce(TRY_CAST(nullif(regexp_extract(b.kernel_details, 'dynamic_shared:(\\d+)', 1), '')
                              AS BIGINT), 0)) AS shared_mem_bytes,
    TRY_CAST(nullif(regexp_extract(b.kernel_details, 'occ_pct:([0-9.]+)', 1), '') AS DOUBLE) AS est_occupancy_pct"""
_MEMCPY_BYTES_SQL = "TRY_CAST(nullif(regexp_extract(b.memcpy_details, 'size:(\\d+)', 1), '') AS BIGINT)"
_KERNEL_DETAIL_COLS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                       "shared_mem_bytes", "est_occupancy_pct")
_DEVICE = _DEVICE_TEMPLATE.replace("{kernel_details}", _KERNEL_DETAILS_SQL.strip() + ",").replace(
    "{memcpy_bytes}", _MEMCPY_BYTES_SQL)
_DEVICE_NO_DETAILS = _DEVICE_TEMPLATE.replace(
    "{kernel_details}", ", ".join(f"NULL AS {c}" for c in _KERNEL_DETAIL_COLS) + ",").replace(
    "{memcpy_bytes}", "NULL::BIGINT")
_GPU_DETAIL_COLS = ("kernel_details", "memcpy_details")

_HOST = """
SELECT
    $run_id AS run_id,
    $rank AS rank,
    $plane AS pid,
    b.tid AS tid,
    c.category AS category,
    'xplane:' || c.category AS trace_category,
    c.name AS name,
    b.base_ns + CAST(round(b.offset_ps / 1000) AS BIGINT) AS start_ns,
    CAST(round(b.dur_ps / 1000) AS BIGINT) AS dur_ns,
    TRY_CAST(json_extract_string(b.args, '$.correlation_id') AS BIGINT) AS correlation_id,
    $device AS device,
    b.args AS args
FROM batch b LEFT JOIN plane_meta m ON m.metadata_id = b.metadata_id,
    LATERAL (SELECT coalesce(nullif(CAST(m.display_name AS VARCHAR), ''), CAST(m.name AS VARCHAR), '') AS name) n,
    -- Python-tracer events kept with python_events: category 'python' (its plane, or names with '$')
    LATERAL (SELECT CASE WHEN $python AND ($python_plane OR starts_with(n.name, '$')) THEN 'python'
                         ELSE b.category END AS category, n.name) c
"""

_META_COLS = (
    "metadata_id", "name", "display_name", "hlo_category", "program_id", "flops", "model_flops",
    "bytes_accessed", "raw_bytes_accessed", "hbm_read_bytes", "hbm_write_bytes",
    "memory_breakdown", "shape_with_layout", "tf_op", "deduplicated_name", "source", "hlo_module",
)


# ---------------------------------------------------------------------------------------------


def _plane_device(name: str) -> tuple[str, int, str | None] | None:
    m = _DEVICE_PLANE.match(name)
    if m is None or name.startswith("/device:CPU"):
        return None
    return m.group(1), int(m.group(2)), m.group(3)


_HOST_SUFFIX = re.compile(r"\.xplane\.pb(\.gz)?$", re.IGNORECASE)


class XSpaceReader:
    def __init__(self, decoded: DecodedSpace, path: Path, rank: int, ctx: IngestContext) -> None:
        space = decoded.space
        self.space = space  # hostnames, errors, warnings (the planes are read one at a time)
        self.decoded = decoded
        self.wire = decoded.wire  # False: the events are read through protobuf's wrappers
        self._view = decoded.source.view  # the serialized XSpace
        self._plane_offset = 0  # where the current plane's bytes start in _view
        self._plane_view = self._view[0:0]
        self.max_leaf = max_event_bytes()
        self.path = path
        self.rank = rank
        self.ctx = ctx
        self.con: duckdb.DuckDBPyConnection = ctx.con
        self.params: dict[str, Any] = {"run_id": ctx.run_id, "rank": rank}
        self.host = space.hostnames[0] if space.hostnames else _HOST_SUFFIX.sub("", path.name)
        self.n_total = self.n_python = self.n_skipped = 0
        self.has_device_planes = any(_plane_device(name) for _, _, name in decoded.planes)
        self.task_env: dict[str, Any] = {}

    # -- driver -------------------------------------------------------------------------------

    def run(self) -> None:
        # Hundreds of thousands of short-lived protobuf wrappers: the cyclic GC only costs time.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._run()
        except OverflowError as exc:
            if not str(exc).startswith(_INFLATE_PREFIX):
                raise
            raise InputLimitError(self.path, f"{exc}; set TRACEKIT_MAX_EVENT_BYTES to accept it") from None
        finally:
            self._plane_view.release()
            if gc_was_enabled:
                gc.enable()

    def _run(self) -> None:
        source = self.decoded.source
        for offset, size, _ in self.decoded.planes:
            self._plane_view.release()
            self._plane_offset = offset
            self._plane_view = self._view[offset : offset + size]
            plane = self._plane()
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            dev = _plane_device(plane.name)
            if plane.name in ("Task Environment", "/host:metadata"):
                if plane.name == "Task Environment":
                    self.task_env = _stats(plane.stats, names)
                else:
                    self._modules(plane, names)
                if not self.wire:  # their lines are not read (nor counted), but checked as on the C path
                    for _ in self._iter_lines():
                        pass
            elif dev is not None:
                self._device_plane(plane, names, dev)
            elif plane.name in _PYTHON_PLANES and not self.ctx.python_events:
                self.n_python += sum(n for _, _, n in self._lines(plane))
            elif plane.name in _PYTHON_PLANES:
                self._host_plane(plane, names, python_plane=True)
            elif plane.name.startswith("/host:") and plane.name not in _SKIPPED_HOST_PLANES:
                self._host_plane(plane, names)
            else:
                self.n_skipped += sum(n for _, _, n in self._lines(plane))
            source.release(offset, offset + size)
        self._finish()

    def _plane(self) -> xplane_pb2.XPlane:
        """The current plane without its lines (name, metadata, stats), parsed by protobuf."""
        view = self._plane_view
        if not self.wire:
            _py_check_leaves(self.path, view, 0, len(view), "plane", self.max_leaf)
        rest = _split(self.path, view, 3, self.wire)
        self.decoded.source.release(self._plane_offset, self._plane_offset + len(view))
        plane: xplane_pb2.XPlane = _parse_part(self.path, xplane_pb2.XPlane, rest)
        return plane

    def _finish(self) -> None:
        first_ns, last_ns, n_kept = rank_span(self.con, self.params["run_id"], self.params["rank"])
        start = self.task_env.get("profile_start_time")  # Unix ns, an integer stat: keep it exact
        unix_start_ns = start if isinstance(start, int) and start > 10**17 else None
        captured = unix_start_ns / 1e9 if unix_start_ns else None
        meta: dict[str, Any] = {
            "hostnames": list(self.space.hostnames),
            "errors": list(self.space.errors)[:20],
            "warnings": list(self.space.warnings)[:20],
            "planes": [name for _, _, name in self.decoded.planes],
            "task_environment": {k: v for k, v in self.task_env.items() if not isinstance(v, bytes)},
        }
        self.ctx.add_rank(
            RankInfo(
                rank=self.rank,
                rank_source="host",
                path=self.path,
                host=self.host,
                runtime="xla",
                # XPlane times count from the profiling session's start; this is its Unix time.
                base_time_ns=unix_start_ns,
                metadata=meta,
                n_trace_events=self.n_total,
                n_python_events=self.n_python,
                n_flow_events=0,
                n_other_skipped=self.n_total - int(n_kept or 0) - self.n_python,
                first_ns=first_ns,
                last_ns=last_ns,
                captured_at_unix_s=captured,
            )
        )

    # -- per-plane metadata ------------------------------------------------------------------

    def _register_meta(self, plane: xplane_pb2.XPlane, names: dict[int, str], with_costs: bool) -> None:
        """Load the plane's event metadata (names, and op costs on device planes) as ``plane_meta``."""
        if not with_costs:  # host planes: names only, the cost columns stay NULL
            items = plane.event_metadata.items()
            n = len(items)
            name_cols: dict[str, Any] = {c: np.full(n, None, dtype=object) for c in _META_COLS}
            name_cols["metadata_id"] = np.fromiter((mid for mid, _ in items), dtype=np.int64, count=n)
            name_cols["name"] = np.array([em.name for _, em in items], dtype=object)
            name_cols["display_name"] = np.array([em.display_name for _, em in items], dtype=object)
            create_temp_table(self.con, "plane_meta", name_cols, source=self.path)
            return
        cols: dict[str, list[Any]] = {c: [] for c in _META_COLS}
        for mid, em in plane.event_metadata.items():
            st = _stats(em.stats, names) if (with_costs and em.stats) else {}
            read, write, breakdown = _hbm_bytes(st.get("memory_access_breakdown") or b"")
            row = {
                "metadata_id": mid,
                "name": em.name,
                "display_name": em.display_name,
                "hlo_category": _str_or_none(st.get("hlo_category")),
                "program_id": _str_or_none(st.get("program_id")),
                "flops": _num(st.get("flops")),
                "model_flops": _num(st.get("model_flops")),
                "bytes_accessed": _num(st.get("bytes_accessed")),
                "raw_bytes_accessed": _num(st.get("raw_bytes_accessed")),
                "hbm_read_bytes": read,
                "hbm_write_bytes": write,
                "memory_breakdown": breakdown,
                "shape_with_layout": _str_or_none(st.get("shape_with_layout")),
                "tf_op": _str_or_none(st.get("tf_op")),
                "deduplicated_name": _str_or_none(st.get("deduplicated_name")),
                "source": _str_or_none(st.get("source")),
                "hlo_module": _str_or_none(st.get("hlo_module")),
            }
            for c in _META_COLS:
                cols[c].append(row[c])
        arrays = {
            c: (np.fromiter(v, dtype=np.int64, count=len(v)) if c == "metadata_id" else np.array(v, dtype=object))
            for c, v in cols.items()
        }
        create_temp_table(self.con, "plane_meta", arrays, source=self.path)

    # -- device planes ------------------------------------------------------------------------

    def _device_plane(self, plane: xplane_pb2.XPlane, names: dict[int, str], dev: tuple[str, int, str | None]) -> None:
        kind, index, sub = dev
        plane_stats = _stats(plane.stats, names)
        self._add_device(kind, index, sub, plane.name, plane_stats)
        self._register_meta(plane, names, with_costs=True)
        insert_batch(
            self.con, "xla_op_costs",
            select="""SELECT $run_id AS run_id, $rank AS rank, $device AS device, metadata_id AS op_metadata_id,
                          coalesce(nullif(display_name, ''), name) AS name, name AS hlo_text, hlo_category,
                          program_id, flops, model_flops, bytes_accessed, raw_bytes_accessed,
                          hbm_read_bytes, hbm_write_bytes, memory_breakdown, shape_with_layout, tf_op,
                          deduplicated_name, source
                      FROM plane_meta
                      WHERE hlo_category IS NOT NULL OR flops IS NOT NULL OR bytes_accessed IS NOT NULL""",
            params={**self.params, "device": index}, source=self.path,
        )
        device_rows = _Batch(_DEVICE_COLS, _DEVICE_LINE)
        span_rows = _Batch(_HOST_COLS, _HOST_LINE)
        for line, span, n_events in self._lines(plane):
            line_name = line.name or line.display_name
            stream = _STREAM_LINE.match(line_name)
            if line_name in _OP_LINES or stream is not None:
                category = _OP_LINES.get(line_name, "stream")
                if stream is not None:
                    suffix = (stream.group(2) or "").lower()
                    category = "memcpy" if "memcpy" in suffix else "memset" if "memset" in suffix else (
                        "kernel" if suffix in ("kernel", "compute") else "stream")
                for ev in self._line_events(span, line, names, split=_DEVICE_STATS):
                    self.n_skipped += ev.n_untimed
                    self._add_device_rows(device_rows, ev, {
                        "stream": stream.group(1) if stream else line_name, "category": category,
                        "tid": line.name, "kind": line_name, "base_ns": line.timestamp_ns})
                    if device_rows.full():
                        self._flush_device(device_rows, plane.name, index)
            elif line_name in _DEVICE_SPAN_LINES:
                for ev in self._line_events(span, line, names):
                    self.n_skipped += ev.n_untimed
                    span_rows.add({"tid": line.display_name or line.name,
                                   "category": _DEVICE_SPAN_LINES[line_name], "base_ns": line.timestamp_ns}, ev)
                    if span_rows.full():
                        self._flush_host(span_rows, plane.name, index)
            else:
                self.n_skipped += n_events
        self._flush_device(device_rows, plane.name, index)
        self._flush_host(span_rows, plane.name, index)

    def _add_device(self, kind: str, index: int, sub: str | None, plane_name: str, st: dict[str, Any]) -> None:
        vendor_stat = str(st.get("device_vendor") or "").lower()
        if kind == "TPU":
            vendor = "google"
        elif kind == "GPU":
            # Current XLA writes device_vendor (Nvidia/AMD); TensorFlow's 2020 GPU planes carry
            # none, and those were CUDA captures.
            vendor = "amd" if "amd" in vendor_stat else "nvidia"
        else:
            vendor = "other"
        device_type = _str_or_none(st.get("device_type_string"))
        major = st.get("compute_cap_major")
        minor = st.get("compute_cap_minor")
        clock_khz = _num(st.get("clock_rate"))
        bw = _num(st.get("memory_bandwidth"))
        cores = st.get("core_count")
        if device_type:
            name = device_type
        elif vendor == "nvidia" and major is not None:
            name = f"NVIDIA GPU (sm_{int(major)}{int(minor or 0)}, {cores} SMs)"
        elif vendor == "amd" and major is not None:
            name = f"AMD GPU (compute capability {int(major)}.{int(minor or 0)}, {cores} CUs)"
        else:
            name = plane_name
        self.ctx.add_device_info(
            DeviceInfo(
                rank=self.rank,
                device=index,
                name=name if not sub else f"{name} {sub}",
                vendor=vendor,
                # HIP's major.minor (9.4) does not name the gfx target (gfx942): left NULL on AMD.
                arch=f"sm_{int(major)}{int(minor or 0)}" if vendor == "nvidia" and major is not None else None,
                compute_units=int(st["core_count"]) if st.get("core_count") is not None else None,
                warp_size=32 if vendor == "nvidia" else 64 if vendor == "amd" else None,
                memory_bytes=int(st["memory_size"]) if st.get("memory_size") is not None else None,
                compute_major=int(major) if major is not None else None,
                compute_minor=int(minor) if minor is not None else None,
                max_threads_per_block=None, max_threads_per_cu=None, regs_per_block=None,
                regs_per_cu=None, shared_mem_per_block_bytes=None, shared_mem_per_cu_bytes=None,
                shared_mem_per_block_optin_bytes=None,
                properties={"plane": plane_name, **{k: v for k, v in st.items() if not isinstance(v, bytes)}},
                device_type=device_type,
                clock_mhz=clock_khz / 1000 if clock_khz else None,
                peak_tflops=_num(st.get("peak_teraflops_per_second")),
                peak_hbm_gbps=_num(st.get("peak_hbm_bw_gigabytes_per_second")),
                memory_bandwidth_gbps=bw / 1e9 if bw else None,
            )
        )

    @staticmethod
    def _add_device_rows(rows: _Batch, ev: _LineEvents, line: dict[str, Any]) -> None:
        """Device activity rows from events read with ``split=_DEVICE_STATS`` (or the CPU-op stats)."""
        cols = dict(ev.split)
        cols["program_id"] = [None if v is None else str(v) for v in ev.split["program_id"]]
        rows.add(line, ev, **cols)

    def _flush_device(self, rows: _Batch, plane_name: str, device: int) -> None:
        def sql(arrays: dict[str, np.ndarray]) -> str:
            gpu = any(arrays[c].astype(bool).any() for c in _GPU_DETAIL_COLS)  # a non-empty value
            return _DEVICE if gpu else _DEVICE_NO_DETAILS

        self._flush(rows, "device_activity", sql, {"plane": plane_name, "device": device})

    def _flush_host(self, rows: _Batch, plane_name: str, device: int | None, python_plane: bool | None = None) -> None:
        """Insert host rows; ``python_plane`` (True/False) marks the Python-tracer events kept
        with ``python_events`` as category ``python`` (None: no such events here)."""
        self._flush(rows, "host_events", lambda _: _HOST, {
            "plane": plane_name, "device": device, "python": python_plane is not None,
            "python_plane": bool(python_plane)})

    def _flush(
        self, rows: _Batch, table: str, select: Callable[[dict[str, np.ndarray]], str], params: dict[str, Any]
    ) -> None:
        """Insert the batch into ``table`` as ``select(arrays)`` makes its rows, report progress,
        empty the batch."""
        if rows.rows:
            arrays = rows.arrays()
            insert_batch(self.con, table, arrays, select=select(arrays), params={**self.params, **params},
                         source=self.path)
            del arrays
            self.ctx.progress(rows.rows, 0)
        rows.clear()

    # -- reading lines ------------------------------------------------------------------------

    def _line_events(
        self, span: tuple[int, int, int], line: xplane_pb2.XLine, names: dict[int, str], *,
        drop_ids: np.ndarray | None = None, split: tuple[str, ...] = (), op_ids: np.ndarray | None = None,
    ) -> Iterator[_LineEvents]:
        """The events of the line at ``span`` (offset, size, count in the current plane): by the
        C helper from the serialized bytes, in chunks of at most ``_FLUSH_ROWS`` kept events (a
        TPU ``XLA Ops`` line can hold millions), or through protobuf's wrappers (pure path, where
        ``line`` was parsed whole)."""
        if not self.wire:
            yield _line_events_py(line, names, drop_ids, split, op_ids)
            return
        offset, size, _ = span
        data, start = self._plane_view[offset : offset + size], 0
        base = self._plane_offset + offset
        try:
            while start >= 0:
                begin = start
                try:
                    ev, start = _line_events_wire(data, names, drop_ids, split, op_ids, start, _FLUSH_ROWS,
                                                  self.max_leaf)
                except ValueError as exc:  # check_space checked these bytes: cannot happen
                    raise TraceInputError(self.path, f"not a valid XSpace protobuf ({exc})") from None
                self.decoded.source.release(base + begin, base + (size if start < 0 else start))
                yield ev
        finally:
            data.release()

    def _lines(self, plane: xplane_pb2.XPlane) -> Iterator[tuple[xplane_pb2.XLine, tuple[int, int, int], int]]:
        """(line, (offset, size, event count) in the plane, event count) of the current plane's
        lines that have events, read a batch at a time (never the whole plane); every event is
        counted in ``n_total`` (aggregated ones too). ``line`` has no events on the C path."""
        for line, span in self._iter_lines():
            n = span[2]
            self.n_total += n
            if n:
                yield line, span, n

    def _iter_lines(self) -> Iterator[tuple[xplane_pb2.XLine, tuple[int, int, int]]]:
        view, path = self._plane_view, self.path
        if self.wire:
            start = 0
            while start >= 0:
                try:
                    headers, spans, start = _wire.strip_lines(view, start, _LINE_BATCH)
                except ValueError as exc:  # check_space checked these bytes: cannot happen
                    raise TraceInputError(path, f"not a valid XSpace protobuf ({exc})") from None
                lines = _parse_part(path, xplane_pb2.XPlane, headers).lines
                if len(lines) != len(spans):
                    raise TraceInputError(path, "not a valid XSpace protobuf (line headers do not parse)")
                yield from zip(lines, spans)
                if spans:
                    self.decoded.source.release(self._plane_offset + spans[0][0],
                                                self._plane_offset + spans[-1][0] + spans[-1][1])
            return
        for offset, size in _spans(path, view, 3, False):
            _py_check_leaves(path, view, offset, offset + size, "line", self.max_leaf)
            line = _parse_part(path, xplane_pb2.XLine, view[offset : offset + size])
            yield line, (offset, size, len(line.events))

    # -- host planes --------------------------------------------------------------------------

    def _host_plane(self, plane: xplane_pb2.XPlane, names: dict[int, str], python_plane: bool = False) -> None:
        self._register_meta(plane, names, with_costs=False)
        python_meta = [mid for mid, em in plane.event_metadata.items() if python_plane or em.name.startswith("$")]
        # With ctx.python_events the Python-tracer events are stored (category 'python'), not dropped.
        drop_ids = None if self.ctx.python_events else np.array(sorted(python_meta), dtype=np.int64)
        keep_python = python_plane if self.ctx.python_events and python_meta else None
        # CPU-only capture: the XLA ops executed by the CPU client (events with an hlo_op stat)
        # are the device activity.
        op_ids = None
        if not self.has_device_planes:
            op_ids = np.array(sorted(k for k, v in names.items() if v == "hlo_op"), dtype=np.int64)
            op_ids = op_ids if len(op_ids) else None
        rows = _Batch(_HOST_COLS, _HOST_LINE)
        cpu_ops = _Batch(_DEVICE_COLS, _DEVICE_LINE)
        for line, span, _ in self._lines(plane):
            tid = line.display_name or line.name
            for ev in self._line_events(span, line, names, drop_ids=drop_ids,
                                        split=_CPU_OP_STATS if op_ids is not None else (), op_ids=op_ids):
                self.n_python += ev.n_dropped
                self.n_skipped += ev.n_untimed
                if ev.is_op is not None and ev.is_op.any():
                    self._cpu_device()
                    self._add_device_rows(cpu_ops, ev.take(np.flatnonzero(ev.is_op)), {
                        "stream": tid, "category": "kernel", "tid": tid, "kind": "XLA CPU ops",
                        "base_ns": line.timestamp_ns})
                    ev = ev.take(np.flatnonzero(~ev.is_op))
                rows.add({"tid": tid, "category": "traceme", "base_ns": line.timestamp_ns}, ev)
                if rows.full():
                    self._flush_host(rows, plane.name, None, keep_python)
                if cpu_ops.full():
                    self._flush_device(cpu_ops, plane.name, 0)
        self._flush_host(rows, plane.name, None, keep_python)
        self._flush_device(cpu_ops, plane.name, 0)
        self._classify_host_events(plane.name)

    def _cpu_device(self) -> None:
        """Device 0 of a CPU-only capture: the XLA CPU client."""
        if not any(d.rank == self.rank and d.device == 0 for d in self.ctx.devices):
            self.ctx.add_device_info(DeviceInfo(
                rank=self.rank, device=0, name="CPU (XLA)", vendor="cpu", arch=None, compute_units=None,
                warp_size=None, memory_bytes=None, compute_major=None, compute_minor=None,
                max_threads_per_block=None, max_threads_per_cu=None, regs_per_block=None,
                regs_per_cu=None, shared_mem_per_block_bytes=None, shared_mem_per_cu_bytes=None,
                shared_mem_per_block_optin_bytes=None, properties={"plane": "/host:CPU"},
                device_type="CPU"))

    def _classify_host_events(self, plane_name: str) -> None:
        """Step markers (``step_num`` stat, as ``jax.profiler.StepTraceAnnotation`` writes) are
        annotations of category ``step``; CUDA/HIP API calls with a ``correlation_id`` (the
        ``/host:CUPTI`` and ``/host:ROCTRACER`` lines) are runtime calls, linked to kernels."""
        self.con.execute(
            """UPDATE host_events
               SET category = CASE WHEN json_exists(args, '$.step_num') THEN 'step' ELSE 'runtime' END
               WHERE run_id = $run_id AND rank = $rank AND pid = $plane AND category = 'traceme'
                 AND args IS NOT NULL
                 AND (json_exists(args, '$.step_num')
                      OR (correlation_id IS NOT NULL AND regexp_matches(name, '^(cuda|cu|hip)[A-Z]')))""",
            {**self.params, "plane": plane_name},
        ).fetchall()

    # -- /host:metadata -----------------------------------------------------------------------

    def _modules(self, plane: xplane_pb2.XPlane, names: dict[int, str]) -> None:
        rows: list[dict[str, Any]] = []
        for em in plane.event_metadata.values():
            st = {names.get(s.metadata_id): s for s in em.stats}
            hlo = st.get("Hlo Proto")
            if hlo is None:
                continue  # symbol maps, compiler metadata, ...: not modules
            module_id = signature = params_json = result = None
            size = None
            if hlo is not None and hlo.WhichOneof("value") == "bytes_value":
                size = len(hlo.bytes_value)
                proto = hlo_subset_pb2.HloProto()
                try:
                    proto.ParseFromString(hlo.bytes_value)
                    mod = proto.hlo_module
                    module_id = mod.id
                    params = [shape_text(p) for p in mod.host_program_shape.parameters]
                    result = shape_text(mod.host_program_shape.result)
                    params_json = json.dumps(params)
                    signature = "(" + ", ".join(params) + ") -> " + result
                except DecodeError:  # an undecodable Hlo Proto: the module is kept without a signature
                    pass
            m = re.match(r"^(.*)\((\d+)\)$", em.name)
            function = m.group(1) if m else em.name
            function = function.removeprefix("jit_")
            rows.append({"run_id": self.ctx.run_id, "rank": self.rank, "module_name": em.name, "function": function,
                         "fingerprint": m.group(2) if m else None, "module_id": module_id,
                         "entry_signature": signature, "param_shapes": params_json, "result_shape": result,
                         "hlo_proto_bytes": size})
        insert_rows(self.con, "xla_module_meta", rows, source=self.path)


def _timed(events: Sequence[xplane_pb2.XEvent]) -> Sequence[xplane_pb2.XEvent]:
    """The events that have a start time: aggregated ones (``num_occurrences``) have none.

    Iterates the protobuf container without keeping a wrapper per event (holding hundreds of
    thousands of them costs far more than reading one field of each)."""
    counts = [e.num_occurrences for e in events]
    if not any(counts):
        return events
    return [events[i] for i, c in enumerate(counts) if not c]


def _str_or_none(v: Any) -> str | None:
    if v is None or isinstance(v, bytes):
        return None
    return str(v)
