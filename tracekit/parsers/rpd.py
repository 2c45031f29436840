"""RPD: the SQLite database of ROCm/rocmProfileData's ``rpd_tracer`` (``.rpd``, ``.db``, ``.rpd.gz``).

Not to be confused with rocprofv3's *rocpd* database (``rocpd_kernel_dispatch`` & co., schema 3):
both use ``rocpd_*`` table names, but RPD (``rocpd_metadata.schema_version = 2``) is told apart
by its ``rocpd_op`` table. A gzipped file is decompressed, streaming, into a temporary file
(``$TRACEKIT_TMPDIR`` or the system temp dir) because SQLite can only open a file; every file is
opened read-only (``mode=ro&immutable=1``).

What the tracer writes, and where it goes (verified on the corpus traces):

* ``rocpd_op`` holds one row per operation that ran on a GPU (``gpuId`` is already the HIP
  device index: the tracer subtracts the first GPU's KFD node id). ``opType`` is roctracer's op
  string; rows go to ``device_activity`` by it:

  - ``KernelExecution`` → ``kernel`` (kernels launched directly: ``hipLaunchKernel``,
    ``hipExtModuleLaunchKernel``, ...);
  - ``Task`` with a kernel name → ``kernel``. These are the kernels of **HIP graphs**
    (roctracer's ``HIP_OP_DISPATCH_KIND_TASK``): ``rocpd_op.description_id`` names the kernel,
    ``rocpd_api_ops`` links each of them to its ``hipGraphLaunch`` call, and they have no
    ``rocpd_kernelapi`` row, which is why RPD's own ``kernel`` view (an inner join on
    ``rocpd_kernelapi``) leaves them out. In the vLLM trace: 7,720 ``Task`` ops from
    20 ``hipGraphLaunch`` calls, next to 1,228 ``KernelExecution`` ops;
  - ``Copy*`` (``CopyHostToDevice`` ...) and the CLR source's ``Memcpy`` → ``memcpy``, bytes from
    ``rocpd_copyapi.size`` through ``rocpd_api_ops`` (the tracer keeps the size as 32 bits;
    copies made by a HIP graph have no copyapi row, so their bytes are NULL);
  - ``FillBuffer`` (``hipMemset*``) and ``Memset*`` → ``memset``;
  - anything else (``Barrier``, ``Marker``, a ``Task`` without a kernel name) is not device work
    that tracekit stores: counted in ``n_other_skipped`` and listed per opType in the rank's
    metadata (``skipped_op_types``).

  ``correlation_id`` is the id of the ``rocpd_api`` row that made the op (``rocpd_api_ops``),
  the same number that the host-side call carries. ``stream`` is ``rocpd_kernelapi.stream`` /
  ``rocpd_copyapi.stream``, for graph ops the ``stream =`` in ``hipGraphLaunch``'s args, else
  the queue id. ``name`` is the op's description (the kernel name; it equals
  ``rocpd_kernelapi``'s name where both exist), for copies the opType; ``trace_category`` is
  the opType; ``kind`` is the copy direction spelled as the rocprofv3 readers spell it
  (``MEMORY_COPY_HOST_TO_DEVICE``, ``..._DEVICE_TO_HOST``, ``..._DEVICE_TO_DEVICE``).
* Launch geometry comes from ``rocpd_kernelapi``. The tracer copies the launch API's own
  arguments: ``hipLaunchKernel``/``hipModuleLaunchKernel``/cooperative launches give the grid in
  **workgroups**, ``hipExtModuleLaunchKernel``/``hipHccModuleLaunchKernel`` (Tensile/hipBLASLt
  GEMMs) in **work-items** (globalWorkSize); the latter are divided by the workgroup size,
  rounding up, so ``grid_*`` is always in workgroups. ``groupSegmentSize`` is the launch's
  dynamic LDS bytes (→ ``shared_mem_bytes``); ``privateSegmentSize`` is always written as 0 by
  the tracer, so ``scratch_bytes`` stays NULL unless it is non-zero.
* ``rocpd_api`` → ``host_events``: HIP (and HSA/RCCL) calls → category ``runtime``, trace
  category ``hip`` (RPD's domain; a newer file's ``domain_id`` string when present),
  ``correlation_id`` = api id. roctx ranges and marks (api name ``UserMarker``, the message in
  args; PyTorch's ``record_function`` ranges arrive this way) → ``annotation`` named by the
  message, with ``ext_autogradapi.seq`` as ``sequence_number`` when that extension is present.
  The tracer's own overhead records (``hcc_activity_callback``, ``*Table::writeRows``,
  ``rpdflush``, ``run_to_completion``) are counted as skipped (``skipped_api_names``).
* ``rocpd_monitor`` (sclk samples ...) stays out of the event tables: one summary per
  (deviceType, deviceId, monitorType) in the rank's metadata. Its ``deviceId`` is SMI's device
  numbering, not necessarily ``gpuId`` (in the vLLM trace SMI device 0 is the busy one while the
  ops ran on gpuId 2), so it is not attached to a device.
* RPD has no agent table: one ``device_meta`` row per gpuId that ran ops, vendor ``amd``, name
  ``AMD GPU (RPD gpuId N)``, arch only when the kernel names state it (a Tensile ``_ISA90a_``
  token or a ``gfx942``-style token, one target only), else NULL.
* Ranks: processes (``rocpd_api.pid``) of all files, sorted by pid, numbered 0..n-1; an op
  belongs to the process of the call that made it. ``n_trace_events`` counts ``rocpd_op`` and
  ``rocpd_api`` rows; timestamps are the tracer's clock (CLOCK_MONOTONIC ns), no wall clock.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from tracekit.errors import ConfigError, TraceInputError
from tracekit.limits import (
    INFLATE_FREE_BYTES,
    check_inflation,
    check_temp_space,
    max_inflate_ratio,
    temp_dir,
)
from tracekit.parsers._io import GZIP_MAGIC, ReadCounter, iter_decompressed, read_head
from tracekit.parsers.base import DeviceInfo, IngestContext, Parser, RankInfo
from tracekit.parsers.explain import refusal
from tracekit.parsers.rocpd import SQLITE_ERRORS, one_line, sqlite_text
from tracekit.parsers.store_writer import create_temp_table, insert_batch, rank_span, row_arrays

SQLITE_MAGIC = b"SQLite format 3\x00"
_CREATE_OP = re.compile(rb'CREATE TABLE\s+(?:IF NOT EXISTS\s+)?["`\[]?rocpd_op["`\]]?\s*\(', re.IGNORECASE)
_SNIFF_GZ_BYTES = 256 << 10  # the schema pages of an RPD file lie in its first ~60 KiB
_BATCH = 50_000

#: Tables and the columns of them this reader uses (lower case; SQLite names are case-blind).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "rocpd_string": ("id", "string"),
    "rocpd_op": ("id", "gpuid", "queueid", "start", "end", "description_id", "optype_id"),
    "rocpd_api": ("id", "pid", "tid", "start", "end", "apiname_id", "args_id"),
    "rocpd_api_ops": ("api_id", "op_id"),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "rocpd_kernelapi": (
        "api_ptr_id", "stream", "gridx", "gridy", "gridz", "workgroupx", "workgroupy",
        "workgroupz", "groupsegmentsize", "privatesegmentsize", "kernelname_id",
    ),
    "rocpd_copyapi": (
        "api_ptr_id", "stream", "size", "width", "height", "kind", "dst", "src", "dstdevice",
        "srcdevice", "sync", "pinned",
    ),
    "rocpd_kernelcodeobject": ("id", "vgpr", "sgpr"),
    "ext_autogradapi": ("api_ptr_id", "seq", "op_id", "sizes", "input_op_ids"),
    "rocpd_monitor": ("devicetype", "deviceid", "monitortype", "start", "end", "value"),
    "rocpd_metadata": ("tag", "value"),
}
NOT_RPD = "SQLite file is neither rocpd nor RPD (no rocpd_kernel_dispatch / rocpd_op table)"

#: Launch APIs whose rocpd_kernelapi grid is the global size in work-items (the tracer copies
#: ``globalWorkSize``); every other launch API's grid is already in workgroups.
_WORKITEM_GRID_APIS = ("hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel")
_RUNTIME_NAME = re.compile(r"^(hip|hsa_|hsa[A-Z]|rccl|nccl|cuda|cu[A-Z])")
_COPY_DIR = re.compile(r"^Copy(Host|Device)To(Host|Device)")
_ARCH_TOKENS = (re.compile(r"_ISA(\d{2,4}[a-f]?)_"), re.compile(r"(?<![A-Za-z0-9])gfx(\d{3,4}[a-f]?)(?![A-Za-z0-9])"))


def _text(v: object) -> str:
    """A SQLite value where text belongs, as text: a BLOB (a hostile or damaged file) decoded
    with replacement characters, NULL as ``""``."""
    if v is None:
        return ""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else str(v)


def op_category(op_type: str, description: str | None) -> str | None:
    """``kernel`` | ``memcpy`` | ``memset`` for an RPD opType, or None (not stored)."""
    if op_type == "KernelExecution" or op_type.startswith("KernelExecution"):
        return "kernel"
    if op_type == "Task":  # HIP-graph kernel nodes; a Task without a kernel name is no kernel
        return "kernel" if description else None
    if op_type.startswith(("Copy", "Memcpy")):
        return "memcpy"
    if op_type == "FillBuffer" or op_type.startswith(("Memset", "Fill")):
        return "memset"
    return None


def api_category(name: str, domain: str | None) -> str | None:
    """``runtime`` | ``annotation`` for an rocpd_api row, or None (tracer overhead: skipped)."""
    if domain == "roctx" or name == "UserMarker" or name.startswith("roctx"):
        return "annotation"
    if domain == "hip" or _RUNTIME_NAME.match(name):
        return "runtime"
    return None


def _copy_kind(op_type: str) -> str | None:
    m = _COPY_DIR.match(op_type)
    return f"MEMORY_COPY_{m.group(1).upper()}_TO_{m.group(2).upper()}" if m else None


# ---------------------------------------------------------------------------------------------
# Opening


def _sqlite_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro&immutable=1"


def _gzip_size_hint(path: Path) -> int:
    """The decompressed size a gzip file states (ISIZE, its last 4 bytes: the size mod 2^32)."""
    try:
        with path.open("rb") as f:
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    except OSError:
        return 0


def _gunzip_to(path: Path, out_path: Path) -> None:
    """Decompress ``path`` into ``out_path``, under the shared decompression-ratio cap; a full
    disk is one line naming TRACEKIT_TMPDIR (the partial file is removed with its directory)."""
    read = ReadCounter()
    written = 0
    try:
        with out_path.open("wb") as out:
            for block in iter_decompressed(path, strict=True, counter=read):
                written += len(block)
                check_inflation(path, read.n, written)
                out.write(block)
    except OSError as exc:
        out_path.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ConfigError(
                "TRACEKIT_TMPDIR",
                f"{out_path.parent.parent}: no space left while decompressing {path} "
                f"({written:,} bytes written); point TRACEKIT_TMPDIR at a larger directory",
            ) from None
        raise TraceInputError(path, f"cannot decompress to {out_path.parent}: {exc.strerror or exc}") from None
    except BaseException:
        out_path.unlink(missing_ok=True)
        raise


@contextmanager
def open_rpd(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``path`` (gunzipped into a temporary file first if gzip: in
    ``TRACEKIT_TMPDIR``, checked to exist, be a writable directory and have room for the size
    the gzip trailer states)."""
    with ExitStack() as stack:
        head = read_head(path, len(SQLITE_MAGIC))
        if not head.startswith(SQLITE_MAGIC):
            kind = "gzip data" if _is_gzip(path) else "file"
            raise TraceInputError(path, f"not an SQLite database ({kind} without the SQLite header); "
                                        "RPD traces are rpd_tracer SQLite files")
        db = path
        if _is_gzip(path):
            parent = temp_dir()
            # ISIZE of a corrupt file can be anything: no more than the ratio cap lets through
            ratio = max_inflate_ratio()
            cap = max(INFLATE_FREE_BYTES, ratio * path.stat().st_size) if ratio else 1 << 32
            check_temp_space(min(_gzip_size_hint(path), cap), parent)
            try:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tracekit-rpd-", dir=parent))
            except OSError as exc:
                raise ConfigError("TRACEKIT_TMPDIR", f"{parent}: cannot create a temp directory "
                                                     f"({exc.strerror or exc})") from None
            db = Path(tmp) / "trace.rpd"
            _gunzip_to(path, db)
        try:
            con = sqlite3.connect(_sqlite_uri(db), uri=True)
        except SQLITE_ERRORS as exc:
            raise TraceInputError(path, f"cannot open SQLite database: {one_line(exc)}") from None
        con.text_factory = sqlite_text
        stack.callback(con.close)
        yield con


