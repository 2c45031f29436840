"""PyTorch profiler (Kineto) Chrome-trace JSON: ``.json`` and ``.json.gz``, one file per rank.

Two paths store exactly the same rows (tests/test_kineto_native.py compares them on every corpus
trace):

**Native** (default when ``setup.py`` could build ``_kineto_scan.c``): a read-ahead thread
(:class:`ReadAhead`) inflates the file (ISA-L when available, in its own thread) and feeds the C
scanner, which validates the JSON, counts every event and keeps the stored ones as text columns
with the GIL released; DuckDB inserts each batch through the Arrow C stream interface (no
pyarrow; ``store_writer.insert_batch``) with the same SQL conversions as below. The CLI's entry
point starts this thread before it even imports DuckDB (:func:`read_ahead`) and hands it down
explicitly (``ingest(read_ahead=...)`` → :meth:`KinetoParser.prepare`, ``started``); otherwise
``prepare`` starts it before the store is opened.

**Pure Python** (no compiler at install time, or ``TRACEKIT_PURE_PYTHON=1``): msgspec-decoded
chunks of events written as JSON files for DuckDB's ``read_json`` (:mod:`._kineto_json`,
imported only then).

:func:`tracekit.parsers.native.load` makes the choice (this module never imports the C module
itself nor reads ``TRACEKIT_PURE_PYTHON``).

The parser has one loop over files; each file is read by a :class:`FileReader` of the path that
:func:`tracekit.parsers.native.load` chose (:class:`ReadAhead` or :class:`JsonChunks`), the seam
between the twins (why not lower: :class:`FileReader`).

No Python object per event outlives its chunk (or batch), so memory is bounded by a few of them.

Rules that follow the reference notes (``shared/reference/kineto-and-hta.md``):

* device activity is classified by ``cat`` (``kernel``/``Kernel``, ``gpu_memcpy``/``Memcpy``,
  ``gpu_memset``/``Memset``, MTIA ``mtia_ccp_events``), never by the presence of a stream:
  Triton ``cpu_op`` events carry ``args.stream`` and are host events;
* timestamps are µs floats with ns precision: converted with ``round(µs * 1000)``, never rounded
  to whole µs; ``dur_ns`` comes from ``dur`` itself, so sums agree with the JSON to < 1 ns/event;
* stream 0 (HIP's default stream) is an ordinary stream;
* ``hip*``, ``cuda*``, ``cu*`` runtime names and graph launches are all runtime calls;
* neither ProfilerStep nor ``distributedInfo`` is required.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, Protocol

from tracekit.errors import ConfigError, TraceInputError
from tracekit.limits import InputLimitError, event_too_long, max_event_bytes
from tracekit.parsers import native
from tracekit.parsers._io import Prefetch, ReadCounter, iter_decompressed, prefetch, read_head
from tracekit.parsers.base import IngestContext, Parser, RankInfo
from tracekit.parsers.store_writer import BATCH, insert_batch


class EventCounts(NamedTuple):
    """The events of one file, counted by the scanner (both paths count the same way)."""

    events: int  #: every event of the traceEvents array
    python: int  #: python_function events, only counted (unless --python-events)
    flow: int  #: flow events (ph s/f/t), only counted
    kept: int  #: complete events handed to DuckDB (it drops the invalid ones)


# ---------------------------------------------------------------------------------------------
# Category vocabularies (current and 2021 schema).

DEVICE_CATS = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "mtia_ccp_events": "mtia_ccp",
}
HOST_CATS = {
    "cpu_op": "op",
    "Operator": "op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "mtia_runtime": "runtime",
    "cuda_driver": "driver",
    "cuda_sync": "sync",
    "overhead": "overhead",
    "Trace": "trace",
    "python_function": "python",
}
SKIPPED_CATS = {"python_function"}

_CAT_CASE = "CASE cat " + " ".join(
    f"WHEN '{k}' THEN '{v}'" for k, v in {**DEVICE_CATS, **HOST_CATS}.items()
) + " ELSE 'other' END"

# ---------------------------------------------------------------------------------------------
# The traceEvents array.

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


@dataclass
class KinetoFile:
    """One Kineto trace file being read: its top-level metadata and the stream of its events.

    ``open()`` reads up to the ``traceEvents`` key and decodes what comes before it; the native
    scanner (:func:`_native_items`) or the pure path (``_kineto_json.chunk_files``) then reads
    the events from ``_buf`` and ``_blocks`` and fills ``trailer`` with the keys after the array.
    """

    path: Path
    header: dict[str, Any] = field(default_factory=dict)
    trailer: dict[str, Any] = field(default_factory=dict)
    array_format: bool = False
    keep_python: bool = False
    json_bytes: int = 0
    _blocks: Iterator[bytes] | None = None
    _buf: bytearray = field(default_factory=bytearray)
    _read: ReadCounter = field(default_factory=ReadCounter)

    def open(self) -> KinetoFile:
        """Read up to the start of ``traceEvents`` and decode the keys before it."""
        self._blocks = iter_decompressed(self.path, counter=self._read)
        buf = self._buf
        searched = 0
        limit = max_event_bytes()
        while True:
            start = _first_token(buf)
            if start is not None and buf[start : start + 1] == b"[":
                self.array_format = True
                self.json_bytes += start + 1
                del buf[: start + 1]
                return self
            if start is not None and buf[start : start + 1] != b"{":
                raise TraceInputError(self.path, "not a JSON trace (expected '{' or '[')")
            m = _EVENTS_KEY.search(buf, max(0, searched - 32))
            if m is not None:
                head = bytes(buf[: m.start()]) + b'"traceEvents":[]}'
                hdr = loads_strict(self.path, head, "before the traceEvents array")
                if not isinstance(hdr, dict):
                    raise TraceInputError(self.path, "not a Kineto trace (top level is not an object)")
                hdr.pop("traceEvents", None)
                self.header = hdr
                self.json_bytes += m.end()
                del buf[: m.end()]
                return self
            searched = len(buf)
            if searched > limit:
                # a header (or a file without traceEvents) this long would be decoded whole
                raise InputLimitError(
                    self.path, f"no traceEvents array in the first {limit:,} bytes; "
                    "set TRACEKIT_MAX_EVENT_BYTES to accept a longer header"
                )
            block = next(self._blocks, None)
            if block is None:
                if not buf.strip():
                    raise TraceInputError(self.path, "empty file")
                raise TraceInputError(
                    self.path, "not a Kineto/Chrome trace (no traceEvents array found)"
                )
            buf += block

    @property
    def meta(self) -> dict[str, Any]:
        """Top-level keys other than ``traceEvents`` (header and trailer merged)."""
        return {**self.header, **self.trailer}


#: The deepest nesting of arrays and objects accepted inside one event or one top-level value
#: (levels). Both paths refuse deeper input in the same words; the C scanner's limit is the same.
MAX_NESTING = 512
_NESTING_REASON = f"nesting deeper than {MAX_NESTING} levels"
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b'"[]{}')
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def nesting_depth(data: bytes) -> int:
    """Deepest nesting of arrays and objects in ``data`` (valid JSON), in levels; linear time,
    no recursion. Used before a recursive decoder (``json``, msgspec) could hit Python's
    recursion limit, so that the limit is the same everywhere."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped backslashes, then quotes
    d = data.translate(None, _NOT_BRACKETS).replace(b'""', b"")
    if b'"' in d:  # strings holding brackets: keep what lies between them only
        d = b"".join(d.split(b'"')[0::2])
    if not d:
        return 0
    steps = memoryview(d.translate(_BRACKET_STEP)).cast("b")  # +1 opens, -1 closes
    return max(accumulate(steps))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_strict(path: Path, data: bytes, where: str, extra_levels: int = 1) -> Any:
    """``json.loads`` as the JSON grammar says (NaN and Infinity refused), refusing nesting
    deeper than :data:`MAX_NESTING` (plus ``extra_levels`` for the enclosing object and array)
    before the recursive decoder could meet Python's recursion limit. Raises a one-line
    :class:`TraceInputError` naming ``where`` the bad JSON is."""
    check_nesting(path, data, where, extra_levels)
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:  # pragma: no cover - check_nesting refuses this first
        raise TraceInputError(path, f"{_NESTING_REASON} {where}") from None
    except ValueError as exc:
        raise TraceInputError(path, f"malformed JSON {where} ({_one_line(exc)})") from None


