"""NVIDIA Nsight Systems: the SQLite export of a report (``nsys export --type sqlite``, or
``nsys profile --export=sqlite``), any version from 2021 (``.qdrep`` era) to 2026.

A ``.nsys-rep`` / ``.qdrep`` report is exported first with ``nsys`` when it is on PATH (into
``$TRACEKIT_TMPDIR``); without ``nsys`` it is refused in one line that gives the ``nsys export``
command to run. In a directory that holds ``X.nsys-rep`` and ``X.sqlite`` the export is read and
the report left out (the same capture). Several exports in one directory are one run (one report
per node or per rank, as ``nsys profile -o report_%q{RANK}`` writes them), their clocks aligned
by each report's session start (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``).

Every file is opened read-only (``mode=ro&immutable=1``) with Python's ``sqlite3``; the joins to
``StringIds`` run in SQLite, rows move into DuckDB as NumPy batches, conversions run in DuckDB
with ``TRY_CAST`` (a value of the wrong type becomes NULL, a row without integer times is not
stored). Tables are created lazily by nsys: a missing table means "not captured", so a capture
without kernels (no ``CUPTI_ACTIVITY_KIND_KERNEL`` table) gives a run without kernels, not an
error. What goes where (see also ``docs/schema.md``):

* ``CUPTI_ACTIVITY_KIND_KERNEL`` -> ``device_activity`` category ``kernel``: name = the
  ``demangledName`` string (as ``nsys stats`` and Kineto show it; else ``shortName``, else
  ``mangledName``); ``device`` = ``deviceId`` (the CUDA device the process saw); ``stream`` =
  ``streamId``; ``correlation_id`` = ``correlationId``, the id of the runtime or driver call that
  launched it — for the kernels of a CUDA graph traced node by node (``--cuda-graph-trace=node``)
  that is the ``cudaGraphLaunch`` call, so graph kernels are attributed to their launch through
  the ordinary ``launches`` view; grid, block, ``registersPerThread``; ``shared_mem_bytes`` =
  static + dynamic shared memory per block (Kineto's ``shared memory``); ``blocks_per_cu`` and
  ``warps_per_cu`` from the device's SM count (Kineto's ``blocks per SM`` / ``warps per SM``).
  ``shortName``, ``contextId``, ``graphNodeId``, ``graphId``, ``launchType``, the static and
  dynamic shared memory and local memory per thread are in ``args``.
* ``CUPTI_ACTIVITY_KIND_MEMCPY`` -> ``memcpy``, named as Kineto names copies
  (``Memcpy HtoD (Pinned -> Device)``), ``kind`` = ``HtoD`` / ``DtoH`` / ``DtoD`` / ``PtoP`` …
  (``copyKind``), ``bytes``, ``bandwidth_gbps`` = bytes ÷ duration. ``CUPTI_ACTIVITY_KIND_MEMSET``
  -> ``memset`` (``Memset (Device)``), ``bytes``.
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``host_events``: ``eventClass`` 0 (CUDA runtime) as
  ``runtime``, 1 (CUDA driver: ``cuLaunchKernel`` from CuPy, Triton, nvFuser) as ``driver``, named
  as nsys names them (``cudaLaunchKernel_v7000``: the views classify the suffixed names);
  ``correlation_id`` = ``correlationId``. Other event classes — the CUDA-backtrace rows
  (``eventClass`` 67) of 2022 exports, which repeat the correlation id of the API row they
  belong to — are counted as skipped, never stored, so a join on correlation ids stays 1:1.
* ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` -> ``host_events`` category ``sync``, named as Kineto
  names CUPTI sync records (``Stream Sync``, ``Event Sync``, ``Context Sync``, ``Stream Wait
  Event``) from the API call with its correlation id (``args.api``): ``syncType``'s numbering
  differs between nsys versions, so it names a record only without that call. ``device`` is the
  device of the record's context (its ``deviceId`` is 0 on every GPU); the "no stream" value
  4294967295 is NULL.
* ``NVTX_EVENTS`` push/pop (59) and start/end (60) ranges -> ``host_events``, marks (34) with
  duration 0; the text is ``text`` or, where nsys moved it, the ``textId`` string; the NVTX
  domain (``NCCL``, …) is ``trace_category`` = ``nvtx:<domain>`` (``nvtx`` for the default
  domain; ``nvtx:domain<N>`` when a cut window lost the domain's create record). Ranges written by PyTorch's ``emit_nvtx`` (``aten::mm, seq = 12, op_id = 34, sizes =
  [[8, 4096], …]``) are split: the name is what precedes ``, seq =`` / ``, op_id =``, the
  sequence number goes to ``sequence_number``, op id, sizes and input op ids to ``args``; such a
  range named ``namespace::op`` (``aten::``, ``c10d::``, ``vllm::``; lower-case namespace) is an
  ``op``, every other range an ``annotation`` — so a step range (vLLM's, SGLang's,
  ``ProfilerStep#N``, ``decode_step``) is recognised as a step by ``step_markers``. Unclosed
  ranges (no end) are counted as skipped; domain, category and thread-name records are not events.
* ``TARGET_INFO_GPU`` -> ``device_meta`` per (rank, device): name, SMs, memory, bandwidth, clock,
  compute capability, limits. The CUDA device id is matched through ``TARGET_INFO_CUDA_DEVICE``
  (pid, cudaId -> gpuId) when the export has it, else ``TARGET_INFO_GPU.cuDevice``. An export
  without ``TARGET_INFO_GPU`` (a trimmed window) gives devices without a name.
* Ranks: the processes that ran device work (``globalPid``: pid = ``(globalPid >> 24) &
  0xFFFFFF``, tid = ``globalTid & 0xFFFFFF``), numbered by file then pid; a process with only
  host-side rows (a launcher that queried the device) is not a rank of its own and its rows are
  counted as skipped (``host_only_processes`` in the rank's metadata). A capture without any
  device work keeps its processes with host rows as ranks.
* ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` (whole CUDA graphs, nsys's default ``--cuda-graph-trace=
  graph``) holds no kernels: its rows are counted (``graph_launches_traced_whole``) and the
  ingest warns that the graphs' kernels are not in the export.

Timestamps are nanoseconds since the report's session start (nsys's own time base);
``runs.captured_at`` is the session start in UTC (``utcEpochNs``; absent in 2021 exports).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import ConfigError, TraceInputError
from tracekit.limits import temp_dir
from tracekit.parsers._io import prefetch, read_head
from tracekit.parsers.base import DeviceInfo, IngestContext, Parser, RankInfo
from tracekit.parsers.explain import refusal
from tracekit.parsers.rocpd import SQLITE_ERRORS, one_line, sqlite_text
from tracekit.parsers.store_writer import create_temp_table, insert_batch, rank_span, row_arrays

SQLITE_MAGIC = b"SQLite format 3\x00"
#: Report files that ``nsys export`` turns into SQLite (``.qdrep`` before 2021.4).
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
_BATCH = 20_000  # rows a DuckDB INSERT takes at once (as the rocpd reader)
_FETCH_ROWS = 5_000  # rows fetched from SQLite at once (Python tuples: bounds the transient memory)
#: Seconds ``nsys export`` may take for one report.
EXPORT_TIMEOUT_S = 600
NOT_NSYS = "SQLite file is not an Nsight Systems export (no StringIds table with CUPTI, NVTX or TARGET_INFO tables)"

_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
_GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
_NVTX = "NVTX_EVENTS"
_DEVICE_TABLES = (_KERNEL, _MEMCPY, _MEMSET)

#: CUPTI memcpy kinds (``ENUM_CUDA_MEMCPY_OPER``) as Kineto spells them.
_COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
              9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
#: CUPTI memory kinds (``ENUM_CUDA_MEM_KIND``).
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
             6: "Managed Static"}
#: CUPTI synchronization types (``ENUM_CUPTI_SYNC_TYPE``) as Kineto names the records.
_SYNC_NAME = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
_NVTX_MARK = 34
_NVTX_DOMAIN_CREATE = 75

_PID = "(({col} >> 24) & 16777215)"


def _case(column: str, names: dict[int, str], otherwise: str | None) -> str:
    """SQL naming the integer ``column`` of the batch by ``names`` (else ``otherwise``, or NULL)."""
    whens = " ".join(f"WHEN {k} THEN '{v}'" for k, v in names.items())
    default = f"'{otherwise}'" if otherwise else "NULL"
    return f"CASE TRY_CAST(b.{column} AS BIGINT) {whens} ELSE {default} END"


def _pid_sql(col: str) -> str:
    return _PID.format(col=col)


# ---------------------------------------------------------------------------------------------
# Opening and recognizing


def _sqlite_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro&immutable=1"


def _tables(con: sqlite3.Connection) -> dict[str, set[str]]:
    """Table name (as nsys spells it) → its column names."""
    names = [str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
    wanted = (_KERNEL, _MEMCPY, _MEMSET, _RUNTIME, _SYNC, _GRAPH, _NVTX, "StringIds", "TARGET_INFO_GPU",
              "TARGET_INFO_CUDA_DEVICE", "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT",
              "EXPORT_META_DATA", "META_DATA_CAPTURE", "PROCESSES")
    out: dict[str, set[str]] = {n: set() for n in names}
    for name in names:
        if name in wanted:
            out[name] = {str(c[1]) for c in con.execute(f'PRAGMA table_info("{name}")').fetchall()}
    return out


def looks_like_nsys(names: Sequence[str]) -> bool:
    """Whether a database with these tables is an Nsight Systems export."""
    return "StringIds" in names and any(
        n.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_")) or n in (_NVTX, "ThreadNames") for n in names)


def _connect(path: Path, shown: Path) -> sqlite3.Connection:
    try:
        con = sqlite3.connect(_sqlite_uri(path), uri=True, check_same_thread=False)
    except SQLITE_ERRORS as exc:
        raise TraceInputError(shown, f"cannot open SQLite database: {one_line(exc)}") from None
    con.text_factory = sqlite_text
    return con


def check_schema(path: Path, con: sqlite3.Connection) -> dict[str, set[str]]:
    """The export's tables and columns; TraceInputError when it is not a readable nsys export."""
    try:
        tables = _tables(con)
        if "StringIds" in tables:  # read a page: a truncated file fails here, in one line
            con.execute("SELECT count(*) FROM StringIds").fetchall()
    except SQLITE_ERRORS as exc:
        raise TraceInputError(path, f"truncated or corrupt SQLite database ({one_line(exc)})") from None
    if not looks_like_nsys(list(tables)):
        if any(t.lower().startswith(("rocpd_", "rocpd")) for t in tables):
            raise TraceInputError(path, "this is a rocprof database, not an Nsight Systems export")
        raise TraceInputError(path, NOT_NSYS)
    needs = {_KERNEL: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"),
             _RUNTIME: ("start", "end", "globalTid", "correlationId", "nameId"),
             _MEMCPY: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"),
             _MEMSET: ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"),
             _SYNC: ("start", "end", "globalPid"),
             _NVTX: ("start", "end", "eventType", "globalTid"),
             "StringIds": ("id", "value")}
    for table, cols in needs.items():
        if table in tables:
            lacking = [c for c in cols if c not in tables[table]]
            if lacking:
                raise TraceInputError(path, f"nsys table {table} lacks columns: {', '.join(lacking)}")
    return tables


