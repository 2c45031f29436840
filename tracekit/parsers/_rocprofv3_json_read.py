"""How :mod:`tracekit.parsers.rocprofv3_json` reads rocprofv3 results JSON (imported only when
such a file is ingested, so that other formats do not load msgspec). What is stored is described
in that module.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    import numpy as np

from tracekit.errors import TraceInputError
from tracekit.limits import InputLimitError, check_inflation, memory_budget_bytes
from tracekit.parsers._io import GZIP_MAGIC, ReadCounter, iter_decompressed
from tracekit.parsers.base import IngestContext, RankInfo
from tracekit.parsers.rocprofv3_csv import (
    ANNOTATION_DOMAINS,
    Agent,
    device_info,
    number_devices,
    pass_of,
    span,
)
from tracekit.parsers.store_writer import create_temp_table, insert_batch


class Handle(msgspec.Struct, gc=False):
    handle: int = 0


class Corr(msgspec.Struct, gc=False):
    internal: int = 0
    external: int = 0


class Dim3(msgspec.Struct, gc=False):
    x: int = 0
    y: int = 0
    z: int = 0


class DispatchInfo(msgspec.Struct, gc=False):
    agent_id: Handle = msgspec.field(default_factory=Handle)
    queue_id: Handle = msgspec.field(default_factory=Handle)
    kernel_id: int = 0
    dispatch_id: int = 0
    private_segment_size: int = 0
    group_segment_size: int = 0
    workgroup_size: Dim3 = msgspec.field(default_factory=Dim3)
    grid_size: Dim3 = msgspec.field(default_factory=Dim3)


class Record(msgspec.Struct, gc=False):
    """A buffer record of any kind (the fields tracekit uses; absent ones keep their default)."""

    kind: int = 0
    operation: int = 0
    thread_id: int = 0
    correlation_id: Corr = msgspec.field(default_factory=Corr)
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    dispatch_info: DispatchInfo | None = None
    stream_id: Handle | None = None
    dst_agent_id: Handle | None = None
    src_agent_id: Handle | None = None
    bytes: int | None = None


class CounterRecord(msgspec.Struct, gc=False):
    counter_id: Handle = msgspec.field(default_factory=Handle)
    value: float = 0.0


class DispatchData(msgspec.Struct, gc=False):
    correlation_id: Corr = msgspec.field(default_factory=Corr)
    dispatch_info: DispatchInfo = msgspec.field(default_factory=DispatchInfo)


class CounterCollection(msgspec.Struct, gc=False):
    dispatch_data: DispatchData = msgspec.field(default_factory=DispatchData)
    records: list[CounterRecord] = []
    thread_id: int = 0


class CallbackRecords(msgspec.Struct):
    counter_collection: list[CounterCollection] = []


class KindNames(msgspec.Struct):
    kind: str = ""
    operations: list[str] = []


class KeyValue(msgspec.Struct):
    key: int = 0
    value: str = ""


class Strings(msgspec.Struct):
    buffer_records: list[KindNames] = []
    callback_records: list[KindNames] = []
    marker_api: list[KeyValue] = []


class CounterInfo(msgspec.Struct):
    id: Handle = msgspec.field(default_factory=Handle)
    name: str = ""


class KernelSymbol(msgspec.Struct):
    kernel_id: int = 0
    kernel_name: str = ""
    formatted_kernel_name: str = ""
    truncated_kernel_name: str = ""
    demangled_kernel_name: str = ""
    sgpr_count: int | None = None
    arch_vgpr_count: int | None = None
    accum_vgpr_count: int | None = None


class ToolEntry(msgspec.Struct):
    """One process of ``rocprofiler-sdk-tool``."""

    metadata: dict[str, Any] = {}
    agents: list[dict[str, Any]] = []
    counters: list[CounterInfo] = []
    strings: Strings = msgspec.field(default_factory=Strings)
    kernel_symbols: list[KernelSymbol] = []
    callback_records: CallbackRecords = msgspec.field(default_factory=CallbackRecords)
    buffer_records: dict[str, list[Record]] = {}


class Results(msgspec.Struct):
    tool: list[ToolEntry] = msgspec.field(name="rocprofiler-sdk-tool")


_decode_results = msgspec.json.Decoder(Results).decode
_decode_any = msgspec.json.Decoder().decode


#: Peak memory of reading a results JSON per decompressed byte of it (the document itself, the
#: decoded structs, the column lists and NumPy arrays handed to DuckDB): 4.2 for a 310 MB file,
#: 5.0 for the 37.5 MB MI350 corpus file (1.6 MB gzip; 188 MB over the interpreter's baseline).
RSS_PER_BYTE = 4


def max_document_bytes() -> int:
    """The largest (decompressed) results JSON the memory budget allows (bytes)."""
    return memory_budget_bytes() // RSS_PER_BYTE


def _too_big(path: Path, size: int | None, limit: int) -> InputLimitError:
    what = f"{size:,} bytes" if size is not None else f"more than {limit:,} bytes"
    return InputLimitError(
        path,
        f"rocprofv3 results JSON decompresses to {what}; reading it whole needs about "
        f"{RSS_PER_BYTE}x that in memory, over TRACEKIT_MEMORY_LIMIT ({memory_budget_bytes():,} bytes): "
        "raise TRACEKIT_MEMORY_LIMIT, or use rocprofv3's rocpd or CSV output",
    )


def _read_whole(path: Path) -> bytearray:
    """The file's decompressed bytes, refused past :func:`max_document_bytes` before they are all
    read (a gzip bomb stops there), and past the shared decompression-ratio cap."""
    limit = max_document_bytes()
    try:
        with path.open("rb") as f:
            gz = f.read(2) == GZIP_MAGIC
        size = path.stat().st_size
    except OSError as exc:
        raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not gz and size > limit:
        raise _too_big(path, size, limit)
    data = bytearray()
    read = ReadCounter()
    for block in iter_decompressed(path, counter=read):
        data += block
        if gz:
            check_inflation(path, read.n, len(data))
        if len(data) > limit:
            raise _too_big(path, None, limit)
    return data


def _nesting_limit() -> int:
    """Levels of JSON nesting the decoder can take here (it shares Python's recursion limit)."""
    depth = 0
    frame: types.FrameType | None = sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return max(sys.getrecursionlimit() - depth, 0)


def _decode(path: Path) -> Results:
    """Decode the whole file (see the module docstring)."""
    data = _read_whole(path)
    if not data.strip():
        raise TraceInputError(path, "empty file")
    try:
        return _decode_results(data)
    except RecursionError:
        raise TraceInputError(path, f"JSON nesting deeper than {_nesting_limit()} levels") from None
    except msgspec.ValidationError as exc:
        try:
            top = _decode_any(data)
        except (msgspec.DecodeError, RecursionError):
            top = None
        if isinstance(top, dict) and "rocprofiler-sdk-tool" not in top:
            raise TraceInputError(
                path, "not a rocprofv3 results JSON (no rocprofiler-sdk-tool key)"
            ) from None
        raise TraceInputError(path, f"unexpected value in rocprofv3 results JSON: {_line(exc)}") from None
    except msgspec.DecodeError as exc:
        raise TraceInputError(path, f"truncated or malformed JSON ({_line(exc)})") from None


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _agents(entry: ToolEntry) -> tuple[dict[int, Agent], dict[int, int | None]]:
    """Agents by handle (GPU agents numbered as HIP devices), and each GPU's memory size."""
    by_handle: dict[int, Agent] = {}
    memory: dict[int, int | None] = {}
    for a in entry.agents:
        hid = a.get("id")
        handle = hid.get("handle") if isinstance(hid, dict) else None
        if not isinstance(handle, int):
            continue
        # rocprofiler_agent_type_t: 1 = CPU, 2 = GPU
        is_gpu = a.get("type") == 2
        props = {k.lower(): v for k, v in a.items() if k not in ("caches", "io_links", "mem_banks")}
        by_handle[handle] = Agent(
            node_id=a.get("node_id") if isinstance(a.get("node_id"), int) else None,
            logical_node_id=a.get("logical_node_id") if isinstance(a.get("logical_node_id"), int) else None,
            is_gpu=is_gpu,
            type_name="GPU" if is_gpu else "CPU",
            type_index=a.get("logical_node_type_id")
            if isinstance(a.get("logical_node_type_id"), int)
            else None,
            props=props,
        )
        # frame-buffer heaps (HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC/PRIVATE = 1/2) = device memory
        banks: list[int] = [
            b["size_in_bytes"]
            for b in a.get("mem_banks") or []
            if isinstance(b, dict)
            and b.get("heap_type") in (1, 2)
            and isinstance(b.get("size_in_bytes"), int)
        ]
        memory[handle] = sum(banks) if banks else None
    number_devices(list(by_handle.values()))
    return by_handle, memory


def _kind_name(names: list[KindNames], kind: int) -> str:
    return names[kind].kind if 0 <= kind < len(names) else f"KIND_{kind}"


def _op_name(names: list[KindNames], kind: int, op: int) -> str:
    if 0 <= kind < len(names) and 0 <= op < len(names[kind].operations):
        return names[kind].operations[op]
    return f"OPERATION_{op}"


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_BITS = {"BIGINT": 64, "INTEGER": 32}
#: ``skipped_records`` key of records whose timestamps do not fit a signed 64-bit ns count
_BAD_TIME = "timestamp out of range"


def _obj(values: list[Any], sql_type: str = "") -> np.ndarray[Any, Any]:
    """An object column; for an integer ``sql_type``, integers outside its range become NULL
    (a hostile file's 2^64 must not fail the cast in DuckDB)."""
    import numpy as np  # imported on use: other formats do not load NumPy

    bits = _BITS.get(sql_type)
    if bits is not None:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        values = [v if v is None or lo <= v <= hi else None for v in values]
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


class RocprofJsonReader:
    """Writes the processes of rocprofv3 results JSON files into the store (one rank each)."""

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        entries: list[tuple[Path, ToolEntry]] = []
        for p in files:
            results = _decode(p)
            if not results.tool:
                raise TraceInputError(
                    p, "rocprofv3 results JSON holds no process (rocprofiler-sdk-tool is empty)"
                )
            entries += [(p, e) for e in results.tool]
            ctx.progress(0, p.stat().st_size)

        def pid(item: tuple[Path, ToolEntry]) -> tuple[bool, int, str]:
            v = item[1].metadata.get("pid")
            return (not isinstance(v, int), v if isinstance(v, int) else 0, str(item[0]))

        for rank, (path, entry) in enumerate(sorted(entries, key=pid)):
            self._parse_entry(ctx, rank, path, entry)

    def _parse_entry(self, ctx: IngestContext, rank: int, path: Path, e: ToolEntry) -> None:
        con = ctx.con
        md = e.metadata
        pid = md.get("pid") if isinstance(md.get("pid"), int) else None
        spid = str(pid) if pid is not None else None
        agents, memory = _agents(e)
        names = e.strings.buffer_records
        kernel_names = {
            k.kernel_id: k.formatted_kernel_name
            or k.truncated_kernel_name
            or k.demangled_kernel_name
            or k.kernel_name
            for k in e.kernel_symbols
        }
        markers = {kv.key: kv.value for kv in e.strings.marker_api}
        symbols = {k.kernel_id: k for k in e.kernel_symbols}

        def dev(handle: Handle | None) -> int | None:
            a = agents.get(handle.handle) if handle is not None else None
            return a.device if a is not None and a.is_gpu else None

        def node(handle: Handle | None) -> int | None:
            a = agents.get(handle.handle) if handle is not None else None
            return a.node_id if a is not None else None

        dcols: dict[str, list[Any]] = {k: [] for k in _DEVICE_COLS}
        hcols: dict[str, list[Any]] = {k: [] for k in _HOST_COLS}
        n_records = n_skipped = 0
        skipped_kinds: dict[str, int] = {}
        for records in e.buffer_records.values():
            for r in records:
                n_records += 1
                kind = _kind_name(names, r.kind)
                start, end = r.start_timestamp, r.end_timestamp
                if start is None or end is None:
                    n_skipped += 1
                    skipped_kinds[kind] = skipped_kinds.get(kind, 0) + 1
                    continue
                if not (_I64_MIN <= start <= _I64_MAX and _I64_MIN <= end <= _I64_MAX
                        and _I64_MIN <= end - start <= _I64_MAX):
                    # -1 written as unsigned, 2^64 ...: no place on a timeline (the store's
                    # validation step drops and counts rows that end before they start)
                    n_skipped += 1
                    skipped_kinds[_BAD_TIME] = skipped_kinds.get(_BAD_TIME, 0) + 1
                    continue
                ext = r.correlation_id.external or None
                event = {"start_ns": start, "dur_ns": end - start, "correlation_id": r.correlation_id.internal,
                         "external_id": ext, "trace_category": kind, "tid": str(r.thread_id)}
                stream = str(r.stream_id.handle) if r.stream_id is not None else None
                if kind == "KERNEL_DISPATCH" and r.dispatch_info is not None:
                    di = r.dispatch_info
                    wg, grid = di.workgroup_size, di.grid_size
                    queue = str(di.queue_id.handle)
                    a = agents.get(di.agent_id.handle)
                    sym = symbols.get(di.kernel_id)
                    _append(
                        dcols,
                        **event,
                        device=dev(di.agent_id),
                        stream=stream or queue,
                        category="kernel",
                        name=kernel_names.get(di.kernel_id, f"kernel_{di.kernel_id}"),
                        grid_x=_blocks(grid.x, wg.x),
                        grid_y=_blocks(grid.y, wg.y),
                        grid_z=_blocks(grid.z, wg.z),
                        block_x=wg.x,
                        block_y=wg.y,
                        block_z=wg.z,
                        shared_mem_bytes=di.group_segment_size,
                        args=msgspec.json.encode(
                            {
                                "agent_handle": di.agent_id.handle,
                                "agent_node_id": a.node_id if a is not None else None,
                                "kernel_id": di.kernel_id,
                            }
                        ).decode(),
                        dispatch_id=di.dispatch_id,
                        queue_id=queue,
                        scratch_bytes=di.private_segment_size,
                        vgpr_count=sym.arch_vgpr_count if sym else None,
                        accum_vgpr_count=sym.accum_vgpr_count if sym else None,
                        sgpr_count=sym.sgpr_count if sym else None,
                    )
                elif kind == "MEMORY_COPY":
                    op = _op_name(names, r.kind, r.operation)
                    _append(
                        dcols,
                        **event,
                        device=dev(r.dst_agent_id)
                        if dev(r.dst_agent_id) is not None
                        else dev(r.src_agent_id),
                        stream=stream,
                        category="memcpy",
                        name=op,
                        bytes=r.bytes,
                        kind=op,
                        args=msgspec.json.encode(
                            {
                                "src_agent_handle": r.src_agent_id.handle if r.src_agent_id else None,
                                "dst_agent_handle": r.dst_agent_id.handle if r.dst_agent_id else None,
                                "src_agent_node_id": node(r.src_agent_id),
                                "dst_agent_node_id": node(r.dst_agent_id),
                            }
                        ).decode(),
                    )
                elif kind.endswith(("_API", "_API_EXT")):
                    op = _op_name(names, r.kind, r.operation)
                    annotation = kind in ANNOTATION_DOMAINS
                    name = markers.get(r.correlation_id.internal, op) if kind.startswith("MARKER_") else op
                    _append(
                        hcols,
                        **event,
                        pid=spid,
                        category="annotation" if annotation else "runtime",
                        name=name,
                    )
                else:  # memory allocation, scratch memory, page migration, PC samples ...
                    n_skipped += 1
                    skipped_kinds[kind] = skipped_kinds.get(kind, 0) + 1
        self._insert(ctx, path, rank, spid, dcols, hcols)
        n_counter_values = self._insert_counters(ctx, path, rank, e, kernel_names, dev, pass_of(path))
        ctx.progress(n_records, 0)
        first_ns, last_ns = span(con, ctx.run_id, rank)
        node_md = md.get("node")
        host = node_md.get("hostname") if isinstance(node_md, dict) else None
        host = host if isinstance(host, str) else None
        ctx.add_rank(
            RankInfo(
                rank=rank,
                rank_source="process",
                path=path,
                host=host or None,
                runtime="hip",
                metadata={
                    "format": "rocprofv3 json",
                    "pid": pid,
                    **{k: v for k, v in md.items() if k != "pid"},
                    "skipped_records": skipped_kinds,
                    "counter_values": n_counter_values,
                },
                n_trace_events=n_records,
                n_python_events=0,
                n_flow_events=0,
                n_other_skipped=n_skipped,
                first_ns=first_ns,
                last_ns=last_ns,
            )
        )
        for handle, a in sorted(
            agents.items(), key=lambda kv: kv[1].device if kv[1].device is not None else -1
        ):
            if a.is_gpu and a.device is not None:
                ctx.add_device_info(device_info(rank, a, memory.get(handle)))

    @staticmethod
    def _insert(
        ctx: IngestContext,
        path: Path,
        rank: int,
        pid: str | None,
        dcols: dict[str, list[Any]],
        hcols: dict[str, list[Any]],
    ) -> None:
        params = {"run_id": ctx.run_id, "rank": rank, "pid": pid}
        if dcols["start_ns"]:
            insert_batch(ctx.con, "device_activity", {k: _obj(v, _DEVICE_COLS[k]) for k, v in dcols.items()},
                         select=_DEVICE_SELECT, params=params, source=path)
        if hcols["start_ns"]:
            insert_batch(ctx.con, "host_events", {k: _obj(v, _HOST_COLS[k]) for k, v in hcols.items()},
                         select=_HOST_SELECT, params=params, source=path)

    @staticmethod
    def _insert_counters(
        ctx: IngestContext,
        path: Path,
        rank: int,
        e: ToolEntry,
        kernel_names: dict[int, str],
        dev: Any,
        pass_name: str | None,
    ) -> int:
        """One row per (dispatch, counter): the sum of its per-instance records; ``pass_name`` is
        the ``pmc_N``/``pass_N`` folder the file sits in, if any."""
        import numpy as np  # imported on use: other formats do not load NumPy

        counter_names = {c.id.handle: c.name for c in e.counters}
        disp: dict[str, list[Any]] = {"i": [], "corr": [], "dispatch": [], "kernel": [], "device": []}
        rec_i: list[int] = []
        rec_counter: list[int] = []
        rec_value: list[float] = []
        def fit(v: int) -> int | None:
            return v if _I64_MIN <= v <= _I64_MAX else None

        for i, cc in enumerate(e.callback_records.counter_collection):
            di = cc.dispatch_data.dispatch_info
            disp["i"].append(i)
            disp["corr"].append(fit(cc.dispatch_data.correlation_id.internal))
            disp["dispatch"].append(fit(di.dispatch_id))
            disp["kernel"].append(kernel_names.get(di.kernel_id))
            disp["device"].append(dev(di.agent_id))
            for rec in cc.records:
                handle = rec.counter_id.handle
                if not _I64_MIN <= handle <= _I64_MAX:
                    continue  # no counter has such an id: the record is not stored
                rec_i.append(i)
                rec_counter.append(handle)
                rec_value.append(rec.value)
        if not rec_i:
            return 0
        ids = sorted(i for i in counter_names if _I64_MIN <= i <= _I64_MAX)
        con = ctx.con
        create_temp_table(con, "rp_json_disp", {k: _obj(v) for k, v in disp.items()}, source=path)
        create_temp_table(
            con, "rp_json_names",
            {"counter_id": np.asarray(ids, dtype=np.int64), "name": _obj([counter_names[i] for i in ids])},
            source=path,
        )
        try:
            return insert_batch(
                con, "counter_values",
                {
                    "i": np.asarray(rec_i, dtype=np.int64),
                    "counter_id": np.asarray(rec_counter, dtype=np.int64),
                    "value": np.asarray(rec_value, dtype=np.float64),
                },
                select="""SELECT $run_id AS run_id, $rank AS rank, CAST(d.device AS INTEGER) AS device,
                              CAST(d.corr AS BIGINT) AS correlation_id, CAST(d.dispatch AS BIGINT) AS dispatch_id,
                              CAST(d.kernel AS VARCHAR) AS kernel_name,
                              coalesce(n.name, 'counter_' || r.counter_id) AS counter, sum(r.value) AS value,
                              $pass AS pass
                          FROM batch r JOIN rp_json_disp d ON CAST(d.i AS BIGINT) = r.i
                          LEFT JOIN rp_json_names n ON n.counter_id = r.counter_id
                          GROUP BY ALL""",
                params={"run_id": ctx.run_id, "rank": rank, "pass": pass_name},
                source=path,
            )
        finally:
            for name in ("rp_json_disp", "rp_json_names"):
                con.execute(f"DROP TABLE IF EXISTS {name}").fetchall()


def _blocks(grid: int, wg: int) -> int | None:
    """Workgroups along one axis (rocprofv3 gives the grid in work-items)."""
    return -(-grid // wg) if wg > 0 else None


_DEVICE_COLS = {
    "device": "INTEGER",
    "stream": "VARCHAR",
    "category": "VARCHAR",
    "name": "VARCHAR",
    "start_ns": "BIGINT",
    "dur_ns": "BIGINT",
    "correlation_id": "BIGINT",
    "external_id": "BIGINT",
    "trace_category": "VARCHAR",
    "tid": "VARCHAR",
    "grid_x": "INTEGER",
    "grid_y": "INTEGER",
    "grid_z": "INTEGER",
    "block_x": "INTEGER",
    "block_y": "INTEGER",
    "block_z": "INTEGER",
    "shared_mem_bytes": "BIGINT",
    "bytes": "BIGINT",
    "kind": "VARCHAR",
    "args": "VARCHAR",
    "dispatch_id": "BIGINT",
    "queue_id": "VARCHAR",
    "scratch_bytes": "BIGINT",
    "vgpr_count": "INTEGER",
    "accum_vgpr_count": "INTEGER",
    "sgpr_count": "INTEGER",
}
_HOST_COLS = {
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    "category": "VARCHAR",
    "trace_category": "VARCHAR",
    "name": "VARCHAR",
    "start_ns": "BIGINT",
    "dur_ns": "BIGINT",
    "correlation_id": "BIGINT",
    "external_id": "BIGINT",
}

#: The rows of a batch of ``_DEVICE_COLS`` / ``_HOST_COLS`` object columns, cast to their types.
_DEVICE_SELECT = (
    "SELECT $run_id AS run_id, $rank AS rank, $pid AS pid, "
    + ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in _DEVICE_COLS.items()) + " FROM batch"
)
_HOST_SELECT = (
    "SELECT $run_id AS run_id, $rank AS rank, "
    + ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in _HOST_COLS.items()) + " FROM batch"
)


def _append(cols: dict[str, list[Any]], **values: Any) -> None:
    """One row onto the column lists: a column not given is NULL; a name that is not a column is a bug."""
    for k, column in cols.items():
        column.append(values.pop(k, None))
    if values:
        raise KeyError(f"not columns: {sorted(values)}")