def check_nesting(path: Path, data: bytes, where: str, extra_levels: int = 1) -> None:
    """Refuse ``data`` when it nests deeper than :data:`MAX_NESTING` + ``extra_levels`` levels."""
    if nesting_depth(data) > MAX_NESTING + extra_levels:
        raise TraceInputError(path, f"{_NESTING_REASON} {where}")


def parse_trailer(path: Path, rest: bytes) -> dict[str, Any]:
    """The keys after the ``traceEvents`` array (``rest`` starts just after its closing ']'),
    decoded the same way by both paths; a later duplicate ``traceEvents`` key is dropped."""
    top = loads_strict(path, b'{"traceEvents":[]' + rest, "after the events")
    if not isinstance(top, dict):  # pragma: no cover - the text starts with '{'
        raise TraceInputError(path, "malformed JSON after the events")
    top.pop("traceEvents", None)
    return top


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _first_token(buf: bytearray) -> int | None:
    """Index of the first non-blank byte (after a UTF-8 BOM), or None if none yet."""
    i = 3 if buf.startswith(b"\xef\xbb\xbf") else 0
    n = len(buf)
    while i < n and buf[i] in b" \t\r\n":
        i += 1
    return i if i < n else None


# ---------------------------------------------------------------------------------------------

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def _is_kineto_head(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return b'"ph"' in head or text.strip() == b"[" or text.startswith(b"[]")
    return text.startswith(b"{") and (
        b'"traceEvents"' in head or b'"schemaVersion"' in head or b'"deviceProperties"' in head
    )


#: What DuckDB's JSON reader extracts from each event. ``args`` values are read as text (arrays
#: and objects as JSON text) and converted with TRY_CAST in SQL, so one odd-typed value in a
#: trace can neither abort an ingest nor lose its event.
_ARG_KEYS = (
    "correlation", "External id", "external_id_2021", "stream", "device", "grid", "block",
    "registers per thread", "shared memory", "blocks per SM", "warps per SM",
    "est. achieved occupancy %", "bytes", "memory bandwidth (GB/s)", "kind", "Input Dims",
    "Input type", "Input Strides", "Concrete Inputs", "flops", "Sequence number",
    "Fwd thread id", "cbid", "Collective name", "In msg nelems", "Out msg nelems", "Group size",
    "dtype",
)
#: the native scanner matches the trace's own key spellings (the 2021 "external id" included)
_ARG_KEYS_BYTES = [b"external id" if k == "external_id_2021" else k.encode() for k in _ARG_KEYS]
_DEVICE_CATS_BYTES = [k.encode() for k in DEVICE_CATS]
_COLUMNS = (
    "{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', "
    "ts: 'DECIMAL(24,6)', dur: 'DECIMAL(24,6)', args: 'STRUCT("
    + ", ".join('"' + k + '" VARCHAR' for k in _ARG_KEYS).replace("'", "''")
    + ")'}"
)

_READ = "read_json({path}, format = 'array', columns = " + _COLUMNS + ")"

#: The native scanner's batches: the same values as text columns ``cat name pid tid ts dur``
#: and ``a<i>`` for ``args[_ARG_KEYS[i]]`` (ts/dur: the trace's own number text), plus
#: ``ts_ns``/``dur_ns``, exact BIGINT ns computed by the scanner where the text is plain decimal
#: µs with at most 6 fractional digits (else NULL, and SQL converts the text as below).


def _json_arg(key: str) -> str:
    return f'args."{key}"'


def _native_arg(key: str) -> str:
    return f"a{_ARG_KEYS.index(key)}"


_NS = "TRY_CAST(round({c} * 1000) AS BIGINT)"  # exact: {c} is DECIMAL µs from the JSON text
_MAX_NS = 1 << 62  # |ts| and dur beyond this (ns) are not physical: the event is dropped


def _select_sql(table: str, arg: Callable[[str], str], src: str, *, native: bool = False) -> str:
    """The SELECT of one batch of events as rows of ``device_activity`` or ``host_events``
    (each result column named as the table's, for ``store_writer.insert_batch``).

    ``arg(key)`` names the column holding ``args[key]`` (text) and ``src`` is the row source:
    DuckDB's ``read_json`` of chunk files, or a batch of the native scanner."""

    def a(key: str, typ: str) -> str:
        return f"TRY_CAST({arg(key)} AS {typ})"

    external_id = f'coalesce({a("External id", "BIGINT")}, {a("external_id_2021", "BIGINT")})'
    collective = (
        f'{arg("Collective name")} AS collective_name, {a("In msg nelems", "BIGINT")} AS in_msg_nelems, '
        f'{a("Out msg nelems", "BIGINT")} AS out_msg_nelems, {a("Group size", "INTEGER")} AS group_size, '
        f'{arg("dtype")} AS dtype'
    )
    ts, dur = _NS.format(c="ts"), _NS.format(c="coalesce(dur, 0)")
    if native:
        # the scanner's exact ns, else the same conversion of the text as the JSON path
        ts = "coalesce(ts_ns, " + _NS.format(c="CAST(ts AS DECIMAL(24,6))") + ")"
        dur = "coalesce(dur_ns, " + _NS.format(c="CAST(coalesce(dur, '0') AS DECIMAL(24,6))") + ")"
    # physics: a complete event with a negative duration, or a time beyond +-2^62 ns (146 years;
    # start + duration must still fit in BIGINT), is dropped (counted as n_invalid_events)
    valid = f"ts IS NOT NULL AND {dur} BETWEEN 0 AND {_MAX_NS} AND {ts} BETWEEN -{_MAX_NS} AND {_MAX_NS}"
    if table == "device_activity":
        return f"""
SELECT
    $run_id AS run_id,
    $rank AS rank,
    coalesce({a("device", "INTEGER")}, TRY_CAST(pid AS INTEGER)) AS device,
    coalesce({arg("stream")}, tid) AS stream,
    {_CAT_CASE} AS category,
    coalesce(name, '') AS name,
    {ts} AS start_ns,
    {dur} AS dur_ns,
    {a("correlation", "BIGINT")} AS correlation_id,
    {external_id} AS external_id,
    cat AS trace_category,
    pid,
    tid,
    {a("grid", "INTEGER[]")}[1] AS grid_x,
    {a("grid", "INTEGER[]")}[2] AS grid_y,
    {a("grid", "INTEGER[]")}[3] AS grid_z,
    {a("block", "INTEGER[]")}[1] AS block_x,
    {a("block", "INTEGER[]")}[2] AS block_y,
    {a("block", "INTEGER[]")}[3] AS block_z,
    {a("registers per thread", "INTEGER")} AS registers_per_thread,
    {a("shared memory", "BIGINT")} AS shared_mem_bytes,
    {a("blocks per SM", "DOUBLE")} AS blocks_per_cu,
    {a("warps per SM", "DOUBLE")} AS warps_per_cu,
    {a("est. achieved occupancy %", "DOUBLE")} AS est_occupancy_pct,
    {a("bytes", "BIGINT")} AS bytes,
    {a("memory bandwidth (GB/s)", "DOUBLE")} AS bandwidth_gbps,
    {arg("kind")} AS kind,
    {collective}
FROM {src} WHERE {valid}
"""
    return f"""
SELECT
    $run_id AS run_id,
    $rank AS rank,
    pid,
    tid,
    {_CAT_CASE} AS category,
    coalesce(cat, '') AS trace_category,
    coalesce(name, '') AS name,
    {ts} AS start_ns,
    {dur} AS dur_ns,
    {a("correlation", "BIGINT")} AS correlation_id,
    {external_id} AS external_id,
    {a("Sequence number", "BIGINT")} AS sequence_number,
    {a("Fwd thread id", "BIGINT")} AS fwd_thread_id,
    {arg("Input Dims")} AS input_dims,
    {arg("Input type")} AS input_types,
    {arg("Input Strides")} AS input_strides,
    {arg("Concrete Inputs")} AS concrete_inputs,
    {a("flops", "DOUBLE")} AS flops,
    {arg("stream")} AS stream,
    {a("device", "INTEGER")} AS device,
    {a("cbid", "INTEGER")} AS cbid,
    {collective}
FROM {src} WHERE {valid}
"""


#: The tables a batch of events goes to, by the native scanner's table index.
EVENT_TABLES = ("device_activity", "host_events")
#: The SELECT of a chunk file's events per table (``{path}``: the chunk files, for ``read_json``).
JSON_SELECTS = {t: _select_sql(t, _json_arg, _READ) for t in EVENT_TABLES}
_NATIVE_NAMES = ["cat", "name", "pid", "tid", "ts", "dur", *(f"a{i}" for i in range(len(_ARG_KEYS))), "ts_ns", "dur_ns"]


def _used_columns(sql: str) -> list[int]:
    """Indices of the scanner's columns that ``sql`` reads: a batch exports only those (DuckDB
    imports every column of an Arrow stream it is given)."""
    return [i for i, n in enumerate(_NATIVE_NAMES) if re.search(rf"\b{n}\b", sql)]


def _native_select(table: str) -> tuple[str, list[int]]:
    """The SELECT of a native batch, and the batch columns it reads."""
    sql = _select_sql(table, _native_arg, BATCH, native=True)
    return sql, _used_columns(sql)


_NATIVE_SELECTS, _NATIVE_COLUMNS = zip(*(_native_select(t) for t in EVENT_TABLES))


class KinetoParser(Parser, format_name="kineto"):
    """Reads PyTorch profiler traces; one run per file or per directory of rank files."""

    suffixes = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")

    def sniff(self, path: Path) -> bool:
        name = path.name.lower()
        if not name.endswith((".json", ".json.gz", ".gz")):
            return False
        try:
            return _is_kineto_head(read_head(path, 1 << 16))
        except TraceInputError:
            # Let parse() report the precise error (truncated gzip, unreadable...).
            return name.endswith((".json", ".json.gz"))

    def explain(self, path: Path) -> str:
        try:
            KinetoFile(path).open()
        except TraceInputError as exc:
            return exc.reason
        return "not a PyTorch profiler trace"

    def prepare(self, files: list[Path], *, python_events: bool = False, started: Any = None) -> None:
        """Start reading the first file in the background (native scanner only): inflating and
        scanning it overlaps with opening the store. ``started``: a :class:`ReadAhead` the CLI
        began before start-up, used when it reads the first file as it is now."""
        c_module = native.load("_kineto_scan")
        if c_module is None or not files:
            return
        first = files[0]
        if isinstance(started, ReadAhead) and started.claim(first, python_events):
            self._ahead = {first: started}
        else:
            self._ahead = {first: ReadAhead(first, python_events, c_module)}

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        readers = self._readers(files, ctx.python_events)
        try:
            ranks = _assign_ranks([r.header() for r in readers])
            with tempfile.TemporaryDirectory(prefix="tracekit-kineto-", dir=_scratch_dir()) as tmp:
                for reader, (rank, source) in zip(readers, ranks):
                    counts = reader.insert(ctx, {"run_id": ctx.run_id, "rank": rank}, Path(tmp))
                    self._finish_file(reader.file, rank, source, ctx, counts)
        finally:
            for reader in readers:
                reader.cancel()

    def _readers(self, files: list[Path], python_events: bool) -> list[FileReader]:
        """One reader per file, all of the path :func:`native.load` chose: the C scanner's
        (:class:`ReadAhead`, the one :meth:`prepare` started when it reads the file as it is now)
        or the pure-Python one (:class:`JsonChunks`)."""
        prepared: dict[Path, ReadAhead] = getattr(self, "_ahead", {})
        self._ahead = {}
        c_module = native.load("_kineto_scan")
        readers: list[FileReader] = []
        for p in files:
            found = prepared.pop(p, None)
            if found is not None and found.file.keep_python != python_events:
                found.cancel()
                found = None
            if c_module is not None:
                readers.append(found or ReadAhead(p, python_events, c_module, start=False))
            else:
                readers.append(JsonChunks(p, python_events))
        for left in prepared.values():
            left.cancel()
        return readers

    def _finish_file(
        self, kf: KinetoFile, rank: int, rank_source: str, ctx: IngestContext,
        counts: EventCounts,
    ) -> None:
        con = ctx.con
        params = {"run_id": ctx.run_id, "rank": rank}
        meta = kf.meta
        stats = con.execute(
            """SELECT min(s), max(e), sum(n), sum(hip), sum(cuda) FROM (
                 SELECT min(start_ns) s, max(start_ns + dur_ns) e, count(*) n, 0 hip, 0 cuda
                   FROM device_activity WHERE run_id = $run_id AND rank = $rank
                 UNION ALL
                 SELECT min(start_ns), max(start_ns + dur_ns), count(*),
                        count(*) FILTER (WHERE category = 'runtime' AND name LIKE 'hip%'),
                        count(*) FILTER (WHERE category IN ('runtime', 'driver')
                                           AND (name LIKE 'cuda%' OR name LIKE 'cu%'))
                   FROM host_events WHERE run_id = $run_id AND rank = $rank)""",
            params,
        ).fetchall()[0]
        first_ns, last_ns, n_kept, n_hip, n_cuda = stats if stats else (None, None, 0, 0, 0)
        dist_info = meta.get("distributedInfo")
        dist: dict[str, Any] = dist_info if isinstance(dist_info, dict) else {}
        runtime, runtime_version = _runtime(meta, bool(n_hip), bool(n_cuda))
        ctx.add_rank(
            RankInfo(
                rank=rank,
                rank_source=rank_source,
                path=kf.path,
                world_size=_int(dist.get("world_size"), 32),
                dist_backend=_str(dist.get("backend")),
                schema_version=_int(meta.get("schemaVersion"), 32),
                trace_id=_str(meta.get("trace_id")),
                base_time_ns=_int(meta.get("baseTimeNanoseconds")),
                display_time_unit=_str(meta.get("displayTimeUnit")),
                runtime=runtime,
                runtime_version=runtime_version,
                metadata=meta,
                n_trace_events=counts.events,
                n_python_events=counts.python,
                n_flow_events=counts.flow,
                n_other_skipped=counts.events - counts.kept - counts.python - counts.flow,
                # complete events DuckDB dropped: no ts, a negative duration, or ts/dur beyond
                # +-2^62 ns (the same SQL on both paths)
                n_invalid_events=counts.kept - int(n_kept or 0),
                first_ns=first_ns,
                last_ns=last_ns,
                captured_at_unix_s=_captured_at(meta, first_ns),
            )
        )
        devices = meta.get("deviceProperties")
        for dev_props in devices if isinstance(devices, list) else []:
            if isinstance(dev_props, dict):
                ctx.add_device(rank, _device_props(dev_props), runtime)


def native_scanner_enabled() -> bool:
    """True when the C scanner is built and not turned off with ``TRACEKIT_PURE_PYTHON=1``
    (:func:`tracekit.parsers.native.load` chooses)."""
    return native.load("_kineto_scan") is not None


_NATIVE_BATCH_BYTES = 4 << 20  # kept-event text gathered before one INSERT (bounds memory)
_RESCAN_FROM = 1 << 20  # an unfinished event this long is scanned again only at twice its size
_NATIVE_QUEUE = 8  # batches the read-ahead thread may hold ahead of DuckDB (it runs ahead while
# the CLI imports and the store is created; fewer stalled it: 0.71 s with 2, 0.62 s with 8, same peak RSS)


class _NativeScan:
    """The C scanner over one opened file's decompressed bytes (``buf``, starting at decompressed
    byte ``offset``): scans what has arrived, refuses an unfinished event longer than
    ``TRACEKIT_MAX_EVENT_BYTES``, and hands out the kept events as batches."""

    def __init__(self, kf: KinetoFile, c_module: ModuleType) -> None:
        self.kf = kf
        self.scan_error: type[Exception] = c_module.ScanError
        self.scanner = c_module.Scanner(_ARG_KEYS_BYTES, _DEVICE_CATS_BYTES, kf.keep_python)
        self.buf = kf._buf
        self.offset = kf.json_bytes  # decompressed bytes before buf[0]
        self.limit = max_event_bytes()
        self.n_kept = 0

    def scan(self, final: bool) -> None:
        try:
            n = self.scanner.scan(self.buf, final)
        except self.scan_error as exc:
            reason, at = exc.args
            if reason == "truncated":
                raise TraceInputError(self.kf.path, "truncated or malformed JSON (the events end early)") from None
            raise TraceInputError(
                self.kf.path, f"malformed JSON in traceEvents near byte {self.offset + at:,}: {reason}"
            ) from None
        del self.buf[:n]
        self.offset += n
        if not self.scanner.done and len(self.buf) > self.limit:
            raise event_too_long(self.kf.path, f"at byte {self.offset:,}", self.limit)

    def batches(self) -> Iterator[tuple[str, Any]]:
        for table in (0, 1):
            batch = self.scanner.take(table, _NATIVE_COLUMNS[table])
            if batch is not None:
                self.n_kept += len(batch)
                yield "batch", (table, batch)

    def check_trailer_size(self) -> None:
        """After the events: the keys that follow them may not grow past the limit."""
        if len(self.buf) > self.limit:
            raise InputLimitError(
                self.kf.path, f"the keys after the traceEvents array are longer than {self.limit:,} "
                "bytes; set TRACEKIT_MAX_EVENT_BYTES to accept them")


def _native_items(kf: KinetoFile, c_module: ModuleType) -> Iterator[tuple[str, Any]]:
    """Scan an opened file with the C scanner; yield ("batch", (table, Batch)) as the kept
    events reach ``_NATIVE_BATCH_BYTES``, ("progress", (events, input bytes)) now and then, and
    last ("counts", :class:`EventCounts`). Fills ``kf.trailer``. Refuses an event longer than ``TRACEKIT_MAX_EVENT_BYTES``.

    The scanner validates and filters the decompressed stream with the GIL released, while the
    next block is inflated in a background thread."""
    assert kf._blocks is not None
    sc = _NativeScan(kf, c_module)
    scanner, buf = sc.scanner, sc.buf
    reported_events = reported_bytes = 0
    # An unfinished event is scanned again from its start when more bytes come: after a scan
    # that leaves more than _RESCAN_FROM bytes, the next one waits for twice as many, so a long
    # event costs linear time; one longer than the limit is refused.
    next_scan = 0
    blocks = prefetch(kf._blocks, depth=1)  # inflating stays a block ahead of the scanner
    try:
        if buf:
            sc.scan(False)
        for block in blocks:
            buf += block
            if scanner.done:
                sc.check_trailer_size()
                continue
            if len(buf) < next_scan and len(buf) <= sc.limit:
                continue
            sc.scan(False)
            next_scan = 2 * len(buf) if len(buf) > _RESCAN_FROM else 0
            _, _, dev_bytes, host_bytes = scanner.pending()
            if dev_bytes + host_bytes >= _NATIVE_BATCH_BYTES:
                yield from sc.batches()
            if scanner.n_events - reported_events >= 50_000:
                yield "progress", (scanner.n_events - reported_events, kf._read.n - reported_bytes)
                reported_events, reported_bytes = scanner.n_events, kf._read.n
        if not scanner.done:
            sc.scan(True)
    finally:
        blocks.close()
    yield from sc.batches()
    yield "progress", (scanner.n_events - reported_events, kf._read.n - reported_bytes)
    kf.json_bytes = sc.offset + len(buf)
    rest = bytes(buf)
    buf.clear()
    if kf.array_format:
        if rest.strip(b" \t\r\n"):
            raise TraceInputError(
                kf.path, "truncated or malformed JSON after the events (data after the closing ']')"
            )
    else:
        kf.trailer = parse_trailer(kf.path, rest)
    yield "counts", EventCounts(scanner.n_events, scanner.n_python, scanner.n_flow, sc.n_kept)


def _file_key(path: Path, keep_python: bool) -> tuple[str, int, int, bool] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, keep_python)