def export_command(report: Path, out: Path | str) -> list[str]:
    """The ``nsys export`` command that writes the SQLite export of ``report`` to ``out``."""
    return ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]


def _export(report: Path, out_dir: Path) -> Path:
    """Export ``report`` to SQLite in ``out_dir`` with ``nsys``; TraceInputError saying the command
    to run when ``nsys`` is not on PATH or the export fails."""
    target = report.with_suffix(".sqlite").name
    exe = shutil.which("nsys")
    if exe is None:
        beside = report.with_suffix(".sqlite")
        hint = f", or ingest {beside} beside it" if beside.is_file() else ""
        raise TraceInputError(report, "an Nsight Systems report needs nsys to read, which is not on PATH: run "
                                      f"`nsys export --type sqlite --output {target} {report}` and ingest "
                                      f"{target}{hint}")
    out = out_dir / target
    cmd = export_command(report, out)
    cmd[0] = exe
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise TraceInputError(report, f"nsys export did not finish in {EXPORT_TIMEOUT_S} s") from None
    except OSError as exc:
        raise TraceInputError(report, f"cannot run nsys: {exc.strerror or exc}") from None
    if done.returncode != 0 or not out.is_file():
        why = (done.stderr or done.stdout or "").strip().splitlines()
        raise TraceInputError(report, f"nsys export failed (exit {done.returncode})"
                                      + (f": {one_line(Exception(why[-1]))}" if why else ""))
    return out