def _is_gzip(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError:
        return False


def _schema(con: sqlite3.Connection) -> dict[str, set[str]]:
    """Table/view name (lower case) → its column names (lower case)."""
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()]
    out: dict[str, set[str]] = {}
    for name in names:
        if name.lower() in _REQUIRED or name.lower() in _OPTIONAL or name.lower().startswith("rocpd_"):
            cols = con.execute(f'PRAGMA table_info("{name}")').fetchall()
            out[name.lower()] = {str(c[1]).lower() for c in cols}
    return out


def check_schema(path: Path, con: sqlite3.Connection) -> dict[str, set[str]]:
    """The file's RPD tables and columns; TraceInputError naming what is missing otherwise."""
    try:
        tables = _schema(con)
    except SQLITE_ERRORS as exc:
        raise TraceInputError(path, f"truncated or corrupt SQLite database ({one_line(exc)})") from None
    if "rocpd_op" not in tables:
        if any(t.startswith("rocpd_kernel_dispatch") for t in tables):
            raise TraceInputError(path, "this is a rocprofv3 rocpd database, not an RPD (rpd_tracer) trace")
        raise TraceInputError(path, NOT_RPD)
    missing_tables = [t for t in _REQUIRED if t not in tables]
    if missing_tables:
        raise TraceInputError(path, f"RPD file lacks required tables: {', '.join(missing_tables)}")
    for table, cols in (*_REQUIRED.items(), *_OPTIONAL.items()):
        if table in tables:
            lacking = [c for c in cols if c not in tables[table]]
            if lacking:
                raise TraceInputError(path, f"RPD table {table} lacks columns: {', '.join(lacking)}")
    return tables