class FileReader(Protocol):
    """How :meth:`KinetoParser.parse` reads one file, whichever path :mod:`native` chose: the
    seam between the C scanner and its pure-Python twin. (One level lower, a Python class with
    the C ``Scanner``'s interface, was built and measured for issue 18: the same rows, but its pure
    path 40–85 % slower than DuckDB's JSON reader doing that work here, so the twins meet here.)"""

    file: KinetoFile

    def header(self) -> KinetoFile:
        """The file, its keys before ``traceEvents`` read (a bad one raises TraceInputError)."""

    def insert(self, ctx: IngestContext, params: dict[str, Any], scratch: Path) -> EventCounts:
        """Insert the file's events (``params``: run id and rank); their counts."""

    def cancel(self) -> None:
        """Stop any work in the background."""


class JsonChunks:
    """The pure-Python reader of one file: msgspec-decoded chunks of events written as JSON files
    in ``scratch`` for DuckDB's ``read_json`` (:mod:`._kineto_json`, imported only here)."""

    def __init__(self, path: Path, keep_python: bool) -> None:
        self.file = KinetoFile(path, keep_python=keep_python)

    def header(self) -> KinetoFile:
        if self.file._blocks is None:
            self.file.open()
        return self.file

    def insert(self, ctx: IngestContext, params: dict[str, Any], scratch: Path) -> EventCounts:
        import duckdb

        from tracekit.parsers._kineto_json import stream_json

        if duckdb.__version__.startswith("1."):
            # DuckDB 1.x's read_json parses a DECIMAL through a double: epoch µs with ns digits
            # would come out wrong (1,882 of the CPU sample's 7,297 host events). Refused, not wrong.
            raise ConfigError("TRACEKIT_PURE_PYTHON" if native.pure_python_forced() else "duckdb",
                              f"the pure-Python Kineto reader needs DuckDB 2 (this is {duckdb.__version__}); "
                              "use the C scanner (unset TRACEKIT_PURE_PYTHON, or install with a C compiler)")
        return stream_json(self.header(), ctx, params, scratch)

    def cancel(self) -> None:
        """Nothing runs in the background."""


