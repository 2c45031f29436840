"""rocprofv3 CSV output: ``<prefix>_kernel_trace.csv``, ``_memory_copy_trace.csv``, ``_*_api_trace.csv``,
``_counter_collection.csv``, ``_agent_info.csv`` ... of one or more processes.

A file's type is recognized from its header row, never from its name, and every column is read by
header name (case-insensitively), so the ROCm 6.x layout (integer ``Agent_Id``, no ``Stream_Id``,
``Private_Segment_Size``/``Group_Segment_Size``), the ROCm 7.x layout (``"Agent N"``, ``Stream_Id``,
``LDS_Block_Size``, register counts) and ``rocpd convert`` output (extra ``Guid``/``Pid`` columns)
all read the same. DuckDB reads each file with ``read_csv`` (every column as text, header given
explicitly) and one ``INSERT ... SELECT`` per file does all per-row conversion.

Conventions shared by every AMD reader (rocprofv3 CSV/JSON, rocpd, RPD):

* one rank per process: files are grouped by their ``<prefix>`` (the part of the name before the
  type, by default the pid) and directory, ranks are numbered by pid;
* ``device`` is the HIP device index: GPU agents of ``agent_info`` ordered by logical node id are
  devices 0, 1, ...; without ``agent_info`` the GPU agent ids seen are numbered in ascending order.
  The agent id as the file writes it and its node id stay in ``args``;
* grids are stored in workgroups (rocprofv3 writes work-items); a copy's device is its destination
  GPU, else its source GPU; the CSV has no copy sizes (``bytes`` is NULL);
* counters (``Counter_Value`` is already the sum over hardware instances) are summed per
  (dispatch, counter); ``pass`` is the ``pmc_N``/``pass_N`` folder the file sits in; when counters
  come from several separately named outputs (``decode_stall_*``, ``decode_fetch_*``: separate
  executions) without pass folders, ``pass`` is that output's prefix;
* PC samples (``*_pc_sampling_host_trap.csv``, ``*_pc_sampling_stochastic.csv``) go to
  ``pc_sample_rows`` (view ``pc_samples``): the method from the header (``Stall_Reason`` present:
  stochastic), instruction type and stall reason without their ``ROCPROFILER_PC_SAMPLING_…``
  prefix, ``Wave_Issued_Instruction`` as a boolean; the kernel comes from ``Dispatch_Id``;
* memory allocation and scratch memory records are counted but not stored; summary
  statistics files (``*_stats.csv``) are skipped: both are listed with the reason in the rank's
  metadata (``skipped_files``).
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from tracekit.errors import TraceInputError
from tracekit.limits import check_temp_space, temp_dir
from tracekit.parsers._io import read_head
from tracekit.parsers.amd_device import amd_device_info
from tracekit.parsers.base import DeviceInfo, IngestContext, Parser, RankInfo
from tracekit.parsers.explain import refusal
from tracekit.parsers.store_writer import insert_batch
from tracekit.sql_text import quote

# ---------------------------------------------------------------------------------------------
# File types, recognized from the header (lower-cased column names).


@dataclass(frozen=True)
class CsvType:
    """One rocprofv3 CSV type: how to recognize it and what it needs."""

    name: str
    #: the header must contain every column of one of these sets
    signatures: tuple[frozenset[str], ...]
    #: columns without which the file cannot be read (as rocprofv3 spells them)
    required: tuple[str, ...]
    #: None: stored; else why the file's records are not stored
    skip_reason: str | None = None
    #: True for skipped files whose rows are trace records (counted as skipped events)
    records: bool = True


def _sig(*names: str) -> frozenset[str]:
    return frozenset(n.lower() for n in names)


KERNEL = CsvType(
    "kernel_trace", (_sig("Kind", "Kernel_Name"),), ("Kernel_Name", "Start_Timestamp", "End_Timestamp")
)
COUNTER = CsvType(
    "counter_collection",
    (_sig("Counter_Name", "Counter_Value"),),
    ("Dispatch_Id", "Counter_Name", "Counter_Value"),
)
COPY = CsvType(
    "memory_copy_trace",
    (_sig("Direction", "Source_Agent_Id"), _sig("Direction", "Destination_Agent_Id")),
    ("Direction", "Start_Timestamp", "End_Timestamp"),
)
API = CsvType(
    "api_trace", (_sig("Domain", "Function"),), ("Domain", "Function", "Start_Timestamp", "End_Timestamp")
)
AGENT = CsvType("agent_info", (_sig("Node_Id", "Agent_Type"),), ("Node_Id", "Agent_Type"))
ALLOC = CsvType(
    "memory_allocation_trace",
    (_sig("Operation", "Allocation_Size", "Address"),),
    (),
    skip_reason="memory allocation records are not stored (counted as skipped events)",
)
SCRATCH = CsvType(
    "scratch_memory_trace",
    (_sig("Operation", "Alloc_Flags"),),
    (),
    skip_reason="scratch memory records are not stored (counted as skipped events)",
)
PC_SAMPLING = CsvType(
    "pc_sampling", (_sig("Sample_Timestamp", "Instruction"),), ("Sample_Timestamp", "Dispatch_Id", "Instruction")
)
STATS = CsvType(
    "stats",
    (_sig("Name", "Calls", "TotalDurationNs"),),
    (),
    skip_reason="summary statistics (*_stats.csv): derivable from the trace records, not stored",
    records=False,
)
#: In recognition order: counter_collection before kernel_trace (both have Kernel_Name).
CSV_TYPES = (COUNTER, KERNEL, COPY, API, AGENT, ALLOC, SCRATCH, PC_SAMPLING, STATS)

#: Type names rocprofv3 and ``rocpd convert`` put after ``<prefix>_`` in file names (longest
#: first), used only to find the prefix; the type itself always comes from the header.
_NAME_SUFFIXES = sorted(
    (
        "kernel_trace",
        "memory_copy_trace",
        "memory_allocation_trace",
        "scratch_memory_trace",
        "hip_api_trace",
        "hsa_api_trace",
        "marker_api_trace",
        "rccl_api_trace",
        "rocdecode_api_trace",
        "rocjpeg_api_trace",
        "ompt_api_trace",
        "counter_collection",
        "counter_collection_trace",
        "agent_info",
        "region_trace",
        "pc_sampling_host_trap",
        "pc_sampling_stochastic",
        "kernel_stats",
        "hip_api_stats",
        "hsa_api_stats",
        "marker_api_stats",
        "rccl_api_stats",
        "memory_copy_stats",
        "memory_allocation_stats",
        "scratch_memory_stats",
        "counter_collection_stats",
        "rocdecode_api_stats",
        "rocjpeg_api_stats",
        "domain_stats",
    ),
    key=len,
    reverse=True,
)
_PASS_DIR = re.compile(r"^(pmc|pass)_\d+$")


def read_header(path: Path) -> list[str] | None:
    """The header row of a CSV file (None if the start of the file is not a CSV header)."""
    try:
        head = read_head(path, 64 << 10)
    except TraceInputError:
        return None
    if b"\x00" in head:
        return None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    line = text.split("\n", 1)[0].rstrip("\r")
    if not line.strip():
        return None
    try:
        row = next(csv.reader(io.StringIO(line)))
    except (csv.Error, StopIteration):
        return None
    return [c.strip() for c in row]


def classify(header: Iterable[str]) -> CsvType | None:
    """The rocprofv3 CSV type whose signature the header carries, or None."""
    names = {h.lower() for h in header}
    for t in CSV_TYPES:
        if any(sig <= names for sig in t.signatures):
            return t
    return None


def _first_row(path: Path) -> dict[str, str]:
    """The first data row as {lower-cased column: value} (empty if none); reads a few KiB."""
    try:
        head = read_head(path, 256 << 10)
    except TraceInputError:
        return {}
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    rows = csv.reader(io.StringIO(text))
    try:
        header = next(rows)
        row = next(rows)
    except (csv.Error, StopIteration):
        return {}
    return {h.strip().lower(): v for h, v in zip(header, row)}


def split_name(path: Path) -> str:
    """``<prefix>`` of ``<prefix>_<type>.csv``; the whole stem when the name has no known type."""
    stem = path.name[: -len(".csv")] if path.name.lower().endswith(".csv") else path.stem
    low = stem.lower()
    for suffix in _NAME_SUFFIXES:
        if low == suffix:
            return ""
        if low.endswith("_" + suffix):
            return stem[: -len(suffix) - 1]
    return stem


def pass_of(path: Path) -> str | None:
    """The ``pmc_N``/``pass_N`` folder a file sits in (one of its three nearest parents), or None."""
    for parent in list(path.parents)[:3]:
        if _PASS_DIR.match(parent.name):
            return parent.name
    return None


# ---------------------------------------------------------------------------------------------
# Agents → HIP device indices; agent records → DeviceInfo (shared with the JSON reader).


@dataclass
class Agent:
    """One agent as ``agent_info.csv`` or ``results.json`` describe it (property keys lower-case)."""

    node_id: int | None
    logical_node_id: int | None
    is_gpu: bool
    type_name: str
    type_index: int | None
    props: dict[str, Any]
    device: int | None = None  # HIP device index (GPU agents only)


def number_devices(agents: list[Agent]) -> None:
    """Number GPU agents 0, 1, ... by logical node id (node id when it is missing), as HIP does."""
    gpus = [a for a in agents if a.is_gpu]
    gpus.sort(
        key=lambda a: (a.logical_node_id if a.logical_node_id is not None else a.node_id or 0, a.node_id or 0)
    )
    for i, a in enumerate(gpus):
        a.device = i


def _to_int(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    try:
        if isinstance(v, float):
            return int(v)
        try:
            return int(str(v).strip())
        except ValueError:
            return int(float(str(v).strip()))
    except (ValueError, OverflowError):  # not a number, or inf / nan
        return None


def _positive(v: Any) -> int | None:
    i = _to_int(v)
    return i if i is not None and i > 0 else None


def device_info(rank: int, agent: Agent, memory_bytes: int | None = None) -> DeviceInfo:
    """DeviceInfo of a GPU agent from its agent_info/JSON properties (keys lower-case)."""
    p = agent.props

    def s(key: str) -> str | None:
        v = p.get(key)
        return str(v).strip() or None if v is not None else None

    arch = s("name")
    return amd_device_info(
        rank,
        agent.device if agent.device is not None else 0,
        name=s("product_name") or s("market_name") or s("model_name") or arch,
        arch=arch,
        number=lambda key: _positive(p.get(key)),
        memory_bytes=memory_bytes if memory_bytes is not None else _positive(p.get("local_mem_size")),
        properties=dict(p),
    )


def _read_agent_info(path: Path) -> list[Agent]:
    agents: list[Agent] = []
    try:
        with path.open(newline="", encoding="utf-8", errors="replace") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error) as exc:
        raise TraceInputError(path, f"cannot read agent_info CSV: {exc}") from None
    type_counts: dict[str, int] = {}
    for row in rows:
        props: dict[str, Any] = {}
        for k, v in row.items():
            if k is None:
                continue
            key = k.strip().lower()
            iv = _to_int(v) if v is not None and re.fullmatch(r"\s*-?\d+\s*", v) else None
            props[key] = iv if iv is not None else (v.strip() if isinstance(v, str) else v)
        type_name = str(props.get("agent_type") or "").upper()
        idx = type_counts.get(type_name, 0)
        type_counts[type_name] = idx + 1
        agents.append(
            Agent(
                node_id=_to_int(props.get("node_id")),
                logical_node_id=_to_int(props.get("logical_node_id")),
                is_gpu=type_name == "GPU",
                type_name=type_name,
                type_index=idx,
                props=props,
            )
        )
    number_devices(agents)
    return agents


_AGENT_NUM = re.compile(r"(\d+)\s*$")


def _agent_keys(a: Agent) -> list[str]:
    """Every spelling a CSV uses for this agent: "Agent <logical id>" (ROCm 7 default),
    "<node id>" (ROCm 6.x), "GPU <type index>" (``--agent-index type-relative``)."""
    keys = []
    if a.logical_node_id is not None:
        keys.append(f"Agent {a.logical_node_id}")
    if a.node_id is not None:
        keys.append(str(a.node_id))
        if a.logical_node_id is None:
            keys.append(f"Agent {a.node_id}")
    if a.type_name and a.type_index is not None:
        keys.append(f"{a.type_name} {a.type_index}")
    return keys


def _agents_from_seen(seen: Iterable[str]) -> list[Agent]:
    """GPU agents numbered in ascending order of the ids seen (no agent_info); "GPU N" is device N."""
    agents: list[Agent] = []
    plain = []
    for raw in sorted({s.strip() for s in seen if s and s.strip()}):
        m = _AGENT_NUM.search(raw)
        if m is None:
            continue
        n = int(m.group(1))
        if raw.upper().startswith("GPU"):
            agents.append(Agent(None, None, True, "GPU", n, {}, device=n))
        elif not raw.upper().startswith("CPU"):
            plain.append((n, raw))
    taken = {a.device for a in agents}
    nxt = 0
    for n, raw in sorted(plain):
        while nxt in taken:
            nxt += 1
        agents.append(Agent(n, n, True, "GPU", None, {"agent_id": raw}, device=nxt))
        taken.add(nxt)
    return agents


# ---------------------------------------------------------------------------------------------
# SQL per file type.


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(v)
    return quote(str(v))


class _Cols:
    """SQL expressions for a file's columns, looked up case-insensitively by rocprofv3's names."""

    def __init__(self, header: list[str]) -> None:
        self.by_lower = {h.lower(): h for h in reversed(header)}

    def has(self, *names: str) -> bool:
        return any(n.lower() in self.by_lower for n in names)

    def raw(self, *names: str) -> str:
        """The first present column (trimmed text, '' as NULL), else NULL."""
        for n in names:
            h = self.by_lower.get(n.lower())
            if h is not None:
                q = '"' + h.replace('"', '""') + '"'
                return f"NULLIF(trim({q}), '')"
        return "NULL"

    def int(self, *names: str) -> str:
        return f"TRY_CAST({self.raw(*names)} AS BIGINT)"

    def req_int(self, name: str) -> str:
        """A required integer column: a row without it, or with text in it, is an error."""
        r = self.raw(name)
        return f"CASE WHEN {r} IS NULL THEN error('a row has no {name}') ELSE CAST({r} AS BIGINT) END"


def _read_sql(path: Path, header: list[str]) -> str:
    cols = ", ".join(f"{_lit(h)}: 'VARCHAR'" for h in header)
    return (
        f"read_csv({_lit(str(path))}, header = true, auto_detect = false, columns = {{{cols}}}, "
        "delim = ',', quote = '\"', escape = '\"', strict_mode = true, null_padding = false)"
    )


def _complete_rows(path: Path, tmp: Path, n_columns: int) -> tuple[Path, int]:
    """What to read of ``path``, and how many rows are left out (0 or 1).

    rocprofv3 ends every line with a newline, so a last line without one may have been cut:
    a cut timestamp is still a number, so such a row is never stored. When the line lacks
    fields (or ends inside quotes), ``path`` is returned as is and DuckDB refuses the file
    ("malformed CSV at line N ... (truncated file?)"); when it has all ``n_columns`` fields it
    may still be cut inside its last one: a copy in ``tmp`` without it is returned and the row
    is counted (``partial_rows_dropped``). Files copied from rocprofv3's docs lack the final
    newline too: their last row is dropped and counted the same way."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size == 0:
                return path, 0
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return path, 0
            # find the last newline, reading backwards
            pos, step, cut = size, 1 << 16, -1
            while pos > 0 and cut < 0:
                lo = max(0, pos - step)
                f.seek(lo)
                i = f.read(pos - lo).rfind(b"\n")
                cut = lo + i if i >= 0 else -1
                pos = lo
            if cut >= 0:
                f.seek(cut + 1)
                last = f.read(size - cut - 1).decode("utf-8", "replace")
                try:
                    fields = next(csv.reader([last], strict=True), [])
                except csv.Error:
                    fields = []
                if len(fields) != n_columns:
                    return path, 0  # visibly cut: DuckDB refuses it with the line number
            check_temp_space(cut + 2, tmp)
            out = tmp / f"{len(os.listdir(tmp))}_{path.name}"
            f.seek(0)
            with out.open("wb") as w:
                if cut < 0:  # only a header line, itself maybe cut: 0 data rows
                    w.write(f.read() + b"\n")
                    return out, 0
                left = cut + 1
                while left:
                    block = f.read(min(left, 1 << 20))
                    if not block:
                        break
                    w.write(block)
                    left -= len(block)
    except OSError as exc:
        raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None
    return out, 1