@contextmanager
def open_export(path: Path) -> Iterator[tuple[sqlite3.Connection, dict[str, set[str]]]]:
    """A read-only connection to the nsys SQLite export ``path`` (a report is exported first, into
    a temporary directory removed afterwards) and its tables."""
    with ExitStack() as stack:
        db = path
        if path.name.lower().endswith(REPORT_SUFFIXES):
            parent = temp_dir()
            try:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tracekit-nsys-", dir=parent))
            except OSError as exc:
                raise ConfigError("TRACEKIT_TMPDIR", f"{parent}: cannot create a temp directory "
                                                     f"({exc.strerror or exc})") from None
            db = _export(path, Path(tmp))
        elif not read_head(path, len(SQLITE_MAGIC)).startswith(SQLITE_MAGIC):
            raise TraceInputError(path, "not an SQLite database (no SQLite header); Nsight Systems traces are read "
                                        "from their SQLite export (nsys export --type sqlite)")
        con = _connect(db, path)
        stack.callback(con.close)
        yield con, check_schema(path, con)


# ---------------------------------------------------------------------------------------------
# SQLite queries (string joins in SQLite; conversions in DuckDB)


def _col(tables: dict[str, set[str]], table: str, col: str, alias: str = "") -> str:
    """``alias.col`` when ``table`` has the column, else NULL (columns came and went over versions)."""
    return f'{alias + "." if alias else ""}"{col}"' if col in tables.get(table, set()) else "NULL"


def _kernel_query(t: dict[str, set[str]]) -> str:
    def c(col: str) -> str:
        return _col(t, _KERNEL, col, "k")

    def name(col: str) -> str:
        return f"(SELECT value FROM StringIds WHERE id = {c(col)})" if col in t[_KERNEL] else "NULL"

    return f"""
SELECT k.start, k."end", k.deviceId, {c("contextId")}, k.streamId, k.correlationId, {_pid_sql("k.globalPid")},
       {name("demangledName")}, {name("shortName")}, {name("mangledName")},
       {c("registersPerThread")}, {c("gridX")}, {c("gridY")}, {c("gridZ")}, {c("blockX")}, {c("blockY")},
       {c("blockZ")}, {c("staticSharedMemory")}, {c("dynamicSharedMemory")}, {c("localMemoryPerThread")},
       {c("graphNodeId")}, {c("graphId")}, {c("launchType")}
FROM {_KERNEL} k"""


_KERNEL_COLS = ("start", "end", "device", "context", "stream", "correlation", "pid", "demangled", "short",
                "mangled", "regs", "gx", "gy", "gz", "bx", "by", "bz", "static_smem", "dynamic_smem",
                "local_mem", "graph_node", "graph_id", "launch_type")


def _copy_query(t: dict[str, set[str]]) -> str:
    def c(col: str) -> str:
        return _col(t, _MEMCPY, col, "m")

    return f"""
SELECT m.start, m."end", m.deviceId, m.streamId, m.correlationId, {_pid_sql("m.globalPid")}, m.bytes,
       m.copyKind, {c("srcKind")}, {c("dstKind")}, {c("srcDeviceId")}, {c("dstDeviceId")}, {c("graphNodeId")}
FROM {_MEMCPY} m"""


_COPY_COLS = ("start", "end", "device", "stream", "correlation", "pid", "bytes", "copy_kind", "src_kind",
              "dst_kind", "src_device", "dst_device", "graph_node")


def _memset_query(t: dict[str, set[str]]) -> str:
    return f"""
SELECT m.start, m."end", m.deviceId, m.streamId, m.correlationId, {_pid_sql("m.globalPid")}, m.bytes,
       {_col(t, _MEMSET, "memKind", "m")}, {_col(t, _MEMSET, "value", "m")}, {_col(t, _MEMSET, "graphNodeId", "m")}
FROM {_MEMSET} m"""


_MEMSET_COLS = ("start", "end", "device", "stream", "correlation", "pid", "bytes", "mem_kind", "value", "graph_node")


def _runtime_query(t: dict[str, set[str]]) -> str:
    return f"""
SELECT r.start, r."end", {_col(t, _RUNTIME, "eventClass", "r")}, {_pid_sql("r.globalTid")},
       r.globalTid & 16777215, r.correlationId, (SELECT value FROM StringIds WHERE id = r.nameId),
       {_col(t, _RUNTIME, "returnValue", "r")}
FROM {_RUNTIME} r"""


_RUNTIME_COLS = ("start", "end", "event_class", "pid", "tid", "correlation", "name", "return_value")


def _sync_query(t: dict[str, set[str]]) -> str:
    def c(col: str) -> str:
        return _col(t, _SYNC, col, "s")

    return f"""
SELECT s.start, s."end", {c("deviceId")}, {c("streamId")}, {c("correlationId")}, {_pid_sql("s.globalPid")},
       {c("syncType")}, {c("eventId")}, {c("contextId")}
FROM {_SYNC} s"""


_SYNC_COLS = ("start", "end", "device", "stream", "correlation", "pid", "sync_type", "event_id", "context")


def _nvtx_query(t: dict[str, set[str]]) -> str:
    def c(col: str) -> str:
        return _col(t, _NVTX, col, "n")

    text = c("text")
    if "textId" in t[_NVTX]:
        text = f"coalesce({text}, (SELECT value FROM StringIds WHERE id = n.textId))"
    domain, join = "NULL", ""
    if "domainId" in t[_NVTX]:
        # the domain's name from its NvtxDomainCreate record (of the same process), else its id: a
        # window cut from a longer capture can lose the create record
        domain = "CASE WHEN n.domainId <> 0 THEN coalesce(d.name, 'domain' || n.domainId) END"
        join = (f"LEFT JOIN (SELECT {_pid_sql('globalTid')} AS pid, domainId, min({_col(t, _NVTX, 'text')}) AS name "
                f"FROM {_NVTX} WHERE eventType = {_NVTX_DOMAIN_CREATE} GROUP BY 1, 2) d "
                f"ON d.domainId = n.domainId AND d.pid = {_pid_sql('n.globalTid')}")
    return f"""
SELECT n.start, n."end", n.eventType, {_pid_sql("n.globalTid")}, n.globalTid & 16777215, {text}, {domain},
       {c("category")}
FROM {_NVTX} n {join}
WHERE n.eventType IN ({", ".join(map(str, (*_NVTX_RANGE_TYPES, _NVTX_MARK)))})"""