class ReadAhead:
    """One Kineto file read by the native scanner in a background thread, ahead of the store.

    The thread opens the file (the keys before ``traceEvents``), then scans it into batches that
    wait in a short queue (at most ``_NATIVE_QUEUE``) until :meth:`items` hands them to DuckDB, so
    inflating and scanning overlap with start-up, store creation and the inserts. Errors reach
    the consumer unchanged. ``start=False`` opens and scans only when first asked.

    One started before the ingest (by the CLI, :func:`read_ahead`) is used only by the ingest of
    the same content: :meth:`claim` checks it and hands it out once."""

    def __init__(self, path: Path, keep_python: bool, c_module: ModuleType, *, start: bool = True) -> None:
        self.file = KinetoFile(path, keep_python=keep_python)
        self.key = _file_key(path, keep_python)
        self._c_module = c_module
        self._claim_lock = threading.Lock()
        self._claimed = False
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._batches: Prefetch[tuple[str, Any]] | None = None
        if start:
            self.start()

    def claim(self, path: Path, keep_python: bool) -> bool:
        """True, once, when this reads ``path`` as it is now (same resolved path, size and
        modification time) with the same ``keep_python``; a read-ahead of that path that does
        not match (older content, other flag) is stopped."""
        key = _file_key(path, keep_python)
        with self._claim_lock:
            if self._claimed or key is None or self.key is None or key[0] != self.key[0]:
                return False
            if key != self.key:
                self.cancel()
                return False
            self._claimed = True
            return True

    @property
    def claimed(self) -> bool:
        """Whether an ingest took this read-ahead (:meth:`claim`)."""
        return self._claimed

    def start(self) -> None:
        if self._batches is None:
            self._batches = Prefetch(self._scan(), depth=_NATIVE_QUEUE, name="tracekit-kineto-read")

    def _open(self) -> None:
        try:
            if self.file._blocks is None:
                self.file.open()
        except BaseException as exc:  # noqa: BLE001 - re-raised by header() in the consumer
            self._open_error = exc
        finally:
            self._opened.set()

    def _scan(self) -> Iterator[tuple[str, Any]]:
        self._open()
        if self._open_error is None:
            yield from _native_items(self.file, self._c_module)

    def header(self) -> KinetoFile:
        """The opened file (its header decoded); raises what opening it raised."""
        if self._batches is None and not self._opened.is_set():
            self._open()
        self._opened.wait()
        if self._open_error is not None:
            raise self._open_error
        return self.file

    def items(self) -> Iterator[tuple[str, Any]]:
        """What :func:`_native_items` yields, in order, from the thread."""
        self.header()
        self.start()
        assert self._batches is not None
        for kind, value in self._batches:
            yield kind, value
            if kind == "counts":
                self._batches.close()  # the thread has finished: its scanner and buffers are freed
                return

    def insert(self, ctx: IngestContext, params: dict[str, Any], scratch: Path) -> EventCounts:
        """Insert the scanner's batches (``scratch`` is not needed: batches go to DuckDB in memory)."""
        return _insert_native(self, ctx, params)

    def cancel(self) -> None:
        """Stop the thread (if started) and free what it holds."""
        if self._batches is not None:
            self._batches.close()