def _agent_map_sql(agents: list[Agent]) -> str:
    rows = []
    for a in agents:
        if not a.is_gpu or a.device is None:
            continue
        for key in _agent_keys(a) or [str(a.props.get("agent_id", ""))]:
            rows.append(f"({_lit(key)}, {a.device}, {_lit(a.node_id)})")
    if not rows:
        return "(SELECT NULL::VARCHAR AS agent, NULL::INTEGER AS device, NULL::BIGINT AS node WHERE false)"
    return "(SELECT * FROM (VALUES " + ", ".join(rows) + ") AS m(agent, device, node))"


#: The columns a kernel dispatch and a memory copy fill alike, from the record ``t`` whose
#: shared fields :func:`_device_record` reads.
_DEVICE_ROW = """
    $run_id AS run_id,
    $rank AS rank,
    coalesce(t.stream, t.queue) AS stream,
    t.queue AS queue_id,
    t.s AS start_ns,
    t.e - t.s AS dur_ns,
    t.corr AS correlation_id,
    $pid AS pid,
    t.tid AS tid"""


def _device_record(c: _Cols) -> str:
    """The fields of a kernel-dispatch or memory-copy CSV row that :data:`_DEVICE_ROW` reads."""
    start, end = c.req_int("Start_Timestamp"), c.req_int("End_Timestamp")
    return (f'{c.raw("Stream_Id")} AS stream, {c.raw("Queue_Id")} AS queue, {c.raw("Thread_Id")} AS tid, '
            f'{c.raw("Kind")} AS kind, {c.int("Correlation_Id")} AS corr, {start} AS s, {end} AS e')