# ---------------------------------------------------------------------------------------------
# SQLite queries (the per-row joins run in SQLite; conversions run in DuckDB)


def _empty(cols: Sequence[str]) -> str:
    return "(SELECT " + ", ".join(f"NULL AS {c}" for c in cols) + " WHERE 0)"


def _op_query(tables: dict[str, set[str]]) -> str:
    kapi = "rocpd_kernelapi" if "rocpd_kernelapi" in tables else _empty(_OPTIONAL["rocpd_kernelapi"] + ("codeobject_id",))
    capi = "rocpd_copyapi" if "rocpd_copyapi" in tables else _empty(_OPTIONAL["rocpd_copyapi"])
    has_code = "rocpd_kernelcodeobject" in tables and "codeobject_id" in tables.get("rocpd_kernelapi", set())
    code_cols = "co.vgpr, co.sgpr" if has_code else "NULL, NULL"
    code_join = "LEFT JOIN rocpd_kernelcodeobject co ON co.id = k.codeObject_id AND k.codeObject_id > 0" if has_code else ""
    return f"""
SELECT o.id, o.gpuId, o.queueId, o.start, o."end", d.string, t.string,
       ao.api_id, a.pid, a.tid, an.string, aa.string,
       k.stream, k.gridX, k.gridY, k.gridZ, k.workgroupX, k.workgroupY, k.workgroupZ,
       k.groupSegmentSize, k.privateSegmentSize, kn.string, {code_cols},
       c.stream, c.size, c.width, c.height, c.kind, c.dst, c.src, c.dstDevice, c.srcDevice,
       c.sync, c.pinned
FROM rocpd_op o
LEFT JOIN rocpd_string d ON d.id = o.description_id
LEFT JOIN rocpd_string t ON t.id = o.opType_id
LEFT JOIN (SELECT op_id, min(api_id) AS api_id FROM rocpd_api_ops GROUP BY op_id) ao ON ao.op_id = o.id
LEFT JOIN rocpd_api a ON a.id = ao.api_id
LEFT JOIN rocpd_string an ON an.id = a.apiName_id
LEFT JOIN rocpd_string aa ON aa.id = a.args_id
LEFT JOIN {kapi} k ON k.api_ptr_id = ao.api_id
LEFT JOIN rocpd_string kn ON kn.id = k.kernelName_id
{code_join}
LEFT JOIN {capi} c ON c.api_ptr_id = ao.api_id
"""