def read_ahead(paths: Iterable[str | Path], python_events: bool = False) -> ReadAhead | None:
    """Start reading the first Kineto-looking file of ``paths`` in the background (native
    scanner only) and return it, for the caller to hand to :func:`tracekit.ingest.ingest`
    (``read_ahead=``), which uses it if it ingests the same content; None when there is nothing
    to read ahead. The CLI calls this before it imports DuckDB."""
    c_module = native.load("_kineto_scan")
    if c_module is None:
        return None
    for p in paths:
        path = Path(p)
        if path.name.lower().endswith((".json", ".json.gz")) and path.is_file():
            return ReadAhead(path, python_events, c_module)
    return None


def _insert_native(ahead: ReadAhead, ctx: IngestContext, params: dict[str, Any]) -> EventCounts:
    """Insert the read-ahead's batches with the same SQL conversions as the pure-Python path
    (DuckDB reads each batch through the Arrow C stream interface). Returns the counts."""
    con = ctx.con
    for kind, value in ahead.items():
        if kind == "batch":
            table, batch = value
            del value
            try:
                insert_batch(con, EVENT_TABLES[table], batch, select=_NATIVE_SELECTS[table], params=params,
                             source=ahead.file.path, what="unexpected value in an event")
            except BaseException:
                ahead.cancel()
                raise
            del batch
        elif kind == "progress":
            ctx.progress(*value)
        else:
            assert isinstance(value, EventCounts)
            return value
    raise AssertionError("the read-ahead ended without counts")