def _kernel_sql(c: _Cols, src: str, amap: str) -> tuple[str, str]:
    wg = [c.int(f"Workgroup_Size_{d}") for d in "XYZ"]
    grid = [c.int(f"Grid_Size_{d}") for d in "XYZ"]
    blocks = [f"CAST(CASE WHEN {w} > 0 THEN ({g} + {w} - 1) // {w} END AS INTEGER)" for g, w in zip(grid, wg)]
    return "device_activity", f"""
SELECT{_DEVICE_ROW},
    m.device AS device,
    'kernel' AS category,
    coalesce(t.name, '') AS name,
    coalesce(t.kind, 'KERNEL_DISPATCH') AS trace_category,
    t.gx AS grid_x,
    t.gy AS grid_y,
    t.gz AS grid_z,
    t.wx AS block_x,
    t.wy AS block_y,
    t.wz AS block_z,
    t.lds AS shared_mem_bytes,
    json_object('agent', t.agent, 'agent_node_id', m.node, 'kernel_id', t.kernel_id) AS args,
    t.dispatch AS dispatch_id,
    t.scratch AS scratch_bytes,
    t.vgpr AS vgpr_count,
    t.agpr AS accum_vgpr_count,
    t.sgpr AS sgpr_count
FROM (SELECT {_device_record(c)}, {c.raw("Agent_Id")} AS agent, {c.raw("Kernel_Name")} AS name,
        {blocks[0]} AS gx, {blocks[1]} AS gy, {blocks[2]} AS gz,
        CAST({wg[0]} AS INTEGER) AS wx, CAST({wg[1]} AS INTEGER) AS wy, CAST({wg[2]} AS INTEGER) AS wz,
        {c.int("LDS_Block_Size", "Group_Segment_Size", "Lds_Size")} AS lds,
        {c.int("Scratch_Size", "Private_Segment_Size")} AS scratch,
        {c.int("Kernel_Id")} AS kernel_id, {c.int("Dispatch_Id")} AS dispatch,
        CAST({c.int("VGPR_Count", "Arch_VGPR_Count")} AS INTEGER) AS vgpr,
        CAST({c.int("Accum_VGPR_Count")} AS INTEGER) AS agpr,
        CAST({c.int("SGPR_Count")} AS INTEGER) AS sgpr
      FROM {src}) t
LEFT JOIN {amap} m ON m.agent = t.agent
"""