_OP_COLS = (
    "op_id", "gpu", "queue", "start", "end", "description", "op_type",
    "api_id", "pid", "tid", "api_name", "api_args",
    "k_stream", "gx", "gy", "gz", "wx", "wy", "wz", "lds", "scratch", "k_name", "vgpr", "sgpr",
    "c_stream", "c_size", "c_width", "c_height", "c_kind", "c_dst", "c_src", "c_dstdev", "c_srcdev",
    "c_sync", "c_pinned",
)


def _api_query(tables: dict[str, set[str]]) -> str:
    args_table = "rocpd_string"
    if "domain_id" in tables["rocpd_api"] and "rocpd_ustring" in tables:
        args_table = "rocpd_ustring"  # newer tracers keep args in their own string table
    domain = "dm.string" if "domain_id" in tables["rocpd_api"] else "NULL"
    domain_join = "LEFT JOIN rocpd_string dm ON dm.id = a.domain_id" if domain != "NULL" else ""
    ag = "ext_autogradapi" in tables
    ag_cols = "g.seq, g.op_id, g.sizes, g.input_op_ids" if ag else "NULL, NULL, NULL, NULL"
    ag_join = "LEFT JOIN ext_autogradapi g ON g.api_ptr_id = a.id" if ag else ""
    return f"""
SELECT a.id, a.pid, a.tid, a.start, a."end", n.string, s.string, {domain}, {ag_cols}
FROM rocpd_api a
LEFT JOIN rocpd_string n ON n.id = a.apiName_id
LEFT JOIN {args_table} s ON s.id = a.args_id
{domain_join}
{ag_join}
"""