def _scratch_dir() -> str | None:
    """Where chunk files go: ``$TRACEKIT_TMPDIR``, else RAM-backed /dev/shm when present, else
    the system temp dir. At most a few chunks (about 2 MiB of JSON each) exist at a time."""
    explicit = os.environ.get("TRACEKIT_TMPDIR")
    if explicit:
        return explicit
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return None


def _int(v: Any, bits: int = 64) -> int | None:
    """``v`` as an integer that fits a signed ``bits``-bit column, else None (so an odd value
    in a trace's metadata is dropped rather than failing the store's INSERT)."""
    try:
        n = int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n is not None and -(1 << (bits - 1)) <= n < (1 << (bits - 1)) else None


#: deviceProperties keys stored in BIGINT columns; the other numbers go to INTEGER columns
_BIGINT_DEVICE_KEYS = {"totalGlobalMem", "sharedMemPerBlock", "sharedMemPerMultiprocessor",
                       "maxSharedMemoryPerMultiProcessor", "sharedMemPerBlockOptin"}


def _device_props(props: dict[str, Any]) -> dict[str, Any]:
    """``deviceProperties`` entry without numbers its columns cannot hold (non-finite floats,
    integers beyond 32 or 64 bits): those are dropped, the rest is stored as written."""
    out = {}
    for k, v in props.items():
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if number and _int(v, 64 if k in _BIGINT_DEVICE_KEYS else 32) is None:
            continue
        out[k] = v
    return out


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _runtime(meta: dict[str, Any], hip_calls: bool, cuda_calls: bool) -> tuple[str | None, str | None]:
    """("cuda" | "hip" | None, runtime version): from the trace's metadata, else its API names.

    ROCm builds of PyTorch keep the category ``cuda_runtime`` but name the calls ``hip*``."""
    if meta.get("hip_runtime_version") is not None or meta.get("roctracer_version") is not None:
        return "hip", _str(meta.get("hip_runtime_version"))
    if meta.get("cuda_runtime_version") is not None or meta.get("cupti_version") is not None:
        return "cuda", _str(meta.get("cuda_runtime_version"))
    if hip_calls:
        return "hip", None
    if cuda_calls:
        return "cuda", None
    return None, None