def _copy_sql(c: _Cols, src: str, amap: str) -> tuple[str, str]:
    return "device_activity", f"""
SELECT{_DEVICE_ROW},
    coalesce(d.device, s.device) AS device,
    'memcpy' AS category,
    coalesce(t.direction, '') AS name,
    coalesce(t.kind, 'MEMORY_COPY') AS trace_category,
    t.direction AS kind,
    json_object('src_agent', t.src, 'dst_agent', t.dst, 'src_agent_node_id', s.node,
                'dst_agent_node_id', d.node) AS args
FROM (SELECT {_device_record(c)}, {c.raw("Direction")} AS direction, {c.raw("Source_Agent_Id")} AS src,
        {c.raw("Destination_Agent_Id")} AS dst
      FROM {src}) t
LEFT JOIN {amap} s ON s.agent = t.src
LEFT JOIN {amap} d ON d.agent = t.dst
"""


#: MARKER_CORE_API (roctxMark/RangePush/Pop) and MARKER_CORE_RANGE_API (roctx ranges) rows are
#: annotations named by their message; MARKER_CONTROL_API / MARKER_NAME_API are API calls.
ANNOTATION_DOMAINS = ("MARKER_CORE_API", "MARKER_CORE_RANGE_API")


def _api_sql(c: _Cols, src: str) -> tuple[str, str]:
    start, end = c.req_int("Start_Timestamp"), c.req_int("End_Timestamp")
    domains = ", ".join(_lit(d) for d in ANNOTATION_DOMAINS)
    return "host_events", f"""
SELECT
    $run_id AS run_id,
    $rank AS rank,
    coalesce(t.pid, $pid) AS pid,
    t.tid AS tid,
    CASE WHEN t.domain IN ({domains}) THEN 'annotation' ELSE 'runtime' END AS category,
    coalesce(t.domain, '') AS trace_category,
    coalesce(t.function, '') AS name,
    t.s AS start_ns,
    t.e - t.s AS dur_ns,
    t.corr AS correlation_id
FROM (SELECT {c.raw("Domain")} AS domain, {c.raw("Function")} AS function,
        {c.raw("Process_Id", "Pid")} AS pid, {c.raw("Thread_Id")} AS tid,
        {c.int("Correlation_Id")} AS corr, {start} AS s, {end} AS e
      FROM {src}) t
"""