_API_COLS = ("api_id", "pid", "tid", "start", "end", "name", "args", "domain", "ag_seq", "ag_op_id",
             "ag_sizes", "ag_inputs")

# ---------------------------------------------------------------------------------------------
# DuckDB inserts

#: The batch rows every event SELECT reads, with their rank: only rows whose start and end are
#: integers and whose duration fits 64 bits (the others are not stored: n_other_skipped).
_FROM_TIMED_BATCH = """
FROM batch b LEFT JOIN rpd_pid_rank r ON r.pid = TRY_CAST(b.pid AS BIGINT)
WHERE b.category IS NOT NULL
  AND TRY_CAST(b.start AS BIGINT) IS NOT NULL
  AND TRY_CAST(TRY_CAST(b."end" AS HUGEINT) - TRY_CAST(b.start AS HUGEINT) AS BIGINT) IS NOT NULL
"""

_OPS = f"""
SELECT $run_id AS run_id, coalesce(r.rank, $default_rank) AS rank, TRY_CAST(b.gpu AS INTEGER) AS device,
    coalesce(nullif(CAST(b.k_stream AS VARCHAR), ''), nullif(CAST(b.c_stream AS VARCHAR), ''),
             nullif(regexp_extract(CAST(b.api_args AS VARCHAR), 'stream = (\\S+)', 1), ''),
             CAST(b.queue AS VARCHAR)) AS stream,
    b.category AS category,
    CASE WHEN b.category = 'kernel'
         THEN coalesce(nullif(CAST(b.description AS VARCHAR), ''), nullif(CAST(b.k_name AS VARCHAR), ''), b.op_type)
         ELSE b.op_type END AS name,
    TRY_CAST(b.start AS BIGINT) AS start_ns,
    -- end < start: dropped and counted by ingest
    TRY_CAST(TRY_CAST(b."end" AS HUGEINT) - TRY_CAST(b.start AS HUGEINT) AS BIGINT) AS dur_ns,
    TRY_CAST(b.api_id AS BIGINT) AS correlation_id, b.op_type AS trace_category,
    {", ".join(
        f"CASE WHEN b.category = 'kernel' AND TRY_CAST(b.{g} AS BIGINT) > 0 THEN TRY_CAST("
        f"CASE WHEN CAST(b.api_name AS VARCHAR) IN {_WORKITEM_GRID_APIS} AND TRY_CAST(b.{w} AS BIGINT) > 0 "
        f"THEN (TRY_CAST(b.{g} AS BIGINT) + TRY_CAST(b.{w} AS BIGINT) - 1) // TRY_CAST(b.{w} AS BIGINT) "
        f"ELSE TRY_CAST(b.{g} AS BIGINT) END AS INTEGER) END AS grid_{g[1]}"
        for g, w in (("gx", "wx"), ("gy", "wy"), ("gz", "wz"))
    )},
    {", ".join(
        f"CASE WHEN b.category = 'kernel' AND TRY_CAST(b.{w} AS BIGINT) > 0 THEN TRY_CAST(b.{w} AS INTEGER) END "
        f"AS block_{w[1]}"
        for w in ("wx", "wy", "wz")
    )},
    CASE WHEN b.category = 'kernel' THEN TRY_CAST(b.lds AS BIGINT) END AS shared_mem_bytes,
    CASE WHEN b.category = 'kernel' THEN nullif(TRY_CAST(b.scratch AS BIGINT), 0) END AS scratch_bytes,
    CASE WHEN b.category = 'kernel' THEN TRY_CAST(b.vgpr AS INTEGER) END AS vgpr_count,
    CASE WHEN b.category = 'kernel' THEN TRY_CAST(b.sgpr AS INTEGER) END AS sgpr_count,
    CASE WHEN b.category = 'kernel' THEN NULL
         WHEN coalesce(TRY_CAST(b.c_size AS BIGINT), 0) = 0
              AND TRY_CAST(b.c_width AS BIGINT) * TRY_CAST(b.c_height AS BIGINT) > 0
         THEN TRY_CAST(b.c_width AS BIGINT) * TRY_CAST(b.c_height AS BIGINT)
         ELSE TRY_CAST(b.c_size AS BIGINT) END AS bytes,
    b.kind AS kind, CAST(b.queue AS VARCHAR) AS queue_id,
    CASE WHEN b.category = 'kernel'
         THEN json_object('op_id', TRY_CAST(b.op_id AS BIGINT), 'gpuId', TRY_CAST(b.gpu AS BIGINT),
                          'api', CAST(b.api_name AS VARCHAR),
                          'graph_exec', nullif(regexp_extract(CAST(b.api_args AS VARCHAR), 'graphExec = (\\S+)', 1), ''),
                          'dynamic_lds_bytes', TRY_CAST(b.lds AS BIGINT))
         ELSE json_object('op_id', TRY_CAST(b.op_id AS BIGINT), 'gpuId', TRY_CAST(b.gpu AS BIGINT),
                          'api', CAST(b.api_name AS VARCHAR),
                          'graph_exec', nullif(regexp_extract(CAST(b.api_args AS VARCHAR), 'graphExec = (\\S+)', 1), ''),
                          'src', CAST(b.c_src AS VARCHAR), 'dst', CAST(b.c_dst AS VARCHAR),
                          'srcDevice', TRY_CAST(b.c_srcdev AS BIGINT), 'dstDevice', TRY_CAST(b.c_dstdev AS BIGINT),
                          'hip_memcpy_kind', TRY_CAST(b.c_kind AS BIGINT),
                          'sync', TRY_CAST(b.c_sync AS BIGINT), 'pinned', TRY_CAST(b.c_pinned AS BIGINT))
    END AS args
""" + _FROM_TIMED_BATCH