_NVTX_COLS = ("start", "end", "event_type", "pid", "tid", "text", "domain", "nvtx_category")

# ---------------------------------------------------------------------------------------------
# DuckDB inserts

def _from_batch(join: str = "") -> str:
    """FROM the batch, its rank joined (and ``join``): rows of a rank's process whose start is an
    integer and whose duration fits 64 bits."""
    return f"""
FROM batch b JOIN nsys_pid_rank r ON r.pid = TRY_CAST(b.pid AS BIGINT) AND r.file = $file {join}
WHERE TRY_CAST(b.start AS BIGINT) IS NOT NULL
  AND TRY_CAST(coalesce(TRY_CAST(b."end" AS HUGEINT), TRY_CAST(b.start AS HUGEINT)) - TRY_CAST(b.start AS HUGEINT) AS BIGINT) IS NOT NULL
"""


_START = "TRY_CAST(b.start AS BIGINT) + $offset_ns AS start_ns"
# end < start: dropped and counted by ingest
_DUR = 'TRY_CAST(coalesce(TRY_CAST(b."end" AS HUGEINT), TRY_CAST(b.start AS HUGEINT)) - TRY_CAST(b.start AS HUGEINT) AS BIGINT) AS dur_ns'
_DEVICE_COMMON = f"""$run_id AS run_id, r.rank AS rank, TRY_CAST(b.device AS INTEGER) AS device,
    CAST(TRY_CAST(b.stream AS BIGINT) AS VARCHAR) AS stream, {_START}, {_DUR},
    TRY_CAST(b.correlation AS BIGINT) AS correlation_id, CAST(TRY_CAST(b.pid AS BIGINT) AS VARCHAR) AS pid"""

_KERNELS = f"""
SELECT {_DEVICE_COMMON}, 'kernel' AS category, '{_KERNEL}' AS trace_category,
    coalesce(nullif(CAST(b.demangled AS VARCHAR), ''), nullif(CAST(b.short AS VARCHAR), ''),
             nullif(CAST(b.mangled AS VARCHAR), ''), '') AS name,
    TRY_CAST(b.gx AS INTEGER) AS grid_x, TRY_CAST(b.gy AS INTEGER) AS grid_y, TRY_CAST(b.gz AS INTEGER) AS grid_z,
    TRY_CAST(b.bx AS INTEGER) AS block_x, TRY_CAST(b.by AS INTEGER) AS block_y, TRY_CAST(b.bz AS INTEGER) AS block_z,
    TRY_CAST(b.regs AS INTEGER) AS registers_per_thread,
    TRY_CAST(TRY_CAST(b.static_smem AS HUGEINT) + TRY_CAST(b.dynamic_smem AS HUGEINT) AS BIGINT) AS shared_mem_bytes,
    TRY_CAST(b.gx AS DOUBLE) * TRY_CAST(b.gy AS DOUBLE) * TRY_CAST(b.gz AS DOUBLE) / nullif(d.sm_count, 0)
        AS blocks_per_cu,
    TRY_CAST(b.gx AS DOUBLE) * TRY_CAST(b.gy AS DOUBLE) * TRY_CAST(b.gz AS DOUBLE)
        * ceil(TRY_CAST(b.bx AS DOUBLE) * TRY_CAST(b.by AS DOUBLE) * TRY_CAST(b.bz AS DOUBLE) / coalesce(d.warp, 32))
        / nullif(d.sm_count, 0) AS warps_per_cu,
    json_object('shortName', nullif(CAST(b.short AS VARCHAR), ''), 'contextId', TRY_CAST(b.context AS BIGINT),
                'graphNodeId', TRY_CAST(b.graph_node AS BIGINT), 'graphId', TRY_CAST(b.graph_id AS BIGINT),
                'launchType', TRY_CAST(b.launch_type AS BIGINT),
                'static_shared_bytes', TRY_CAST(b.static_smem AS BIGINT),
                'dynamic_shared_bytes', TRY_CAST(b.dynamic_smem AS BIGINT),
                'local_bytes_per_thread', TRY_CAST(b.local_mem AS BIGINT)) AS args
{_from_batch("LEFT JOIN nsys_sm d ON d.file = $file AND d.pid = r.pid AND d.device = TRY_CAST(b.device AS BIGINT)")}"""

_COPIES = f"""
SELECT {_DEVICE_COMMON}, 'memcpy' AS category, '{_MEMCPY}' AS trace_category,
    'Memcpy ' || {_case("copy_kind", _COPY_KIND, "Unknown")} || ' (' || {_case("src_kind", _MEM_KIND, "Unknown")}
        || ' -> ' || {_case("dst_kind", _MEM_KIND, "Unknown")} || ')' AS name,
    {_case("copy_kind", _COPY_KIND, None)} AS kind, TRY_CAST(b.bytes AS BIGINT) AS bytes,
    TRY_CAST(b.bytes AS DOUBLE) / nullif(TRY_CAST(b."end" AS DOUBLE) - TRY_CAST(b.start AS DOUBLE), 0) AS bandwidth_gbps,
    json_object('copyKind', TRY_CAST(b.copy_kind AS BIGINT), 'srcDeviceId', TRY_CAST(b.src_device AS BIGINT),
                'dstDeviceId', TRY_CAST(b.dst_device AS BIGINT),
                'graphNodeId', TRY_CAST(b.graph_node AS BIGINT)) AS args
{_from_batch()}"""

_MEMSETS = f"""
SELECT {_DEVICE_COMMON}, 'memset' AS category, '{_MEMSET}' AS trace_category,
    'Memset (' || {_case("mem_kind", _MEM_KIND, "Unknown")} || ')' AS name, TRY_CAST(b.bytes AS BIGINT) AS bytes,
    json_object('value', TRY_CAST(b.value AS BIGINT), 'graphNodeId', TRY_CAST(b.graph_node AS BIGINT)) AS args
{_from_batch()}"""