def _counter_sql(c: _Cols, src: str, amap: str) -> tuple[str, str]:
    value = c.raw("Counter_Value")
    return "counter_values", f"""
SELECT
    $run_id AS run_id,
    $rank AS rank,
    m.device AS device,
    t.corr AS correlation_id,
    t.dispatch AS dispatch_id,
    t.kernel AS kernel_name,
    t.counter AS counter,
    sum(t.value) AS value,
    $pass AS pass
FROM (SELECT {c.raw("Agent_Id")} AS agent, {c.int("Correlation_Id")} AS corr,
        {c.int("Dispatch_Id")} AS dispatch, {c.raw("Kernel_Name")} AS kernel,
        {c.raw("Counter_Name")} AS counter,
        CASE WHEN {value} IS NULL THEN error('a row has no Counter_Value')
             ELSE CAST({value} AS DOUBLE) END AS value
      FROM {src}) t
LEFT JOIN {amap} m ON m.agent = t.agent
GROUP BY ALL
"""


#: Prefixes rocprofv3 writes before the PC-sampling enum names (``pc_sampling.h``); stored without.
PC_TYPE_PREFIX = "ROCPROFILER_PC_SAMPLING_INSTRUCTION_TYPE_"
PC_REASON_PREFIX = "ROCPROFILER_PC_SAMPLING_INSTRUCTION_NOT_ISSUED_REASON_"