_API = """
SELECT $run_id AS run_id, coalesce(r.rank, $default_rank) AS rank, CAST(b.pid AS VARCHAR) AS pid,
    CAST(b.tid AS VARCHAR) AS tid, b.category AS category,
    coalesce(nullif(CAST(b.domain AS VARCHAR), ''), CASE b.category WHEN 'annotation' THEN 'roctx' ELSE 'hip' END)
        AS trace_category,
    CASE WHEN b.category = 'annotation' THEN coalesce(nullif(CAST(b.args AS VARCHAR), ''), CAST(b.name AS VARCHAR))
         ELSE CAST(b.name AS VARCHAR) END AS name,
    TRY_CAST(b.start AS BIGINT) AS start_ns,
    -- end < start: dropped and counted by ingest
    TRY_CAST(TRY_CAST(b."end" AS HUGEINT) - TRY_CAST(b.start AS HUGEINT) AS BIGINT) AS dur_ns,
    CASE WHEN b.category = 'runtime' THEN TRY_CAST(b.api_id AS BIGINT) END AS correlation_id,
    TRY_CAST(b.ag_seq AS BIGINT) AS sequence_number,
    CASE WHEN b.category = 'annotation'
         THEN json_object('api_id', TRY_CAST(b.api_id AS BIGINT), 'api', CAST(b.name AS VARCHAR),
                          'autograd_op_id', TRY_CAST(b.ag_op_id AS BIGINT),
                          'sizes', nullif(CAST(b.ag_sizes AS VARCHAR), ''),
                          'input_op_ids', nullif(CAST(b.ag_inputs AS VARCHAR), ''))
         WHEN nullif(CAST(b.args AS VARCHAR), '') IS NOT NULL
         THEN json_object('args', CAST(b.args AS VARCHAR))
    END AS args
""" + _FROM_TIMED_BATCH


# ---------------------------------------------------------------------------------------------


@dataclass
class _Process:
    """One rank: a process of one file."""

    file_index: int
    pid: int | None
    rank: int = 0
    n_read: int = 0
    skipped_ops: Counter[str] = field(default_factory=Counter)
    skipped_apis: Counter[str] = field(default_factory=Counter)
    op_types: Counter[str] = field(default_factory=Counter)