_UNIX_2010_NS = 1_262_304_000 * 10**9
_UNIX_2100_NS = 4_102_444_800 * 10**9


def _captured_at(meta: dict[str, Any], first_ns: int | None) -> float | None:
    """Unix seconds of the first event when the trace allows it, else None."""
    base = _int(meta.get("baseTimeNanoseconds"))
    if first_ns is not None:
        if base is not None and _UNIX_2010_NS <= base + first_ns < _UNIX_2100_NS:
            return (base + first_ns) / 1e9
        if _UNIX_2010_NS <= first_ns < _UNIX_2100_NS:
            return first_ns / 1e9
    md = meta.get("metadata")
    stamp = md.get("timestamp") if isinstance(md, dict) else None
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        seconds = float(stamp)  # a finite Unix time between 2010 and 2100, else unknown
        if _UNIX_2010_NS / 1e9 <= seconds < _UNIX_2100_NS / 1e9:
            return seconds
    return None


def _assign_ranks(files: list[KinetoFile]) -> list[tuple[int, str]]:
    """Rank per file: ``distributedInfo.rank``, else ``rank<N>`` in the file name, else order.

    If two files would get the same rank, every file gets its position in name order instead.
    """
    picked: list[tuple[int, str] | None] = []
    for kf in files:
        dist = kf.header.get("distributedInfo")
        r = _int(dist.get("rank"), 31) if isinstance(dist, dict) else None
        if r is not None:
            picked.append((r, "distributedInfo"))
            continue
        m = _RANK_IN_NAME.search(kf.path.name)
        r = _int(m.group(1), 31) if m else None
        picked.append((r, "file name") if r is not None else None)
    if len(files) == 1:
        return [picked[0] or (0, "single file")]
    ranks = [p[0] for p in picked if p is not None]
    if len(ranks) == len(files) and len(set(ranks)) == len(ranks):
        return [p for p in picked if p is not None]
    return [(i, "file order") for i in range(len(files))]