def _pc_sql(c: _Cols, src: str) -> tuple[str, str]:
    issued = c.raw("Wave_Issued_Instruction")
    method = "stochastic" if c.has("Stall_Reason", "Wave_Issued_Instruction") else "host_trap"
    return "pc_sample_rows", f"""
SELECT
    $run_id AS run_id,
    $rank AS rank,
    {c.int("Dispatch_Id")} AS dispatch_id,
    {c.int("Correlation_Id")} AS correlation_id,
    {c.req_int("Sample_Timestamp")} AS timestamp_ns,
    '{method}' AS method,
    TRY_CAST({c.raw("Exec_Mask")} AS UBIGINT) AS exec_mask,
    {c.raw("Instruction")} AS instruction,
    {c.raw("Instruction_Comment")} AS instruction_comment,
    CASE WHEN lower({issued}) IN ('1', 'true') THEN true WHEN lower({issued}) IN ('0', 'false') THEN false END AS wave_issued,
    regexp_replace({c.raw("Instruction_Type")}, '^{PC_TYPE_PREFIX}', '') AS instruction_type,
    regexp_replace({c.raw("Stall_Reason")}, '^{PC_REASON_PREFIX}', '') AS stall_reason,
    CAST({c.int("Wave_Count")} AS INTEGER) AS wave_count
FROM {src}
"""