class RpdParser(Parser, format_name="rpd"):
    """Reads rpd_tracer SQLite files; a directory of them is one run, one rank per process."""

    suffixes = (".rpd", ".rpd.gz", ".db")

    def sniff(self, path: Path) -> bool:
        try:
            gz = _is_gzip(path)
            head = read_head(path, _SNIFF_GZ_BYTES if gz else len(SQLITE_MAGIC))
        except TraceInputError:
            return path.name.lower().endswith(".rpd.gz")  # let parse() say what is wrong
        if not head.startswith(SQLITE_MAGIC):
            return False
        if gz:
            return bool(_CREATE_OP.search(head)) or path.name.lower().endswith(".rpd.gz")
        try:
            con = sqlite3.connect(_sqlite_uri(path), uri=True)
            con.text_factory = sqlite_text
            try:
                rows = con.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND lower(name) = 'rocpd_op'"
                ).fetchall()
            finally:
                con.close()
        except SQLITE_ERRORS:
            return path.name.lower().endswith(".rpd")
        return bool(rows)

    def explain(self, path: Path) -> str:
        def check(path: Path) -> None:
            with open_rpd(path) as con:
                check_schema(path, con)

        return refusal(check, path, "not an RPD (rpd_tracer) trace")

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        files = sorted(files)
        with ExitStack() as stack:
            opened: list[tuple[Path, sqlite3.Connection, dict[str, set[str]]]] = []
            procs: list[_Process] = []
            for i, path in enumerate(files):
                con = stack.enter_context(open_rpd(path))
                tables = check_schema(path, con)
                try:
                    pids = [r[0] for r in con.execute("SELECT DISTINCT pid FROM rocpd_api ORDER BY pid").fetchall()]
                except SQLITE_ERRORS as exc:
                    raise TraceInputError(path, f"truncated or corrupt SQLite database ({one_line(exc)})") from None
                # a pid that is not a 64-bit integer (a hostile file) is no process of its own
                pids = [p for p in pids if isinstance(p, int) and -(1 << 63) <= p < (1 << 63)]
                if pids:
                    procs.extend(_Process(i, int(p)) for p in pids)
                else:
                    procs.append(_Process(i, None))
                opened.append((path, con, tables))
            procs.sort(key=lambda p: (p.pid if p.pid is not None else -1, p.file_index))
            for rank, proc in enumerate(procs):
                proc.rank = rank
            for i, (path, con, tables) in enumerate(opened):
                mine = [p for p in procs if p.file_index == i]
                try:
                    _FileReader(path, con, tables, mine, ctx).run()
                except SQLITE_ERRORS as exc:
                    raise TraceInputError(path, f"truncated or corrupt SQLite database ({one_line(exc)})") from None