_RUNTIMES = f"""
SELECT $run_id AS run_id, r.rank AS rank, CAST(TRY_CAST(b.pid AS BIGINT) AS VARCHAR) AS pid,
    CAST(TRY_CAST(b.tid AS BIGINT) AS VARCHAR) AS tid,
    CASE TRY_CAST(b.event_class AS BIGINT) WHEN 1 THEN 'driver' ELSE 'runtime' END AS category,
    '{_RUNTIME}' AS trace_category, coalesce(CAST(b.name AS VARCHAR), '') AS name, {_START}, {_DUR},
    TRY_CAST(b.correlation AS BIGINT) AS correlation_id,
    json_object('returnValue', TRY_CAST(b.return_value AS BIGINT)) AS args
{_from_batch()} AND coalesce(TRY_CAST(b.event_class AS BIGINT), 0) IN (0, 1)"""

#: ``streamId`` / ``eventId`` of a sync record that has none (CUPTI's 32-bit "invalid" value).
_NO_ID = 4294967295

_SYNCS = f"""
SELECT $run_id AS run_id, r.rank AS rank, CAST(TRY_CAST(b.pid AS BIGINT) AS VARCHAR) AS pid, 'sync' AS category,
    '{_SYNC}' AS trace_category, {_case("sync_type", _SYNC_NAME, "Unknown Sync")} AS name, {_START}, {_DUR},
    TRY_CAST(b.correlation AS BIGINT) AS correlation_id,
    CAST(nullif(TRY_CAST(b.stream AS BIGINT), {_NO_ID}) AS VARCHAR) AS stream,
    -- the record's deviceId is 0 on every GPU in the exports seen: the device of its context instead
    coalesce(x.device, TRY_CAST(b.device AS INTEGER)) AS device,
    json_object('syncType', TRY_CAST(b.sync_type AS BIGINT), 'eventId', nullif(TRY_CAST(b.event_id AS BIGINT), {_NO_ID}),
                'contextId', TRY_CAST(b.context AS BIGINT)) AS args
{_from_batch("LEFT JOIN nsys_ctx x ON x.file = $file AND x.pid = r.pid AND x.context = TRY_CAST(b.context AS BIGINT)")}"""

#: Sync records named from the API call that made them (``syncType``'s numbering differs between
#: nsys versions: 1 is a device sync in one export and an event query in another), as Kineto names them.
_SYNC_BY_API = f"""
UPDATE host_events h SET name = CASE
        WHEN regexp_matches(a.name, '^(cuda|cu)StreamWaitEvent') THEN 'Stream Wait Event'
        WHEN regexp_matches(a.name, '^(cuda|cu)StreamSynchronize') THEN 'Stream Sync'
        WHEN regexp_matches(a.name, '^(cuda|cu)Event(Synchronize|Query)') THEN 'Event Sync'
        WHEN regexp_matches(a.name, '^(cudaDeviceSynchronize|cudaThreadSynchronize|cuCtxSynchronize)') THEN 'Context Sync'
        ELSE h.name END,
    args = json_merge_patch(h.args, json_object('api', a.name))
FROM (SELECT rank, correlation_id, any_value(name) AS name FROM host_events
      WHERE run_id = $run_id AND category IN ('runtime', 'driver') AND correlation_id IS NOT NULL GROUP BY ALL) a
WHERE h.run_id = $run_id AND h.category = 'sync' AND h.trace_category = '{_SYNC}'
  AND a.rank = h.rank AND a.correlation_id = h.correlation_id"""

#: PyTorch ``emit_nvtx`` range text: ``name[, seq = N][, op_id = N][, sizes = [...]][, input_op_ids = [...]]``.
_EMIT_NVTX = r"^(.+?)(, seq = (-?[0-9]+))?(, op_id = ([0-9]+))?(, sizes = (\[.*?\]))?(, input_op_ids = (.*))?$"

_NVTXS = f"""
SELECT $run_id AS run_id, q.rank AS rank, CAST(TRY_CAST(q.pid AS BIGINT) AS VARCHAR) AS pid,
    CAST(TRY_CAST(q.tid AS BIGINT) AS VARCHAR) AS tid,
    CASE WHEN q.emit AND regexp_matches(q.g.name, '^[a-z_][a-z0-9_]*::') THEN 'op' ELSE 'annotation' END AS category,
    CASE WHEN nullif(CAST(q.domain AS VARCHAR), '') IS NULL THEN 'nvtx' ELSE 'nvtx:' || CAST(q.domain AS VARCHAR) END
        AS trace_category,
    CASE WHEN q.emit THEN q.g.name ELSE coalesce(CAST(q.text AS VARCHAR), '') END AS name,
    TRY_CAST(q.start AS BIGINT) + $offset_ns AS start_ns,
    CASE WHEN TRY_CAST(q.event_type AS BIGINT) = {_NVTX_MARK} THEN 0::BIGINT
         ELSE TRY_CAST(TRY_CAST(q."end" AS HUGEINT) - TRY_CAST(q.start AS HUGEINT) AS BIGINT) END AS dur_ns,
    CASE WHEN q.emit THEN TRY_CAST(nullif(q.g.seq, '') AS BIGINT) END AS sequence_number,
    CASE WHEN q.emit THEN json_object('text', CAST(q.text AS VARCHAR), 'op_id', TRY_CAST(nullif(q.g.op, '') AS BIGINT),
                                      'sizes', nullif(q.g.sizes, ''), 'input_op_ids', nullif(q.g.inputs, ''))
    END AS args
FROM (SELECT *, (g.seq <> '' OR g.op <> '') AS emit FROM (
        SELECT b.*, r.rank, regexp_extract(CAST(b.text AS VARCHAR), '{_EMIT_NVTX}',
                                           ['name', 's', 'seq', 'o', 'op', 'z', 'sizes', 'i', 'inputs']) AS g
        FROM batch b JOIN nsys_pid_rank r ON r.pid = TRY_CAST(b.pid AS BIGINT) AND r.file = $file) q0) q
WHERE TRY_CAST(q.start AS BIGINT) IS NOT NULL
  AND (TRY_CAST(q.event_type AS BIGINT) = {_NVTX_MARK}
       OR TRY_CAST(TRY_CAST(q."end" AS HUGEINT) - TRY_CAST(q.start AS HUGEINT) AS BIGINT) IS NOT NULL)"""


# ---------------------------------------------------------------------------------------------


@dataclass
class _Process:
    """One rank: a process of one export that ran device work."""

    file_index: int
    pid: int | None
    rank: int = 0
    host_only: dict[int, int] = field(default_factory=dict)


