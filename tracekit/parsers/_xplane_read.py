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
  plane, or names starting with ``$``) are only counted, as Kineto's ``python_function`` are;
  which events they are is decided on metadata ids read from the serialized XSpace by the C
  helper ``_xplane_wire`` (protobuf's per-element wrappers cost ~0.15 s per 800k events).
* ``/host:metadata`` → ``xla_module_meta``: each compiled module with its entry signature.
* plane stats (peak TFLOP/s and HBM GB/s on TPU; clock, core count, memory bandwidth on GPU) →
  ``device_meta``.

All per-event columns are gathered per line with list comprehensions over the protobuf objects and
inserted into DuckDB as NumPy arrays; names, costs and categories are joined in SQL.
"""

from __future__ import annotations

import gc
import gzip
import json
import operator
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np
from google.protobuf.message import DecodeError

from tracekit.errors import TraceInputError
from tracekit.parsers._io import GZIP_MAGIC
from tracekit.parsers.base import DeviceInfo, IngestContext, RankInfo
from tracekit.parsers.proto import hlo_subset_pb2, xplane_pb2

try:  # C helper built by setup.py when a compiler is present; else protobuf's wrappers
    from tracekit.parsers import _xplane_wire as _wire
except ImportError:  # pragma: no cover - depends on the build
    _wire = None  # type: ignore[assignment]

_encode_json = msgspec.json.Encoder().encode
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
    """Parse one ``.xplane.pb`` / ``.xplane.pb.gz``; raise TraceInputError with the reason."""
    return read_xspace_raw(path)[0]


def read_xspace_raw(path: Path) -> tuple[xplane_pb2.XSpace, bytes]:
    """:func:`read_xspace`, also returning the serialized (decompressed) bytes."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw:
        raise TraceInputError(path, "empty file")
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            reason = "truncated gzip" if isinstance(exc, EOFError) else f"corrupt gzip data ({exc})"
            raise TraceInputError(path, reason) from None
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
    return space, raw


def _wire_line_ids(raw: bytes | None) -> list[list[np.ndarray]] | None:
    """The metadata ids of each line's events, per plane, read from the wire format by the C
    helper (~10 ms instead of ~0.15 s through protobuf's wrappers for 800k events); None when
    the helper is not built or the bytes are not at hand."""
    if raw is None or _wire is None:
        return None
    try:
        ids_bytes, planes = _wire.event_metadata_ids(raw)
    except ValueError:
        return None
    ids = np.frombuffer(ids_bytes, dtype=np.int64)
    out: list[list[np.ndarray]] = []
    at = 0
    for counts in planes:
        per_line = []
        for n in counts:
            per_line.append(ids[at : at + n])
            at += n
        out.append(per_line)
    return out


def stat_value(st: xplane_pb2.XStat, stat_names: dict[int, str]) -> Any:
    """The Python value of one stat: interned strings resolved, compressed strings inflated."""
    kind = st.WhichOneof("value")
    if kind == "ref_value":
        return stat_names.get(st.ref_value, "")
    if kind == "compressed_str_value":
        data = st.compressed_str_value
        for wbits in (47, -15):  # gzip/zlib auto-detect, then raw deflate
            try:
                return zlib.decompress(data, wbits).decode("utf-8", "replace")
            except zlib.error:
                continue
        return data.hex()
    if kind is None:
        return None
    return getattr(st, kind)


def _stats(stats: Iterable[xplane_pb2.XStat], stat_names: dict[int, str]) -> dict[str, Any]:
    return {stat_names.get(st.metadata_id, str(st.metadata_id)): stat_value(st, stat_names) for st in stats}


def _json_safe(d: dict[str, Any]) -> str:
    """Stats as compact JSON text; bytes values (serialized protos) become a size note."""
    if any(type(v) is bytes for v in d.values()):
        d = {k: (f"<{len(v)} bytes>" if type(v) is bytes else v) for k, v in d.items()}
    return _encode_json(d).decode()


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
# Column batches → DuckDB


@dataclass
class _Columns:
    """Column lists of one target table, flushed to DuckDB as NumPy arrays."""

    names: tuple[str, ...]
    data: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data = {n: [] for n in self.names}

    def __len__(self) -> int:
        return len(self.data[self.names[0]])

    def extend(self, **cols: list[Any]) -> None:
        n = len(next(iter(cols.values())))
        for name in self.names:
            col = cols.get(name)
            self.data[name].extend(col if col is not None else [None] * n)

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, values in self.data.items():
            if name in _INT_COLUMNS and all(v is not None for v in values):
                out[name] = np.fromiter(values, dtype=np.int64, count=len(values))
            else:
                out[name] = np.array(values, dtype=object)
        return out

    def clear(self) -> None:
        for values in self.data.values():
            values.clear()


_INT_COLUMNS = {"start_ps", "dur_ps", "metadata_id"}

_DEVICE_COLS = (
    "device", "stream", "category", "metadata_id", "start_ps", "dur_ps", "device_offset_ps",
    "device_duration_ps", "correlation_id", "kernel_details", "hlo_op", "hlo_module",
    "program_id", "memcpy_bytes", "tid", "args",
)
_HOST_COLS = ("pid", "tid", "category", "metadata_id", "device", "start_ps", "dur_ps", "args")

_FLUSH_ROWS = 200_000

_INSERT_DEVICE = """
INSERT INTO device_activity (run_id, rank, device, stream, category, name, start_ns, dur_ns,
    correlation_id, trace_category, pid, tid, grid_x, grid_y, grid_z, block_x, block_y, block_z,
    registers_per_thread, shared_mem_bytes, est_occupancy_pct, bytes, kind, device_start_ns,
    device_dur_ns, op_metadata_id, hlo_module, hlo_category, program_id, flops, model_flops,
    bytes_accessed, hbm_bytes, args)
SELECT $run_id, $rank, b.device, b.stream,
    CASE WHEN b.category = 'stream'
         THEN CASE WHEN m.name ILIKE 'memcpy%' OR b.memcpy_bytes IS NOT NULL THEN 'memcpy'
                   WHEN m.name ILIKE 'memset%' THEN 'memset' ELSE 'kernel' END
         ELSE b.category END,
    coalesce(nullif(m.display_name, ''), m.name, ''),
    CAST(round(b.start_ps / 1000) AS BIGINT), CAST(round(b.dur_ps / 1000) AS BIGINT),
    TRY_CAST(b.correlation_id AS BIGINT), 'xplane:' || $line_kind, $plane, b.tid,
    TRY_CAST(regexp_extract(b.kernel_details, 'grid:(\\d+),(\\d+),(\\d+)', 1) AS INTEGER),
    TRY_CAST(regexp_extract(b.kernel_details, 'grid:(\\d+),(\\d+),(\\d+)', 2) AS INTEGER),
    TRY_CAST(regexp_extract(b.kernel_details, 'grid:(\\d+),(\\d+),(\\d+)', 3) AS INTEGER),
    TRY_CAST(regexp_extract(b.kernel_details, 'block:(\\d+),(\\d+),(\\d+)', 1) AS INTEGER),
    TRY_CAST(regexp_extract(b.kernel_details, 'block:(\\d+),(\\d+),(\\d+)', 2) AS INTEGER),
    TRY_CAST(regexp_extract(b.kernel_details, 'block:(\\d+),(\\d+),(\\d+)', 3) AS INTEGER),
    TRY_CAST(nullif(regexp_extract(b.kernel_details, 'regs:(\\d+)', 1), '') AS INTEGER),
    coalesce(
        TRY_CAST(nullif(regexp_extract(b.kernel_details, 'group_mem:(\\d+)', 1), '') AS BIGINT),
        TRY_CAST(nullif(regexp_extract(b.kernel_details, 'shm:(\\d+)', 1), '') AS BIGINT),
        TRY_CAST(nullif(regexp_extract(b.kernel_details, 'static_shared:(\\d+)', 1), '') AS BIGINT)
          + coalesce(TRY_CAST(nullif(regexp_extract(b.kernel_details, 'dynamic_shared:(\\d+)', 1), '')
                              AS BIGINT), 0)),
    TRY_CAST(nullif(regexp_extract(b.kernel_details, 'occ_pct:([0-9.]+)', 1), '') AS DOUBLE),
    TRY_CAST(b.memcpy_bytes AS BIGINT), b.hlo_op,
    CAST(round(TRY_CAST(b.device_offset_ps AS DOUBLE) / 1000) AS BIGINT),
    CAST(round(TRY_CAST(b.device_duration_ps AS DOUBLE) / 1000) AS BIGINT),
    b.metadata_id, coalesce(b.hlo_module, m.hlo_module), m.hlo_category,
    coalesce(CAST(b.program_id AS VARCHAR), m.program_id), m.flops, m.model_flops,
    m.bytes_accessed, m.hbm_read_bytes + m.hbm_write_bytes, b.args
FROM batch b LEFT JOIN plane_meta m ON m.metadata_id = b.metadata_id
"""

_INSERT_HOST = """
INSERT INTO host_events (run_id, rank, pid, tid, category, trace_category, name, start_ns, dur_ns,
    correlation_id, device, args)
SELECT $run_id, $rank, b.pid, b.tid, b.category, 'xplane:' || b.category,
    coalesce(nullif(m.display_name, ''), m.name, ''),
    CAST(round(b.start_ps / 1000) AS BIGINT), CAST(round(b.dur_ps / 1000) AS BIGINT),
    TRY_CAST(json_extract_string(b.args, '$.correlation_id') AS BIGINT), b.device, b.args
FROM batch b LEFT JOIN plane_meta m ON m.metadata_id = b.metadata_id
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
    def __init__(
        self, space: xplane_pb2.XSpace, path: Path, rank: int, ctx: IngestContext, raw: bytes | None = None
    ) -> None:
        self.space = space
        self.raw = raw  # the serialized XSpace: event ids are read from it without wrappers
        self._wire_ids: list[list[np.ndarray]] | None = None
        self._plane_index = 0
        self.path = path
        self.rank = rank
        self.ctx = ctx
        self.con: duckdb.DuckDBPyConnection = ctx.con
        self.params: dict[str, Any] = {"run_id": ctx.run_id, "rank": rank}
        self.host = space.hostnames[0] if space.hostnames else _HOST_SUFFIX.sub("", path.name)
        self.n_total = self.n_python = self.n_skipped = 0
        self.has_device_planes = any(_plane_device(p.name) for p in space.planes)
        self.task_env: dict[str, Any] = {}

    # -- driver -------------------------------------------------------------------------------

    def run(self) -> None:
        # Hundreds of thousands of short-lived protobuf wrappers: the cyclic GC only costs time.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._run()
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run(self) -> None:
        for index, plane in enumerate(self.space.planes):
            self._plane_index = index
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            dev = _plane_device(plane.name)
            if plane.name == "Task Environment":
                self.task_env = _stats(plane.stats, names)
            elif plane.name == "/host:metadata":
                self._modules(plane, names)
            elif dev is not None:
                self._device_plane(plane, names, dev)
            elif plane.name in _PYTHON_PLANES and not self.ctx.python_events:
                n = sum(len(line.events) for line in plane.lines)
                self.n_total += n
                self.n_python += n
            elif plane.name in _PYTHON_PLANES:
                self._host_plane(plane, names, python_plane=True)
            elif plane.name.startswith("/host:") and plane.name not in _SKIPPED_HOST_PLANES:
                self._host_plane(plane, names)
            else:
                n = sum(len(line.events) for line in plane.lines)
                self.n_total += n
                self.n_skipped += n
        self._finish()

    def _finish(self) -> None:
        span = self.con.execute(
            """SELECT min(s), max(e), sum(n) FROM (
                 SELECT min(start_ns) s, max(start_ns + dur_ns) e, count(*) n FROM device_activity
                   WHERE run_id = $run_id AND rank = $rank
                 UNION ALL
                 SELECT min(start_ns), max(start_ns + dur_ns), count(*) FROM host_events
                   WHERE run_id = $run_id AND rank = $rank)""",
            self.params,
        ).fetchall()[0]
        first_ns, last_ns, n_kept = span if span else (None, None, 0)
        start = self.task_env.get("profile_start_time")  # Unix ns, an integer stat: keep it exact
        unix_start_ns = start if isinstance(start, int) and start > 10**17 else None
        captured = unix_start_ns / 1e9 if unix_start_ns else None
        meta: dict[str, Any] = {
            "hostnames": list(self.space.hostnames),
            "errors": list(self.space.errors)[:20],
            "warnings": list(self.space.warnings)[:20],
            "planes": [p.name for p in self.space.planes],
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

    def _scan(self, name: str, arrays: dict[str, Any], sql: str, params: dict[str, Any] | None = None) -> None:
        """Run ``sql`` with the NumPy columns ``arrays`` visible to DuckDB as table ``name``."""
        self.con.register(name, arrays)
        try:
            self.con.execute(sql, params or {}).fetchall()
        finally:
            self.con.unregister(name)

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
            self._scan("meta_arrays", name_cols, "CREATE OR REPLACE TEMP TABLE plane_meta AS SELECT * FROM meta_arrays")
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
        self._scan("meta_arrays", arrays, "CREATE OR REPLACE TEMP TABLE plane_meta AS SELECT * FROM meta_arrays")

    # -- device planes ------------------------------------------------------------------------

    def _device_plane(self, plane: xplane_pb2.XPlane, names: dict[int, str], dev: tuple[str, int, str | None]) -> None:
        kind, index, sub = dev
        plane_stats = _stats(plane.stats, names)
        self._add_device(kind, index, sub, plane.name, plane_stats)
        self._register_meta(plane, names, with_costs=True)
        self.con.execute(
            """INSERT INTO xla_op_costs
               SELECT $run_id, $rank, $device, metadata_id, coalesce(nullif(display_name, ''), name),
                      name, hlo_category, program_id, flops, model_flops, bytes_accessed,
                      raw_bytes_accessed, hbm_read_bytes, hbm_write_bytes, memory_breakdown,
                      shape_with_layout, tf_op, deduplicated_name, source
               FROM plane_meta
               WHERE hlo_category IS NOT NULL OR flops IS NOT NULL OR bytes_accessed IS NOT NULL""",
            {**self.params, "device": index},
        ).fetchall()  # consume the result: DuckDB refuses register() while one is pending
        device_rows = _Columns(_DEVICE_COLS)
        span_rows = _Columns(_HOST_COLS)
        for line in plane.lines:
            events = line.events
            self.n_total += len(events)
            if not events:
                continue
            line_name = line.name or line.display_name
            stream = _STREAM_LINE.match(line_name)
            if line_name in _OP_LINES or stream is not None:
                category = _OP_LINES.get(line_name, "stream")
                if stream is not None:
                    suffix = (stream.group(2) or "").lower()
                    category = "memcpy" if "memcpy" in suffix else "memset" if "memset" in suffix else (
                        "kernel" if suffix in ("kernel", "compute") else "stream")
                self._device_line(line, names, index, category, stream.group(1) if stream else line_name, device_rows)
                self._flush_device(device_rows, plane.name, line_name)
            elif line_name in _DEVICE_SPAN_LINES:
                self._span_line(line, names, plane.name, _DEVICE_SPAN_LINES[line_name], index, span_rows)
            else:
                self.n_skipped += len(events)
        self._flush_host(span_rows)

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

    def _device_line(
        self, line: xplane_pb2.XLine, names: dict[int, str], device: int, category: str, stream: str,
        out: _Columns,
    ) -> None:
        events = _timed(line.events)
        self.n_skipped += len(line.events) - len(events)
        base_ps = line.timestamp_ns * 1000
        n = len(events)
        wanted = ("device_offset_ps", "device_duration_ps", "correlation_id", "kernel_details",
                  "hlo_op", "hlo_module", "program_id", "memcpy_details")
        per_stat: dict[str, list[Any]] = {k: [None] * n for k in wanted}
        args: list[str | None] = [None] * n
        for i, e in enumerate(events):
            if not e.stats:
                continue
            st = _stats(e.stats, names)
            for k in wanted:
                if k in st:
                    per_stat[k][i] = st[k]
            extra = {k: v for k, v in st.items() if k not in wanted}
            if extra:
                args[i] = _json_safe(extra)
        memcpy = [_memcpy_bytes(v) for v in per_stat.pop("memcpy_details")]
        out.extend(
            device=[device] * n,
            stream=[stream] * n,
            category=[category] * n,
            metadata_id=[e.metadata_id for e in events],
            start_ps=[base_ps + e.offset_ps for e in events],
            dur_ps=[e.duration_ps for e in events],
            memcpy_bytes=memcpy,
            tid=[line.name] * n,
            args=args,
            **{k: [None if v is None else str(v) for v in vals] if k in ("program_id",) else vals
               for k, vals in per_stat.items()},
        )

    def _flush(self, rows: _Columns, sql: str, params: dict[str, Any]) -> None:
        """Insert the buffered rows with one vectorised scan, report progress, empty the buffer."""
        if not len(rows):
            return
        self._scan("batch", rows.arrays(), sql, params)
        self.ctx.progress(len(rows), 0)
        rows.clear()

    def _flush_device(self, rows: _Columns, plane_name: str, line_name: str) -> None:
        self._flush(rows, _INSERT_DEVICE, {**self.params, "plane": plane_name, "line_kind": line_name})

    def _span_line(
        self, line: xplane_pb2.XLine, names: dict[int, str], pid: str, category: str, device: int | None,
        out: _Columns,
    ) -> None:
        events = _timed(line.events)
        self.n_skipped += len(line.events) - len(events)
        base_ps = line.timestamp_ns * 1000
        n = len(events)
        out.extend(
            pid=[pid] * n,
            tid=[line.display_name or line.name] * n,
            category=[category] * n,
            metadata_id=[e.metadata_id for e in events],
            device=[device] * n,
            start_ps=[base_ps + e.offset_ps for e in events],
            dur_ps=[e.duration_ps for e in events],
            args=[_json_safe(_stats(e.stats, names)) if e.stats else None for e in events],
        )
        if len(out) >= _FLUSH_ROWS:
            self._flush_host(out)

    def _flush_host(self, rows: _Columns) -> None:
        self._flush(rows, _INSERT_HOST, self.params)

    # -- host planes --------------------------------------------------------------------------

    def _line_ids(self) -> list[np.ndarray] | None:
        """The wire-read metadata ids of the current plane's lines (None: use the wrappers)."""
        if self._wire_ids is None:
            self._wire_ids = _wire_line_ids(self.raw) or []
        if self._plane_index < len(self._wire_ids):
            per_plane = self._wire_ids[self._plane_index]
            if len(per_plane) == len(self.space.planes[self._plane_index].lines):
                return per_plane
        return None

    def _host_plane(self, plane: xplane_pb2.XPlane, names: dict[int, str], python_plane: bool = False) -> None:
        self._register_meta(plane, names, with_costs=False)
        python_meta = [mid for mid, em in plane.event_metadata.items() if python_plane or em.name.startswith("$")]
        # With ctx.python_events the Python-tracer events are stored (category 'python'), not dropped.
        python_ids = np.array([] if self.ctx.python_events else python_meta, dtype=np.int64)
        hlo_op_stat = {k for k, v in names.items() if v == "hlo_op"}
        rows = _Columns(_HOST_COLS)
        cpu_ops = _Columns(_DEVICE_COLS)
        wire = self._line_ids() if len(python_ids) else None
        for line_index, line in enumerate(plane.lines):
            all_events = line.events
            self.n_total += len(all_events)
            events: Sequence[xplane_pb2.XEvent] = all_events
            if len(python_ids):
                mids = wire[line_index] if wire is not None else None
                if mids is None or len(mids) != len(all_events):
                    mids = np.fromiter(map(_METADATA_ID, all_events), dtype=np.int64, count=len(all_events))
                keep = np.flatnonzero(~np.isin(mids, python_ids))
                self.n_python += len(all_events) - len(keep)
                if len(keep) < len(all_events):
                    events = [all_events[i] for i in keep.tolist()]
            timed = _timed(events)
            self.n_skipped += len(events) - len(timed)
            events = timed
            if not events:
                continue
            tid = line.display_name or line.name
            if not self.has_device_planes and hlo_op_stat:
                # CPU-only capture: XLA ops executed by the CPU client are the device activity.
                is_op = [any(s.metadata_id in hlo_op_stat for s in e.stats) for e in events]
                ops = [e for e, f in zip(events, is_op) if f]
                if ops:
                    self._cpu_ops(ops, line, names, tid, cpu_ops)
                    events = [e for e, f in zip(events, is_op) if not f]
            base_ps = line.timestamp_ns * 1000
            n = len(events)
            rows.extend(
                pid=[plane.name] * n,
                tid=[tid] * n,
                category=["traceme"] * n,
                metadata_id=[e.metadata_id for e in events],
                start_ps=[base_ps + e.offset_ps for e in events],
                dur_ps=[e.duration_ps for e in events],
                args=[_json_safe(_stats(e.stats, names)) if e.stats else None for e in events],
            )
            if len(rows) >= _FLUSH_ROWS:
                self._flush_host(rows)
        self._flush_host(rows)
        self._flush_device(cpu_ops, plane.name, "XLA CPU ops")
        self._classify_host_events(plane.name)
        if self.ctx.python_events and python_meta:
            self.con.execute(
                """UPDATE host_events SET category = 'python', trace_category = 'xplane:python'
                   WHERE run_id = $run_id AND rank = $rank AND pid = $plane AND category = 'traceme'
                     AND ($python_plane OR starts_with(name, '$'))""",
                {**self.params, "plane": plane.name, "python_plane": python_plane},
            ).fetchall()

    def _cpu_ops(self, ops: list[xplane_pb2.XEvent], line: xplane_pb2.XLine, names: dict[int, str], tid: str,
                 out: _Columns) -> None:
        if not any(d.rank == self.rank and d.device == 0 for d in self.ctx.devices):
            self.ctx.add_device_info(DeviceInfo(
                rank=self.rank, device=0, name="CPU (XLA)", vendor="cpu", arch=None, compute_units=None,
                warp_size=None, memory_bytes=None, compute_major=None, compute_minor=None,
                max_threads_per_block=None, max_threads_per_cu=None, regs_per_block=None,
                regs_per_cu=None, shared_mem_per_block_bytes=None, shared_mem_per_cu_bytes=None,
                shared_mem_per_block_optin_bytes=None, properties={"plane": "/host:CPU"},
                device_type="CPU"))
        base_ps = line.timestamp_ns * 1000
        stats = [_stats(e.stats, names) for e in ops]
        n = len(ops)
        out.extend(
            device=[0] * n,
            stream=[tid] * n,
            category=["kernel"] * n,
            metadata_id=[e.metadata_id for e in ops],
            start_ps=[base_ps + e.offset_ps for e in ops],
            dur_ps=[e.duration_ps for e in ops],
            hlo_op=[s.get("hlo_op") for s in stats],
            hlo_module=[s.get("hlo_module") for s in stats],
            program_id=[None if s.get("program_id") is None else str(s.get("program_id")) for s in stats],
            tid=[tid] * n,
            args=[_json_safe({k: v for k, v in s.items() if k not in ("hlo_op", "hlo_module", "program_id")}) for s in stats],
        )

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
        rows = []
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
            rows.append((self.ctx.run_id, self.rank, em.name, function, m.group(2) if m else None,
                         module_id, signature, params_json, result, size))
        if rows:
            self.con.executemany(
                "INSERT INTO xla_module_meta VALUES (" + ", ".join(["?"] * 10) + ")", rows
            )


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


_MEMCPY_SIZE = re.compile(r"size:(\d+)")


def _memcpy_bytes(details: Any) -> int | None:
    if not isinstance(details, str):
        return None
    m = _MEMCPY_SIZE.search(details)
    return int(m.group(1)) if m else None