class _FileReader:
    def __init__(
        self, path: Path, con: sqlite3.Connection, tables: dict[str, set[str]], procs: list[_Process],
        ctx: IngestContext,
    ) -> None:
        self.path, self.sq, self.tables, self.procs, self.ctx = path, con, tables, procs, ctx
        self.by_pid = {p.pid: p for p in procs}
        self.default = procs[0]  # ops whose call is not in rocpd_api go to the file's first process
        self.params = {"run_id": ctx.run_id, "default_rank": self.default.rank}

    def _proc(self, pid: Any) -> _Process:
        return self.by_pid.get(pid, self.default)

    def run(self) -> None:
        import numpy as np  # imported on use: other formats do not load NumPy

        con = self.ctx.con
        pid_rank = {
            "pid": np.array([p.pid if p.pid is not None else -1 for p in self.procs], dtype=np.int64),
            "rank": np.array([p.rank for p in self.procs], dtype=np.int64),
        }
        create_temp_table(con, "rpd_pid_rank", pid_rank, source=self.path)
        try:
            self._ops()
            self._apis()
        finally:
            con.execute("DROP TABLE IF EXISTS rpd_pid_rank").fetchall()
        self._finish()

    def _insert(self, table: str, batch: dict[str, np.ndarray], select: str) -> None:
        insert_batch(self.ctx.con, table, batch, select=select, params=self.params, source=self.path)

    def _ops(self) -> None:
        import numpy as np  # imported on use: other formats do not load NumPy

        cur = self.sq.execute(_op_query(self.tables))
        cats: dict[str, str | None] = {}
        while rows := cur.fetchmany(_BATCH):
            categories: list[str | None] = []
            kinds: list[str | None] = []
            for r in rows:
                op_type = _text(r[6])
                desc = r[5]
                cat = op_category(op_type, desc) if op_type == "Task" else cats.setdefault(op_type, op_category(op_type, desc))
                categories.append(cat)
                kinds.append(_copy_kind(op_type) if cat == "memcpy" else None)
                proc = self._proc(r[8])
                proc.n_read += 1
                proc.op_types[op_type] += 1
                if cat is None:
                    proc.skipped_ops[op_type] += 1
            arrays = row_arrays(_OP_COLS, rows, {"category": categories, "kind": kinds})
            arrays["op_type"] = np.array([_text(r[6]) for r in rows], dtype=object)
            self._insert("device_activity", arrays, _OPS)
            self.ctx.progress(len(rows), 0)

    def _apis(self) -> None:
        cur = self.sq.execute(_api_query(self.tables))
        cats: dict[tuple[str, str | None], str | None] = {}
        while rows := cur.fetchmany(_BATCH):
            categories: list[str | None] = []
            for r in rows:
                key = (_text(r[5]), None if r[7] is None else _text(r[7]))
                cat = cats[key] if key in cats else cats.setdefault(key, api_category(*key))
                categories.append(cat)
                proc = self._proc(r[1])
                proc.n_read += 1
                if cat is None:
                    proc.skipped_apis[key[0]] += 1
            self._insert("host_events", row_arrays(_API_COLS, rows, {"category": categories}), _API)
            self.ctx.progress(len(rows), 0)

    # -- per-file facts ------------------------------------------------------------------------

    def _metadata_table(self) -> dict[str, str]:
        if "rocpd_metadata" not in self.tables:
            return {}
        return {str(t): str(v) for t, v in self.sq.execute("SELECT tag, value FROM rocpd_metadata").fetchall()}

    def _monitor(self) -> list[dict[str, Any]]:
        if "rocpd_monitor" not in self.tables:
            return []
        rows = self.sq.execute(
            """SELECT deviceType, deviceId, monitorType, count(*), min(CAST(value AS REAL)),
                      max(CAST(value AS REAL)),
                      sum(CAST(value AS REAL) * ("end" - start)) / nullif(sum("end" - start), 0),
                      min(start), max("end")
               FROM rocpd_monitor GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"""
        ).fetchall()
        keys = ("device_type", "device_id", "monitor_type", "n_samples", "min", "max", "time_weighted_mean",
                "first_ns", "last_ns")
        return [dict(zip(keys, r)) for r in rows]

    def _arch_by_gpu(self) -> dict[int, str | None]:
        rows = self.sq.execute(
            """SELECT DISTINCT o.gpuId, d.string FROM rocpd_op o JOIN rocpd_string d ON d.id = o.description_id
               WHERE d.string LIKE '%ISA%' OR d.string LIKE '%gfx%'"""
        ).fetchall()
        found: dict[int, set[str]] = {}
        for gpu, name in rows:
            for pattern in _ARCH_TOKENS:
                for token in pattern.findall(str(name)):
                    found.setdefault(int(gpu), set()).add("gfx" + token.lower())
        return {g: (next(iter(s)) if len(s) == 1 else None) for g, s in found.items()}

    def _finish(self) -> None:
        con, ctx = self.ctx.con, self.ctx
        meta_table = self._metadata_table()
        monitor = self._monitor()
        archs = self._arch_by_gpu()
        version = meta_table.get("schema_version")
        extensions = sorted(t for t in self.tables if t.startswith("ext_"))
        for proc in self.procs:
            params = {"run_id": ctx.run_id, "rank": proc.rank}
            first_ns, last_ns, n_kept = rank_span(con, ctx.run_id, proc.rank)
            devices = [
                int(r[0]) for r in con.execute(
                    """SELECT DISTINCT device FROM device_activity
                       WHERE run_id = $run_id AND rank = $rank AND device IS NOT NULL ORDER BY 1""",
                    params,
                ).fetchall()
            ]
            for dev in devices:
                ctx.add_device_info(
                    DeviceInfo(
                        rank=proc.rank, device=dev, name=f"AMD GPU (RPD gpuId {dev})", vendor="amd",
                        arch=archs.get(dev), compute_units=None, warp_size=None, memory_bytes=None,
                        compute_major=None, compute_minor=None, max_threads_per_block=None,
                        max_threads_per_cu=None, regs_per_block=None, regs_per_cu=None,
                        shared_mem_per_block_bytes=None, shared_mem_per_cu_bytes=None,
                        shared_mem_per_block_optin_bytes=None, device_type="GPU",
                        properties={"source": "rpd", "gpuId": dev,
                                    "arch_from": "kernel names" if archs.get(dev) else None},
                    )
                )
            ctx.add_rank(
                RankInfo(
                    rank=proc.rank,
                    rank_source="process",
                    path=self.path,
                    schema_version=int(version) if version and version.isdigit() else None,
                    runtime="hip",
                    metadata={
                        "format": "rpd",
                        "pid": proc.pid,
                        "rpd_metadata": meta_table,
                        "op_types": dict(proc.op_types),
                        "skipped_op_types": dict(proc.skipped_ops),
                        "skipped_api_names": dict(proc.skipped_apis),
                        "monitor": monitor,
                        "extension_tables": extensions,
                    },
                    n_trace_events=proc.n_read,
                    n_python_events=0,
                    n_flow_events=0,
                    n_other_skipped=proc.n_read - int(n_kept or 0),
                    first_ns=first_ns,
                    last_ns=last_ns,
                    captured_at_unix_s=None,
                )
            )
        try:
            size = self.path.stat().st_size
        except OSError:
            size = 0
        ctx.progress(0, size)