class NsysParser(Parser, format_name="nsys"):
    """Reads Nsight Systems SQLite exports (and reports, with ``nsys``); a directory of them is
    one run, one rank per process that ran device work."""

    suffixes = (".sqlite", ".nsys-rep", ".qdrep")

    def sniff(self, path: Path) -> bool:
        if path.name.lower().endswith(REPORT_SUFFIXES):
            return True  # parse() exports it with nsys, or says the command to run
        try:
            if not read_head(path, len(SQLITE_MAGIC)).startswith(SQLITE_MAGIC):
                return False
        except TraceInputError:
            return False
        try:
            con = sqlite3.connect(_sqlite_uri(path), uri=True)
            con.text_factory = sqlite_text
            try:
                names = [str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            finally:
                con.close()
        except SQLITE_ERRORS:
            return False
        return looks_like_nsys(names)

    def explain(self, path: Path) -> str:
        def check(path: Path) -> None:
            with open_export(path):
                pass

        return refusal(check, path, "not an Nsight Systems export")

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        files = sorted(files)
        with ExitStack() as stack:
            opened = [(path, *stack.enter_context(open_export(path))) for path in files]
            try:
                starts = [_session_start_ns(con, tables) for _p, con, tables in opened]
                known = [s for s in starts if s is not None]
                procs: list[_Process] = []
                for i, (_path, con, tables) in enumerate(opened):
                    procs.extend(_processes(i, con, tables))
            except SQLITE_ERRORS as exc:
                raise TraceInputError(opened[0][0], f"truncated or corrupt SQLite database ({one_line(exc)})") from None
            for rank, proc in enumerate(procs):
                proc.rank = rank
            _pid_table(ctx, procs, files[0])
            for i, (path, con, tables) in enumerate(opened):
                start = starts[i]
                offset = start - min(known) if start is not None else 0
                reader = _FileReader(path, con, tables, [p for p in procs if p.file_index == i], ctx, i, offset)
                try:
                    reader.run()
                except SQLITE_ERRORS as exc:
                    raise TraceInputError(path, f"truncated or corrupt SQLite database ({one_line(exc)})") from None
                reader.finish(starts[i])
            # on success only: after an error the ingest rolls back, which drops them (a statement
            # in the aborted transaction would hide the error)
            ctx.con.execute("DROP TABLE nsys_pid_rank").fetchall()
            ctx.con.execute("DROP TABLE IF EXISTS nsys_sm").fetchall()
            ctx.con.execute("DROP TABLE IF EXISTS nsys_ctx").fetchall()


def _session_start_ns(con: sqlite3.Connection, tables: dict[str, set[str]]) -> int | None:
    if "utcEpochNs" not in tables.get("TARGET_INFO_SESSION_START_TIME", set()):
        return None
    row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) and row[0] > 0 else None


def _pids(con: sqlite3.Connection, tables: dict[str, set[str]], sources: Sequence[tuple[str, str]]) -> Counter[int]:
    rows: Counter[int] = Counter()
    for table, col in sources:
        if table in tables and col in tables[table]:
            for pid, n in con.execute(f"SELECT {_pid_sql(col)}, count(*) FROM {table} "
                                      f"WHERE typeof({col}) = 'integer' GROUP BY 1").fetchall():
                rows[int(pid)] += int(n)
    return rows


def _processes(file_index: int, con: sqlite3.Connection, tables: dict[str, set[str]]) -> list[_Process]:
    """The ranks of one export: its processes with device work, else those with host rows, else
    one process standing for the empty capture."""
    device = _pids(con, tables, [(t, "globalPid") for t in _DEVICE_TABLES])
    host = _pids(con, tables, [(_RUNTIME, "globalTid"), (_NVTX, "globalTid"), (_SYNC, "globalPid")])
    if device:
        procs = [_Process(file_index, pid) for pid in sorted(device)]
        procs[0].host_only = {pid: n for pid, n in sorted(host.items()) if pid not in device}
        return procs
    if host:
        return [_Process(file_index, pid) for pid in sorted(host)]
    return [_Process(file_index, None)]