def duckdb_reason(exc: BaseException) -> str:
    """DuckDB's CSV/conversion error as one short line."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    first = re.sub(r"^[A-Za-z ]+ Error: ", "", lines[0])
    m = re.match(r"CSV Error on Line: (\d+)", first)
    if m:
        detail = next((ln for ln in lines[1:] if not ln.startswith("Original Line")), "")
        return f"malformed CSV at line {m.group(1)}: {detail.rstrip('.')} (truncated file?)"
    return first


# ---------------------------------------------------------------------------------------------


@dataclass
class CsvFile:
    path: Path
    header: list[str]
    type: CsvType
    prefix: str
    pass_name: str | None


@dataclass
class _Group:
    """The files of one process (one ``<prefix>`` in one directory)."""

    key: tuple[str, str]
    prefix: str
    files: list[CsvFile] = field(default_factory=list)
    pid: int | None = None

    def of(self, t: CsvType) -> list[CsvFile]:
        return [f for f in self.files if f.type is t]


def _group_key(f: CsvFile) -> tuple[str, str]:
    parts = [p for p in f.path.parent.parts if not _PASS_DIR.match(p)]
    return (str(Path(*parts)) if parts else "", f.prefix)


def _pid_of(g: _Group) -> int | None:
    if re.fullmatch(r"\d+", g.prefix):
        return int(g.prefix)
    for t in (API, COUNTER):
        for f in g.of(t):
            row = _first_row(f.path)
            pid = _to_int(row.get("process_id") or row.get("pid"))
            if pid is not None:
                return pid
    return None


def open_csv(path: Path) -> CsvFile:
    """Recognize ``path`` as a rocprofv3 CSV and check its required columns."""
    header = read_header(path)
    if header is None:
        raise TraceInputError(path, "not a CSV file (no header row)")
    t = classify(header)
    if t is None:
        raise TraceInputError(path, _unknown_header(header))
    lower = {h.lower() for h in header}
    missing = [r for r in t.required if r.lower() not in lower]
    if missing:
        raise TraceInputError(path, f"{t.name} CSV lacks required columns: {', '.join(missing)}")
    return CsvFile(path, header, t, split_name(path), pass_of(path))


def _unknown_header(header: list[str]) -> str:
    shown = ", ".join(header[:6]) + (", ..." if len(header) > 6 else "")
    return (
        f"CSV header ({shown}) matches no rocprofv3 CSV type (kernel_trace, memory_copy_trace, "
        "*_api_trace, counter_collection, agent_info, ...)"
    )


class RocprofCsvParser(Parser, format_name="rocprofv3"):
    """Reads rocprofv3 CSV output: one file, or a directory of them (one run, a rank per process)."""

    suffixes = (".csv",)
    #: where copies of cut-off files (without their partial last row) go during :meth:`parse`
    _tmp: Path

    def sniff(self, path: Path) -> bool:
        if not path.name.lower().endswith(".csv"):
            return False
        header = read_header(path)
        return header is not None and classify(header) is not None

    def explain(self, path: Path) -> str:
        return refusal(open_csv, path, "not a rocprofv3 CSV file")

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        opened = [open_csv(p) for p in files]
        if not any(f.type.skip_reason is None and f.type is not AGENT for f in opened):
            names = ", ".join(sorted({f.type.name for f in opened}))
            raise TraceInputError(
                files[0] if len(files) == 1 else files[0].parent,
                f"no rocprofv3 trace or counter records to store (only {names})",
            )
        groups: dict[tuple[str, str], _Group] = {}
        for f in opened:
            key = _group_key(f)
            groups.setdefault(key, _Group(key, f.prefix)).files.append(f)
        for g in groups.values():
            g.pid = _pid_of(g)
        ordered = sorted(groups.values(), key=lambda g: (g.pid is None, g.pid or 0, g.key))
        # Counters of several separately named outputs without pass folders: separate executions.
        counter_prefixes = {g.prefix for g in ordered if g.of(COUNTER)}
        named_passes = len(counter_prefixes) > 1 and all(p and not p.isdigit() for p in counter_prefixes)
        run_agent_info = next((f for g in ordered for f in g.of(AGENT)), None)
        with tempfile.TemporaryDirectory(prefix="tracekit-csv-", dir=temp_dir()) as tmp:
            self._tmp = Path(tmp)
            for rank, g in enumerate(ordered):
                self._parse_group(ctx, rank, g, run_agent_info, named_passes)

    def _parse_group(
        self, ctx: IngestContext, rank: int, g: _Group, run_agent_info: CsvFile | None, named_passes: bool
    ) -> None:
        con = ctx.con
        own = g.of(AGENT)
        info = own[0] if own else run_agent_info
        agents = (
            _read_agent_info(info.path)
            if info is not None
            else _agents_from_seen(self._seen_gpu_agents(con, g, self._tmp))
        )
        amap = _agent_map_sql(agents)
        pid = str(g.pid) if g.pid is not None else None
        counts = {"kernel": 0, "memcpy": 0, "api": 0, "counter_values": 0, "pc_samples": 0, "skipped_records": 0,
                  "partial_rows_dropped": 0, "duplicate_rows_dropped": 0}
        skipped: dict[str, str] = {}
        for f in g.files:
            if f.type is AGENT:
                continue
            readable, partial = _complete_rows(f.path, self._tmp, len(f.header))
            counts["partial_rows_dropped"] += partial
            src = _read_sql(readable, f.header)
            n_rows = 0
            if f.type.skip_reason is None and f.type is not PC_SAMPLING:
                # exact duplicate rows (every column equal) are stored once, and counted: a
                # dispatch, copy or API call has its own correlation id, so a repeated row is a
                # repeated record. Not PC samples: host-trap rows carry no wave id, and waves
                # sampled at one timestamp on one instruction give identical rows (the ROCm docs'
                # sample has 35 such repeats in 78 rows)
                n_rows = self._count(con, f, src)
                src = f"(SELECT DISTINCT * FROM {src})"
            c = _Cols(f.header)
            if f.type.skip_reason is not None:
                skipped[f.path.name] = f.type.skip_reason
                n = self._count(con, f, src) if f.type.records else 0
                counts["skipped_records"] += n
                ctx.progress(n, f.path.stat().st_size)
                continue
            if f.type is KERNEL:
                (table, select), what = _kernel_sql(c, src, amap), "kernel"
            elif f.type is COPY:
                (table, select), what = _copy_sql(c, src, amap), "memcpy"
            elif f.type is API:
                (table, select), what = _api_sql(c, src), "api"
            elif f.type is PC_SAMPLING:
                (table, select), what = _pc_sql(c, src), "pc_samples"
            else:
                (table, select), what = _counter_sql(c, src, amap), "counter_values"
            pass_name = f.pass_name or (g.prefix if named_passes else None)
            params = {"run_id": ctx.run_id, "rank": rank, "pid": pid, "pass": pass_name}
            try:
                n = insert_batch(con, table, select=select, params=params, source=f.path,
                                 what=f"{f.type.name} CSV", reason=duckdb_reason)
            except duckdb.OutOfMemoryException:
                raise  # the memory limit, not the file: the ingest says so
            except duckdb.Error as exc:  # reading the CSV (a malformed line, a missing column)
                raise TraceInputError(f.path, f"{f.type.name} CSV: {duckdb_reason(exc)}") from None
            counts[what] += n
            if f.type is PC_SAMPLING:
                pass
            elif f.type is not COUNTER:  # counter rows are summed per (dispatch, counter)
                counts["duplicate_rows_dropped"] += n_rows - n
            else:
                counts["duplicate_rows_dropped"] += n_rows - self._count(con, f, src)
            ctx.progress(0 if f.type is COUNTER else n, f.path.stat().st_size)
        first_ns, last_ns = span(con, ctx.run_id, rank)
        dropped = counts["partial_rows_dropped"] + counts["duplicate_rows_dropped"]
        n_records = (counts["kernel"] + counts["memcpy"] + counts["api"] + counts["pc_samples"]
                     + counts["skipped_records"] + dropped)
        main = (g.of(KERNEL) or g.of(API) or g.of(COUNTER) or g.files)[0]
        ctx.add_rank(
            RankInfo(
                rank=rank,
                rank_source="process",
                path=main.path,
                runtime="hip",
                metadata={
                    "format": "rocprofv3 csv",
                    "prefix": g.prefix,
                    "pid": g.pid,
                    "files": {f.path.name: f.type.name for f in g.files},
                    "passes": sorted({f.pass_name for f in g.files if f.pass_name}),
                    "agent_info": str(info.path) if info is not None else None,
                    "skipped_files": skipped,
                    "counts": counts,
                },
                n_trace_events=n_records,
                n_python_events=0,
                n_flow_events=0,
                n_other_skipped=counts["skipped_records"],
                n_invalid_events=dropped,  # rows cut by truncation, repeated rows
                first_ns=first_ns,
                last_ns=last_ns,
            )
        )
        for a in agents:
            if a.is_gpu and a.device is not None and info is not None:
                ctx.add_device_info(device_info(rank, a))

    @staticmethod
    def _count(con: duckdb.DuckDBPyConnection, f: CsvFile, src: str) -> int:
        try:
            return int(con.execute(f"SELECT count(*) FROM {src}").fetchall()[0][0])
        except duckdb.Error as exc:
            raise TraceInputError(f.path, f"{f.type.name} CSV: {duckdb_reason(exc)}") from None

    @staticmethod
    def _seen_gpu_agents(con: duckdb.DuckDBPyConnection, g: _Group, tmp: Path) -> list[str]:
        """Agent ids that ran kernels, counters or the device side of copies (no agent_info)."""
        seen: list[str] = []
        for f in g.files:
            c = _Cols(f.header)
            src = _read_sql(_complete_rows(f.path, tmp, len(f.header))[0], f.header)
            if f.type in (KERNEL, COUNTER) and c.has("Agent_Id"):
                sql = f"SELECT DISTINCT {c.raw('Agent_Id')} FROM {src}"
            elif f.type is COPY:
                sql = (
                    f"SELECT DISTINCT unnest([CASE WHEN d LIKE '%DEVICE_TO_%' THEN s END, "
                    f"CASE WHEN d LIKE '%_TO_DEVICE%' THEN t END]) FROM (SELECT {c.raw('Direction')} d, "
                    f"{c.raw('Source_Agent_Id')} s, {c.raw('Destination_Agent_Id')} t FROM {src})"
                )
            else:
                continue
            try:
                seen += [r[0] for r in con.execute(sql).fetchall() if r[0] is not None]
            except duckdb.Error as exc:
                raise TraceInputError(f.path, f"{f.type.name} CSV: {duckdb_reason(exc)}") from None
        return seen


def span(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> tuple[int | None, int | None]:
    """First start and last end (ns) of a rank's device and host events."""
    rows = con.execute(
        """SELECT min(s), max(e) FROM (
             SELECT min(start_ns) s, max(start_ns + dur_ns) e FROM device_activity
              WHERE run_id = $run_id AND rank = $rank
             UNION ALL
             SELECT min(start_ns), max(start_ns + dur_ns) FROM host_events
              WHERE run_id = $run_id AND rank = $rank)""",
        {"run_id": run_id, "rank": rank},
    ).fetchall()
    if not rows:
        return None, None
    first, last = rows[0]
    return (int(first) if first is not None else None, int(last) if last is not None else None)