def _joined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Batches of the same columns as one (a column of mixed dtypes becomes an object column)."""
    import numpy as np  # imported on use: other formats do not load NumPy

    if len(parts) == 1:
        return parts[0]
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def _pid_table(ctx: IngestContext, procs: list[_Process], source: Path) -> None:
    import numpy as np  # imported on use: other formats do not load NumPy

    create_temp_table(ctx.con, "nsys_pid_rank", {
        "file": np.array([p.file_index for p in procs], dtype=np.int64),
        "pid": np.array([p.pid if p.pid is not None else -1 for p in procs], dtype=np.int64),
        "rank": np.array([p.rank for p in procs], dtype=np.int64),
    }, source=source)


class _FileReader:
    """The rows of one export, for its processes (ranks)."""

    def __init__(self, path: Path, con: sqlite3.Connection, tables: dict[str, set[str]], procs: list[_Process],
                 ctx: IngestContext, file_index: int, offset_ns: int) -> None:
        self.path, self.sq, self.tables, self.procs, self.ctx = path, con, tables, procs, ctx
        self.params = {"run_id": ctx.run_id, "file": file_index, "offset_ns": offset_ns}
        self.file_index = file_index
        self.read: Counter[int | None] = Counter()
        self.gpus = self._gpus()
        self.placements = self._placements()
        self.devices = self._device_map()

    # -- device properties ---------------------------------------------------------------------

    def _gpus(self) -> list[dict[str, Any]]:
        if "TARGET_INFO_GPU" not in self.tables:
            return []
        cur = self.sq.execute("SELECT * FROM TARGET_INFO_GPU")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def _placements(self) -> set[tuple[int, int | None, int]]:
        """(pid, contextId or None, CUDA device id) of every kernel, copy and memset: which devices
        each process used, and through which contexts (read once, for devices and sync records)."""
        out: set[tuple[int, int | None, int]] = set()
        for table in _DEVICE_TABLES:
            if table in self.tables:
                ctx = "contextId" if "contextId" in self.tables[table] else "NULL"
                out |= {(int(p), c if isinstance(c, int) else None, int(d)) for p, c, d in self.sq.execute(
                    f"SELECT DISTINCT {_pid_sql('globalPid')}, {ctx}, deviceId FROM {table} "
                    "WHERE typeof(globalPid) = 'integer' AND typeof(deviceId) = 'integer'").fetchall()}
        return out

    def _device_map(self) -> dict[tuple[int, int], dict[str, Any]]:
        """(pid, CUDA device id) → its TARGET_INFO_GPU row, for the devices that ran work."""
        used = {(p, d) for p, _c, d in self.placements}
        by_id = {g.get("id"): g for g in self.gpus}
        cuda_to_gpu: dict[tuple[int, int], Any] = {}
        if {"gpuId", "cudaId", "pid"} <= self.tables.get("TARGET_INFO_CUDA_DEVICE", set()):
            cuda_to_gpu = {(int(p), int(c)): g for g, c, p in self.sq.execute(
                "SELECT gpuId, cudaId, pid FROM TARGET_INFO_CUDA_DEVICE "
                "WHERE typeof(pid) = 'integer' AND typeof(cudaId) = 'integer'").fetchall()}
        out: dict[tuple[int, int], dict[str, Any]] = {}
        for pid, dev in used:
            gpu = by_id.get(cuda_to_gpu[(pid, dev)]) if (pid, dev) in cuda_to_gpu else None
            if gpu is None:
                matches = [g for g in self.gpus if g.get("cuDevice") == dev]
                gpu = matches[0] if len(matches) == 1 else (self.gpus[0] if len(self.gpus) == 1 else None)
            out[(pid, dev)] = gpu or {}
        return out

    def _context_table(self) -> None:
        """TEMP table nsys_ctx: (file, pid, contextId) → the CUDA device its kernels, copies and
        memsets ran on (sync records say device 0 whatever their context); a context seen on two
        devices is left out."""
        import numpy as np  # imported on use: other formats do not load NumPy

        rows = sorted((p, c, d) for p, c, d in self.placements if c is not None)
        self.ctx.con.execute("CREATE OR REPLACE TEMP TABLE nsys_ctx (file BIGINT, pid BIGINT, context BIGINT, "
                             "device INTEGER)").fetchall()
        if rows:
            insert_batch(self.ctx.con, "nsys_ctx", {
                "file": np.full(len(rows), self.file_index, dtype=np.int64),
                "pid": np.array([r[0] for r in rows], dtype=np.int64),
                "context": np.array([r[1] for r in rows], dtype=np.int64),
                "device": np.array([r[2] for r in rows], dtype=np.int64)},
                select="SELECT file, pid, context, TRY_CAST(device AS INTEGER) AS device FROM batch "
                       "QUALIFY count(*) OVER (PARTITION BY file, pid, context) = 1", source=self.path)

    def _sm_table(self) -> None:
        import numpy as np  # imported on use: other formats do not load NumPy

        keys = sorted(self.devices)

        def num(key: str) -> list[float]:
            v = [self.devices[k].get(key) for k in keys]
            return [float(x) if isinstance(x, int) and x > 0 else float("nan") for x in v]

        self.ctx.con.execute("CREATE OR REPLACE TEMP TABLE nsys_sm (file BIGINT, pid BIGINT, device BIGINT, "
                             "sm_count DOUBLE, warp DOUBLE)").fetchall()
        if keys:
            batch = {"file": np.full(len(keys), self.file_index, dtype=np.int64),
                     "pid": np.array([k[0] for k in keys], dtype=np.int64),
                     "device": np.array([k[1] for k in keys], dtype=np.int64),
                     "sm_count": np.array(num("smCount")), "warp": np.array(num("threadsPerWarp"))}
            insert_batch(self.ctx.con, "nsys_sm", batch,
                         select="SELECT file, pid, device, CASE WHEN isnan(sm_count) THEN NULL ELSE sm_count END "
                                "AS sm_count, CASE WHEN isnan(warp) THEN NULL ELSE warp END AS warp FROM batch",
                         source=self.path)

    # -- events --------------------------------------------------------------------------------

    def run(self) -> None:
        self._sm_table()
        self._context_table()
        t = self.tables
        if _KERNEL in t:
            self._copy(_kernel_query(t), _KERNEL_COLS, "device_activity", _KERNELS)
        if _MEMCPY in t:
            self._copy(_copy_query(t), _COPY_COLS, "device_activity", _COPIES)
        if _MEMSET in t:
            self._copy(_memset_query(t), _MEMSET_COLS, "device_activity", _MEMSETS)
        if _RUNTIME in t:
            self._copy(_runtime_query(t), _RUNTIME_COLS, "host_events", _RUNTIMES)
        if _SYNC in t:
            self._copy(_sync_query(t), _SYNC_COLS, "host_events", _SYNCS)
            if _RUNTIME in t:
                self.ctx.con.execute(_SYNC_BY_API, {"run_id": self.ctx.run_id}).fetchall()
        if _NVTX in t:
            self._copy(_nvtx_query(t), _NVTX_COLS, "host_events", _NVTXS)

    def _copy(self, query: str, cols: Sequence[str], table: str, select: str) -> None:
        """Rows of ``query`` into ``table`` through ``select``: fetched a quarter batch at a time
        (SQLite's row tuples are the transient that costs memory) and turned into NumPy columns in
        a read-ahead thread while DuckDB inserts the previous batch."""
        import numpy as np  # imported on use: other formats do not load NumPy

        def produce() -> Iterator[dict[str, Any]]:
            cur = self.sq.execute(query)
            try:
                parts: list[dict[str, Any]] = []
                n = 0
                while rows := cur.fetchmany(_FETCH_ROWS):
                    parts.append(row_arrays(cols, rows, {}))
                    n += len(rows)
                    del rows
                    if n >= _BATCH:
                        yield _joined(parts)
                        parts, n = [], 0
                if parts:
                    yield _joined(parts)
            finally:
                cur.close()

        for batch in prefetch(produce()):
            pids = batch["pid"]
            if pids.dtype == np.int64:
                values, counts = np.unique(pids, return_counts=True)
                self.read.update(dict(zip(values.tolist(), counts.tolist())))
            else:
                self.read.update(p if isinstance(p, int) else None for p in pids.tolist())
            n_rows = len(pids)
            insert_batch(self.ctx.con, table, batch, select=select, params=self.params, source=self.path)
            del batch, pids
            self.ctx.progress(n_rows, 0)

    # -- per-process facts ---------------------------------------------------------------------

    def _metadata(self) -> dict[str, str]:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if {"name", "value"} <= self.tables.get(table, set()):
                return {str(n): str(v) for n, v in self.sq.execute(f"SELECT name, value FROM {table}").fetchall()}
        return {}

    def _command(self) -> str | None:
        """The profiled command line (``META_DATA_CAPTURE`` ``PROCESS_0:COMMAND`` and its
        arguments), values of secret-looking options masked; environment variables are never read."""
        if not {"name", "value"} <= self.tables.get("META_DATA_CAPTURE", set()):
            return None
        rows = dict(self.sq.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:COMMAND' "
                                    "OR name LIKE 'PROCESS_0:ARGUMENT_%'").fetchall())
        if "PROCESS_0:COMMAND" not in rows:
            return None
        args = [str(rows[k]) for k in sorted((k for k in rows if str(k).startswith("PROCESS_0:ARGUMENT_")),
                                             key=lambda k: int(k.rsplit("_", 1)[1]) if k.rsplit("_", 1)[1].isdigit() else 0)]
        return " ".join(redact_args([str(rows["PROCESS_0:COMMAND"]), *args]))[:2000]

    def _process_names(self) -> dict[int, str]:
        if not {"pid", "name"} <= self.tables.get("PROCESSES", set()):
            return {}
        pids = [p.pid for p in self.procs if p.pid is not None]
        if not pids:
            return {}
        marks = ", ".join("?" * len(pids))
        return {int(p): str(n) for p, n in self.sq.execute(
            f"SELECT pid, name FROM PROCESSES WHERE pid IN ({marks})", pids).fetchall() if isinstance(p, int)}

    def _graph_launches(self) -> Counter[int]:
        if "globalPid" not in self.tables.get(_GRAPH, set()):
            return Counter()
        return _pids(self.sq, self.tables, [(_GRAPH, "globalPid")])

    def finish(self, session_start_ns: int | None) -> None:
        con, ctx = self.ctx.con, self.ctx
        meta = self._metadata()
        command = self._command()
        names = self._process_names()
        graphs = self._graph_launches()
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0
        for proc in self.procs:
            params = {"run_id": ctx.run_id, "rank": proc.rank}
            first_ns, last_ns, n_kept = rank_span(con, ctx.run_id, proc.rank)
            n_read = self.read[proc.pid] + sum(self.read[p] for p in proc.host_only)
            if proc is self.procs[0]:
                n_read += self.read[None]  # rows without an integer process id: not stored
            devices = [int(r[0]) for r in con.execute(
                """SELECT DISTINCT device FROM device_activity
                   WHERE run_id = $run_id AND rank = $rank AND device IS NOT NULL ORDER BY 1""", params).fetchall()]
            for dev in devices:
                ctx.add_device_info(_device_info(proc.rank, dev, self.devices.get((proc.pid or -1, dev), {})))
            ctx.add_rank(RankInfo(
                rank=proc.rank, rank_source="process", path=self.path, runtime="cuda",
                runtime_version=None,
                metadata={
                    "format": "nsys",
                    "pid": proc.pid,
                    "process_name": names.get(proc.pid) if proc.pid is not None else None,
                    "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
                    "export_schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
                    "export_meta_data": meta,
                    "command": command,
                    "host_only_processes": proc.host_only,
                    "graph_launches_traced_whole": graphs.get(proc.pid, 0) if proc.pid is not None else 0,
                    "gpus_listed": len(self.gpus),
                },
                n_trace_events=n_read, n_python_events=0, n_flow_events=0,
                n_other_skipped=max(0, n_read - int(n_kept or 0)),
                first_ns=first_ns, last_ns=last_ns,
                captured_at_unix_s=session_start_ns / 1e9 if session_start_ns is not None else None,
            ))
        whole = sum(graphs.values())
        if whole:
            ctx.warnings.append(
                f"{self.path.name}: {whole:,} CUDA graph launches were traced as whole graphs "
                "(nsys --cuda-graph-trace=graph, the default): the kernels inside them are not in the export, so "
                "kernel time is undercounted; capture with --cuda-graph-trace=node")
        ctx.progress(0, size)


_SECRET_WORD = re.compile(r"(?i)(key|token|secret|passw|credential|auth)")


def redact_args(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of every secret-looking option masked: ``--api-key X``,
    ``--hf-token=X``, ``PASSWORD=X``."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append("***")
            hide_next = False
            continue
        hide_next = False
        name, eq, _value = arg.partition("=")
        if _SECRET_WORD.search(name):
            if eq:
                out.append(f"{name}=***")
                continue
            hide_next = arg.startswith("-")
        out.append(arg)
    return out


def _device_info(rank: int, device: int, gpu: dict[str, Any]) -> DeviceInfo:
    """device_meta for CUDA device ``device`` of ``rank`` from its TARGET_INFO_GPU row (may be empty)."""

    def i(key: str) -> int | None:
        v = gpu.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < (1 << 63) else None

    major, minor = i("computeMajor"), gpu.get("computeMinor") if isinstance(gpu.get("computeMinor"), int) else None
    warps, warp = i("maxWarpsPerSm"), i("threadsPerWarp")
    clock, bandwidth = i("clockRate"), i("memoryBandwidth")
    name = gpu.get("name") if isinstance(gpu.get("name"), str) and gpu.get("name") else None
    return DeviceInfo(
        rank=rank, device=device, name=name, vendor="nvidia",
        arch=f"sm_{major}{minor or 0}" if major is not None else None,
        compute_units=i("smCount"), warp_size=warp, memory_bytes=i("totalMemory"),
        compute_major=major, compute_minor=minor, max_threads_per_block=i("maxThreadsPerBlock"),
        max_threads_per_cu=warps * warp if warps and warp else None,
        regs_per_block=i("maxRegistersPerBlock"), regs_per_cu=i("maxRegistersPerSm"),
        shared_mem_per_block_bytes=i("maxShmemPerBlock"), shared_mem_per_cu_bytes=i("maxShmemPerSm"),
        shared_mem_per_block_optin_bytes=i("maxShmemPerBlockOptin"), device_type="GPU",
        clock_mhz=clock / 1e6 if clock else None,
        memory_bandwidth_gbps=bandwidth / 1e9 if bandwidth else None,
        properties={"source": "nsys TARGET_INFO_GPU" if gpu else "nsys (no TARGET_INFO_GPU row)",
                    **{k: gpu.get(k) for k in ("id", "cuDevice", "busLocation", "uuid", "chipName", "l2CacheSize",
                                               "asyncEngines", "maxBlocksPerSm") if k in gpu}},
    )
