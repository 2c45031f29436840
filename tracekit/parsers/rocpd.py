"""rocprofv3 rocpd SQLite databases (``--output-format rocpd``, ROCm >= 7.0): ``<pid>_results.db``.

One database per profiled process; a directory of them is one run with one rank per process,
ranks numbered by pid (ties, e.g. the same pid on two hosts, by file name order). A database made
by ``rocpd merge`` that holds several processes gives one rank per process (told apart by guid).

Read with Python's ``sqlite3`` (read-only) through the unsuffixed ``rocpd_*`` views, or, where a
writer left them out, the ``rocpd_*_<uuid>`` tables themselves (several of them are read as one
UNION ALL). The ``kernels`` / ``memory_copies`` data views are never used: their INNER JOINs drop
rows whose thread, queue or event is missing. Rows move into DuckDB as NumPy integer batches; names,
agents and categories are joined in DuckDB. What goes where (see also ``docs/schema.md``):

* ``rocpd_kernel_dispatch`` -> ``device_activity`` category ``kernel``: name = the kernel symbol's
  ``display_name``; ``correlation_id`` = the event's ``stack_id`` (rocprofv3's internal correlation
  id, the one CSV ``Correlation_Id`` shows and the id of the HIP API region that launched it);
  ``external_id`` = the event's ``correlation_id`` (external correlation id; 0 = none = NULL);
  ``device`` = the HIP index of the agent (GPU agents' ``type_index``); ``stream`` = the stream
  id (else the queue id); grid in workgroups
  (rocpd stores work-items); LDS / scratch from the dispatch, VGPR/AGPR/SGPR from the symbol.
  The agent (KFD node) id, kernel id, roctx region name and the 3.0.2 HIP-graph ids are in ``args``.
* ``rocpd_memory_copy`` -> ``device_activity`` category ``memcpy``, name and ``kind`` = direction
  (``MEMORY_COPY_HOST_TO_DEVICE``...), ``bytes`` = ``size``; device = the GPU end of the copy.
* ``rocpd_region`` -> ``host_events``: HIP/HSA/RCCL/... API calls as ``runtime`` (trace_category =
  the domain, e.g. ``HIP_RUNTIME_API_EXT``), roctx markers (``MARKER_CORE_API``,
  ``MARKER_CORE_RANGE_API``; as the CSV and JSON readers) as ``annotation``
  named by their message.
* ``rocpd_pmc_event`` -> ``counter_values``: one row per (dispatch, counter), value = SUM over the
  per-instance rows rocpd stores.
* ``rocpd_info_agent`` (+ its ``extdata`` JSON) -> ``device_meta``, one row per GPU agent.

* PC samples (``rocprofv3 --pc-sampling-*``): ``rocpd_sample`` rows on the track named
  ``pc_sample``, one ``rocpd_pmc_event`` per field (``rocpd_info_pmc.name`` = ``sampling_method``,
  ``dispatch_id``, ``exec_mask``, ``instruction``, ``instruction_comment``, ``wave_issued``,
  ``inst_type``, ``stall_reason``, ``wave_count``: the SDK's ``pc_sampling`` view in
  ``data_views.sql``) -> ``pc_sample_rows`` (view ``pc_samples``). Method and enum values are
  named as in ``rocprofiler-sdk/pc_sampling.h`` (1 stochastic, 2 host trap); ``instruction`` and
  ``instruction_comment`` values are ``rocpd_string`` ids; ``correlation_id`` = the event's
  ``stack_id`` (as for kernels).

Memory allocations and other samples are counted (``n_other_skipped``), not stored; so are
kernels, copies and regions whose start or end is NULL or whose duration does not fit 64 bits
(``counts["bad_timestamps"]``). Values a hostile file puts where integers belong (2^63 grids,
register counts, enum indexes) become NULL instead of failing the insert; text there is refused
in one line; SQLite errors are reported as their first line, bytes that are not UTF-8 replaced. Schema versions 3
and 3.0.x are read; 4.0 (``rocpd_timestamp`` spine) is refused with a clear message.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import TraceInputError
from tracekit.parsers._io import file_sha256, prefetch
from tracekit.parsers.amd_device import amd_device_info
from tracekit.parsers.base import DeviceInfo, IngestContext, Parser, RankInfo
from tracekit.parsers.explain import refusal
from tracekit.parsers.store_writer import create_temp_table, insert_batch

if TYPE_CHECKING:
    import numpy as np

SQLITE_MAGIC = b"SQLite format 3\x00"
_UUID_SUFFIX = re.compile(r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}", re.IGNORECASE)
_PID_IN_NAME = re.compile(r"^(\d+)_results\.db$")
#: Stands for SQL NULL inside the int64 NumPy batches (turned back into NULL in DuckDB).
_NULL = -(2**63)
_BATCH_ROWS = 20_000  # rows a DuckDB INSERT takes at once (a 50,000-row batch: +15 MB peak RSS, no faster)
_FETCH_ROWS = 5_000  # rows fetched from SQLite at once (Python tuples: bounds the transient memory)
_SUPPORTED = "schema 3 and 3.0.x are"


# ---------------------------------------------------------------------------------------------
# Opening and recognizing


def sqlite_text(raw: bytes) -> str:
    """SQLite TEXT as str; bytes that are not UTF-8 (a corrupt page) become U+FFFD, not an error."""
    return raw.decode("utf-8", "replace")


#: What a damaged SQLite file can raise: SQLite's errors, and UnicodeDecodeError where the error
#: message itself quotes bytes of a corrupt schema that are not UTF-8.
SQLITE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, UnicodeDecodeError)

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An error's text as one printable line: the first line (SQLite and DuckDB errors can quote
    a whole schema over several lines), control characters replaced, at most ``limit`` chars."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else type(exc).__name__
    first = _UNPRINTABLE.sub("?", first)
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _connect(path: Path) -> sqlite3.Connection:
    uri = path.absolute().as_uri() + "?mode=ro"
    # check_same_thread=False: rows are fetched in a prefetch thread (one user at a time)
    con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    con.text_factory = sqlite_text
    return con


def _objects(con: sqlite3.Connection) -> dict[str, str]:
    """Name -> type ('table' / 'view') of every table and view."""
    rows = con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    return {str(n): str(t) for n, t in rows}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _suffixed(objects: dict[str, str], base: str) -> list[str]:
    """Tables ``<base>_<uuid>`` (exactly a UUID after the base name, so that ``rocpd_event``
    does not pick up 3.0.1's ``rocpd_event_operation_<uuid>``)."""
    return sorted(
        n for n in objects
        if n.startswith(base + "_") and _UUID_SUFFIX.fullmatch(n[len(base):]) is not None
    )


def _source(objects: dict[str, str], base: str) -> str | None:
    """SQL naming the rows of ``base``: the unsuffixed view, else its UUID-suffixed table(s)."""
    if base in objects:
        return _q(base)
    tables = _suffixed(objects, base)
    if not tables:
        return None
    if len(tables) == 1:
        return _q(tables[0])
    return "(" + " UNION ALL ".join(f"SELECT * FROM {_q(t)}" for t in tables) + ")"


def _has(objects: dict[str, str], base: str) -> bool:
    return base in objects or bool(_suffixed(objects, base))


def _kind(objects: dict[str, str]) -> str:
    """'rpd' (rocmProfileData), 'rocpd' (rocprofv3), or '' (some other SQLite file)."""
    if "rocpd_op" in objects:
        return "rpd"
    if any(_has(objects, b) for b in ("rocpd_kernel_dispatch", "rocpd_metadata", "rocpd_timestamp")):
        return "rocpd"
    return ""


def _read_magic(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise TraceInputError(path, f"cannot read: {exc.strerror or exc}") from None


def _schema_version(con: sqlite3.Connection, objects: dict[str, str]) -> str | None:
    src = _source(objects, "rocpd_metadata")
    if src is None:
        return None
    rows = con.execute(f"SELECT value FROM {src} WHERE tag = 'schema_version'").fetchall()
    return str(rows[0][0]).strip() if rows and rows[0][0] is not None else None


def _check_version(path: Path, version: str | None, objects: dict[str, str]) -> None:
    """Refuse anything but schema 3 / 3.0.x (a missing tag on a schema-3 layout is accepted)."""
    spine = _has(objects, "rocpd_timestamp")
    if version is None:
        if spine:
            raise TraceInputError(
                path, f"rocpd schema 4 layout (rocpd_timestamp table) is not supported yet ({_SUPPORTED})"
            )
        return
    parts = version.split(".")
    if parts[0] != "3" or spine or (len(parts) > 1 and parts[1] not in ("0",)):
        raise TraceInputError(path, f"rocpd schema version {version} is not supported yet ({_SUPPORTED})")


# ---------------------------------------------------------------------------------------------
# One database


@dataclass
class _Process:
    pid: int | None
    guid: str | None
    row: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Database:
    path: Path
    con: sqlite3.Connection
    objects: dict[str, str]
    version: str | None
    processes: list[_Process]

    @classmethod
    def open(cls, path: Path) -> _Database:
        if _read_magic(path) != SQLITE_MAGIC:
            raise TraceInputError(path, "not a SQLite database (no 'SQLite format 3' header)")
        try:
            con = _connect(path)
        except SQLITE_ERRORS as exc:
            raise TraceInputError(path, f"cannot open SQLite database ({one_line(exc)})") from None
        try:
            objects = _objects(con)
            kind = _kind(objects)
            if kind == "rpd":
                raise TraceInputError(
                    path, "an RPD (rocmProfileData) database, not rocprofv3 rocpd (ingest it as --format rpd)"
                )
            if kind != "rocpd":
                raise TraceInputError(
                    path, "SQLite file is neither rocpd nor RPD (no rocpd_kernel_dispatch / rocpd_op table)"
                )
            version = _schema_version(con, objects)
            _check_version(path, version, objects)
            db = cls(path, con, objects, version, [])
            db.processes = db._read_processes()
            return db
        except SQLITE_ERRORS as exc:
            con.close()
            raise TraceInputError(path, f"corrupt or unreadable SQLite database ({one_line(exc)})") from None
        except BaseException:
            con.close()
            raise

    def close(self) -> None:
        self.con.close()

    def source(self, base: str) -> str | None:
        return _source(self.objects, base)

    def columns(self, src: str) -> set[str]:
        cur = self.con.execute(f"SELECT * FROM {src} LIMIT 0")
        cols = {str(d[0]) for d in cur.description}
        cur.fetchall()
        return cols

    def dict_rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params)
        names = [str(d[0]) for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def _read_processes(self) -> list[_Process]:
        src = self.source("rocpd_info_process")
        rows = self.dict_rows(f"SELECT * FROM {src}") if src else []
        out = []
        for r in rows:
            pid = r.get("pid") if r.get("pid") is not None else r.get("id")
            out.append(_Process(int(pid) if isinstance(pid, int) else None, _str(r.get("guid")), r))
        if not out:
            m = _PID_IN_NAME.match(self.path.name)
            out.append(_Process(int(m.group(1)) if m else None, None))
        return out


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _json(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        v = v.decode("utf-8", "replace")
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return None
    return None


# ---------------------------------------------------------------------------------------------
# SQL (DuckDB side). ``b`` is a batch of int64 columns (``$nul`` stands for NULL).

_N = "nullif({}, $nul)"

#: The columns of every event (``b``: a batch of dispatches, copies or regions, joined with
#: its event), in the form the SELECTs below share.
_EVENT = f"""
    $run_id AS run_id,
    $rank AS rank,
    b.start AS start_ns,
    b."end" - b.start AS dur_ns,
    {_N.format("b.stack_id")} AS correlation_id,
    nullif({_N.format("b.corr_id")}, 0) AS external_id,
    $pid AS pid,
    CAST({_N.format("b.tid")} AS VARCHAR) AS tid"""
#: ... and of every device event (a dispatch or a copy: it ran on a queue, maybe of a HIP stream)
_DEVICE_EVENT = f"""{_EVENT},
    coalesce(CAST({_N.format("b.stream_id")} AS VARCHAR), CAST({_N.format("b.queue_id")} AS VARCHAR)) AS stream,
    CAST({_N.format("b.queue_id")} AS VARCHAR) AS queue_id"""

#: How a device event's args JSON ends: its region (a roctx range around it) and its graph ids.
_DEVICE_ARGS_END = """      || CASE WHEN r.string <> '' THEN ',"region":' || to_json(r.string) ELSE '' END
      || CASE WHEN b.graph_exec_id <> $nul THEN ',"graph_exec_id":' || b.graph_exec_id ELSE '' END
      || CASE WHEN b.graph_node_id <> $nul THEN ',"graph_node_id":' || b.graph_node_id ELSE '' END
      || '}' AS args"""

#: A lookup joined to the batch: (table, alias, the column of ``b`` that holds the table's ``id``).
_Join = tuple[str, str, str]
#: A device event's category and region (roctx range) names.
_DEVICE_NAMES: tuple[_Join, ...] = (("_rocpd_strings", "c", "category_id"), ("_rocpd_strings", "r", "region_name_id"))


def _from_batch(*joins: _Join) -> str:
    """``FROM batch b``, LEFT JOINed to each lookup of ``joins`` by its ``id``."""
    return "\n".join(["FROM batch b", *(f"LEFT JOIN {t} {a} ON {a}.id = b.{col}" for t, a, col in joins)])


def _device_select(columns: str, args_head: str, *joins: _Join) -> str:
    """The SELECT of a device event (a dispatch or a copy) from the batch ``b``: the columns every
    device event has, then ``columns``, then ``args``: ``args_head`` (the JSON object's opening
    members) closed by :data:`_DEVICE_ARGS_END`; ``b`` joined to ``joins``, then to its names."""
    return f"SELECT{_DEVICE_EVENT},\n{columns},\n{args_head}\n{_DEVICE_ARGS_END}\n{_from_batch(*joins, *_DEVICE_NAMES)}\n"


_KERNELS = _device_select(
    f"""    a.device AS device,
    'kernel' AS category,
    coalesce(s.name, 'kernel_id ' || b.kernel_id) AS name,
    coalesce(c.string, 'KERNEL_DISPATCH') AS trace_category,
    CASE WHEN b.wg_x > 0 AND b.grid_x <> $nul THEN TRY_CAST((CAST(b.grid_x AS HUGEINT) + b.wg_x - 1) // b.wg_x AS INTEGER) END AS grid_x,
    CASE WHEN b.wg_y > 0 AND b.grid_y <> $nul THEN TRY_CAST((CAST(b.grid_y AS HUGEINT) + b.wg_y - 1) // b.wg_y AS INTEGER) END AS grid_y,
    CASE WHEN b.wg_z > 0 AND b.grid_z <> $nul THEN TRY_CAST((CAST(b.grid_z AS HUGEINT) + b.wg_z - 1) // b.wg_z AS INTEGER) END AS grid_z,
    TRY_CAST({_N.format("b.wg_x")} AS INTEGER) AS block_x,
    TRY_CAST({_N.format("b.wg_y")} AS INTEGER) AS block_y,
    TRY_CAST({_N.format("b.wg_z")} AS INTEGER) AS block_z,
    {_N.format("b.lds")} AS shared_mem_bytes,
    {_N.format("b.scratch")} AS scratch_bytes,
    TRY_CAST(s.vgpr AS INTEGER) AS vgpr_count,
    TRY_CAST(s.agpr AS INTEGER) AS accum_vgpr_count,
    TRY_CAST(s.sgpr AS INTEGER) AS sgpr_count,
    b.dispatch_id AS dispatch_id""",
    """    '{"agent_id":' || b.agent_id || ',"kernel_id":' || b.kernel_id""",
    ("_rocpd_agents", "a", "agent_id"),
    ("_rocpd_symbols", "s", "kernel_id"),
)

_COPIES = _device_select(
    f"""    coalesce(dst.device, src.device) AS device,
    'memcpy' AS category,
    coalesce(n.string, '') AS name,
    coalesce(c.string, 'MEMORY_COPY') AS trace_category,
    {_N.format("b.size")} AS bytes,
    n.string AS kind""",
    f"""    '{{"src_agent_id":' || coalesce(CAST({_N.format("b.src_agent_id")} AS VARCHAR), 'null')
      || ',"dst_agent_id":' || coalesce(CAST({_N.format("b.dst_agent_id")} AS VARCHAR), 'null')
      || ',"src_device":' || coalesce(CAST(src.device AS VARCHAR), 'null')
      || ',"dst_device":' || coalesce(CAST(dst.device AS VARCHAR), 'null')
      || CASE WHEN b.src_address <> $nul THEN ',"src_address":' || b.src_address ELSE '' END
      || CASE WHEN b.dst_address <> $nul THEN ',"dst_address":' || b.dst_address ELSE '' END""",
    ("_rocpd_agents", "src", "src_agent_id"),
    ("_rocpd_agents", "dst", "dst_agent_id"),
    ("_rocpd_strings", "n", "name_id"),
)

_REGIONS = f"""
SELECT{_EVENT},
    CASE WHEN c.string IN ('MARKER_CORE_API', 'MARKER_CORE_RANGE_API') THEN 'annotation' ELSE 'runtime' END AS category,
    coalesce(c.string, '') AS trace_category,
    CASE WHEN c.string IN ('MARKER_CORE_API', 'MARKER_CORE_RANGE_API') THEN coalesce(b.message, n.string, '')
         ELSE coalesce(n.string, '') END AS name,
    CASE WHEN c.string IN ('MARKER_CORE_API', 'MARKER_CORE_RANGE_API') AND b.message IS NOT NULL
         THEN '{{"function":' || to_json(coalesce(n.string, ''))
              || CASE WHEN b.parent_stack_id NOT IN (0, $nul) AND b.parent_stack_id <> b.stack_id
                      THEN ',"parent_stack_id":' || b.parent_stack_id ELSE '' END || '}}'
         WHEN b.parent_stack_id NOT IN (0, $nul) AND b.parent_stack_id <> b.stack_id
         THEN '{{"parent_stack_id":' || b.parent_stack_id || '}}'
    END AS args
{_from_batch(("_rocpd_strings", "n", "name_id"), ("_rocpd_strings", "c", "category_id"))}
"""

#: ``rocprofiler_pc_sampling_instruction_type_t`` and ``..._not_issued_reason_t`` (pc_sampling.h),
#: in enum order, without their ``ROCPROFILER_PC_SAMPLING_INSTRUCTION_...`` prefixes.
PC_INSTRUCTION_TYPES = (
    "NONE", "VALU", "MATRIX", "SCALAR", "TEX", "LDS", "LDS_DIRECT", "FLAT", "EXPORT", "MESSAGE", "BARRIER",
    "BRANCH_NOT_TAKEN", "BRANCH_TAKEN", "JUMP", "OTHER", "NO_INST", "DUAL_VALU",
)
PC_STALL_REASONS = (
    "NONE", "NO_INSTRUCTION_AVAILABLE", "ALU_DEPENDENCY", "WAITCNT", "INTERNAL_INSTRUCTION", "BARRIER_WAIT",
    "ARBITER_NOT_WIN", "ARBITER_WIN_EX_STALL", "OTHER_WAIT", "SLEEP_WAIT",
)
#: PC-sample fields, as ``rocpd_info_pmc`` names them (the SDK's ``pc_sampling`` view)
_PC_FIELDS = ("sampling_method", "dispatch_id", "instruction", "instruction_comment", "wave_issued",
              "inst_type", "stall_reason", "wave_count")
_PC_SAMPLES = f"""
SELECT
    $run_id AS run_id,
    $rank AS rank,
    {_N.format("b.dispatch_id")} AS dispatch_id,
    {_N.format("b.stack_id")} AS correlation_id,
    b.timestamp AS timestamp_ns,
    CASE b.sampling_method WHEN 1 THEN 'stochastic' WHEN 2 THEN 'host_trap' ELSE 'unknown' END AS method,
    nullif(b.exec_mask, 0) AS exec_mask,
    si.string AS instruction,
    sc.string AS instruction_comment,
    CASE WHEN b.sampling_method = 1 AND b.wave_issued <> $nul THEN b.wave_issued <> 0 END AS wave_issued,
    CASE WHEN b.sampling_method = 1 AND b.inst_type BETWEEN 0 AND {len(PC_INSTRUCTION_TYPES) - 1}
         THEN {list(PC_INSTRUCTION_TYPES)}[b.inst_type + 1] END AS instruction_type,
    CASE WHEN b.sampling_method = 1 AND b.stall_reason BETWEEN 0 AND {len(PC_STALL_REASONS) - 1}
         THEN {list(PC_STALL_REASONS)}[b.stall_reason + 1] END AS stall_reason,
    CASE WHEN b.sampling_method = 1 AND b.wave_count <> $nul THEN TRY_CAST(b.wave_count AS INTEGER) END AS wave_count
{_from_batch(("_rocpd_strings", "si", "instruction"), ("_rocpd_strings", "sc", "instruction_comment"))}
"""

_COUNTERS = f"""
SELECT
    $run_id AS run_id,
    $rank AS rank,
    a.device AS device,
    {_N.format("d.stack_id")} AS correlation_id,
    d.dispatch_id AS dispatch_id,
    coalesce(s.name, 'kernel_id ' || d.kernel_id) AS kernel_name,
    coalesce(i.name, 'pmc_id ' || p.pmc_id) AS counter,
    p.value AS value,
    $pass AS pass
FROM batch p
JOIN _rocpd_counted d ON d.event_id = p.event_id
LEFT JOIN _rocpd_pmc_info i ON i.id = p.pmc_id
LEFT JOIN _rocpd_symbols s ON s.id = d.kernel_id
LEFT JOIN _rocpd_agents a ON a.id = d.agent_id
"""


# ---------------------------------------------------------------------------------------------
# Reading one process of one database


def _gpu_devices(agents: list[dict[str, Any]]) -> dict[int, int]:
    """Agent (KFD node) id -> HIP device index, for GPU agents: their ``type_index`` (the order
    HIP and PyTorch number GPUs in), else their position by logical index."""
    gpus = [a for a in agents if str(a.get("type") or "").upper() == "GPU" and _int(a.get("id")) is not None]

    def order(a: dict[str, Any], col: str) -> int:
        v = _int(a.get(col))
        return (1 << 62) if v is None else v

    gpus.sort(key=lambda a: (order(a, "logical_index"), order(a, "absolute_index"), order(a, "id")))
    ids = [order(a, "id") for a in gpus]
    type_idx = [_int(a.get("type_index")) for a in gpus]
    if len(set(type_idx)) == len(type_idx) and not any(t is None for t in type_idx):
        return {i: int(t or 0) for i, t in zip(ids, type_idx)}
    return {aid: pos for pos, aid in enumerate(ids)}


def _memory_bytes(ext: dict[str, Any]) -> int | None:
    banks = ext.get("mem_banks")
    if not isinstance(banks, list):
        return None
    # KFD heap types: 0 system, 1 frame buffer (public), 2 frame buffer (private)
    sizes = [
        _int(b.get("size_in_bytes")) for b in banks
        if isinstance(b, dict) and _int(b.get("heap_type")) in (1, 2)
    ]
    total = sum(s for s in sizes if s)
    return total or None


def _device_info(rank: int, device: int, agent: dict[str, Any]) -> DeviceInfo:
    ext_raw = _json(agent.get("extdata"))
    ext: dict[str, Any] = ext_raw if isinstance(ext_raw, dict) else {}
    low = {k.lower(): v for k, v in ext.items()}

    def num(key: str) -> int | None:
        return _int(low.get(key))

    def text(*keys: str) -> str | None:
        for k in keys:
            v = agent.get(k) if agent.get(k) not in (None, "") else low.get(k.lower())
            if isinstance(v, str) and v.strip():
                return v.strip()
        return None

    props = {k: v for k, v in agent.items() if k != "extdata"}
    props["extdata"] = ext_raw
    return amd_device_info(
        rank,
        device,
        name=text("product_name", "user_name", "model_name", "name"),
        arch=text("name"),
        number=num,
        memory_bytes=_memory_bytes(ext),
        properties=props,
    )


class _ProcessReader:
    """Moves one process's rows from one rocpd database into the store."""

    def __init__(self, db: _Database, proc: _Process, rank: int, ctx: IngestContext, filtered: bool) -> None:
        self.db = db
        self.proc = proc
        self.rank = rank
        self.ctx = ctx
        self.con = ctx.con
        self.params: dict[str, Any] = {"run_id": ctx.run_id, "rank": rank, "nul": _NULL,
                                       "pid": None if proc.pid is None else str(proc.pid)}
        # Several processes in one file (rocpd merge): every query keeps to this one's guid.
        self.filtered = filtered
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.counts: dict[str, int] = {}

    # -- helpers ------------------------------------------------------------------------------

    def _where(self, alias: str, *, by_pid: bool = True) -> tuple[str, dict[str, Any]]:
        if not self.filtered:
            return "", {}
        cond = f"{alias}.guid = :guid"
        params: dict[str, Any] = {"guid": self.proc.guid}
        if by_pid and self.proc.pid is not None:
            cond += f" AND {alias}.pid = :pid"
            params["pid"] = self.proc.pid
        return " WHERE " + cond, params

    def _insert(self, table: str, batch: dict[str, Any], select: str, params: dict[str, Any] | None = None) -> None:
        """Insert the rows ``select`` makes of ``batch`` (read as table ``batch``) into ``table``."""
        insert_batch(self.con, table, batch, select=select, params={**self.params, **(params or {})},
                     source=self.db.path)

    def _valid_times(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``batch`` without rows whose start or end is NULL or whose end - start does not fit a
        signed 64-bit ns count (counted in ``counts["bad_timestamps"]``). Rows that end before
        they start are kept here: the store's validation step drops and counts them."""
        import numpy as np

        start, end = batch["start"], batch["end"]
        with np.errstate(over="ignore"):
            dur = end - start  # wraps around on overflow
        ok = (start != _NULL) & (end != _NULL) & ((end >= start) == (dur >= 0))
        n_bad = int(len(ok) - ok.sum())
        if not n_bad:
            return batch
        self.counts["bad_timestamps"] = self.counts.get("bad_timestamps", 0) + n_bad
        return {k: v[ok] for k, v in batch.items()}

    def _span(self, start: np.ndarray, end: np.ndarray) -> None:
        if len(start):
            lo, hi = int(start.min()), int(end.max())
            self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
            self.last_ns = hi if self.last_ns is None else max(self.last_ns, hi)

    def _batches(
        self,
        from_sql: str,
        cols: Sequence[tuple[str, str | None]],
        params: dict[str, Any],
        text: tuple[str, str] | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Batches of ``SELECT <cols> <from_sql>`` as int64 NumPy columns (NULL as ``_NULL``).

        ``cols`` are (name, SQL expression); a ``None`` expression is a column this database
        lacks (all NULL, not fetched). ``text`` is one optional (name, expression) text column.
        SQLite is read in a background thread while DuckDB inserts the previous batch.
        """
        import numpy as np

        fetched = [(n, e) for n, e in cols if e is not None]
        missing = [n for n, e in cols if e is None]
        select = ", ".join(f"IFNULL({e}, :null)" for _, e in fetched)
        if text is not None:
            select += f", {text[1]}"
        sql = f"SELECT {select} {from_sql}"
        k = len(fetched)
        path = self.db.path

        def convert(rows: list[tuple[Any, ...]]) -> dict[str, np.ndarray]:
            n = len(rows)
            out: dict[str, np.ndarray] = {}
            try:
                if text is None:
                    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=n * k).reshape(n, k)
                    for j, (name, _) in enumerate(fetched):
                        out[name] = np.ascontiguousarray(flat[:, j])
                else:
                    columns = list(zip(*rows))
                    for j, (name, _) in enumerate(fetched):
                        out[name] = np.array(columns[j], dtype=np.int64)
                    out[text[0]] = np.array(columns[k], dtype=object)
            except (TypeError, ValueError, OverflowError):
                raise TraceInputError(
                    path, "unexpected non-integer value in one of: " + ", ".join(n for n, _ in fetched)
                ) from None
            return out

        def joined(parts: list[dict[str, np.ndarray]], n: int) -> dict[str, np.ndarray]:
            out = parts[0] if len(parts) == 1 else {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
            for name in missing:
                out[name] = np.full(n, _NULL, dtype=np.int64)
            return out

        def produce() -> Iterator[dict[str, np.ndarray]]:
            # rows are fetched a quarter of a batch at a time: SQLite's row tuples (~1 kB a row) are
            # the ingest's largest transient, and DuckDB still gets whole batches
            cur = self.db.con.execute(sql, {"null": _NULL, **params})
            try:
                parts: list[dict[str, np.ndarray]] = []
                n = 0
                while rows := cur.fetchmany(_FETCH_ROWS):
                    parts.append(convert(rows))
                    n += len(rows)
                    del rows
                    if n >= _BATCH_ROWS:
                        yield joined(parts, n)
                        parts, n = [], 0
                if parts:
                    yield joined(parts, n)
            finally:
                cur.close()

        return prefetch(produce())

    def _event_join(self, alias: str) -> tuple[str, Callable[[str], str | None]]:
        """The LEFT JOIN of the ``rocpd_event`` rows of table ``alias`` (as ``e``; "" when the
        database has no event table), and the SQL of an event column (None, i.e. NULL, without)."""
        ev_src = self.db.source("rocpd_event")
        if ev_src is None:
            return "", lambda name: None
        join = f" LEFT JOIN {ev_src} e ON e.id = {alias}.event_id"
        if self.filtered:
            join += f" AND e.guid = {alias}.guid"
        return join, lambda name: f"e.{name}"

    def _store_events(
        self,
        kind: str,
        from_sql: str,
        alias: str,
        cols: Sequence[tuple[str, str | None]],
        table: str,
        select: str,
        text: tuple[str, str] | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Store this process's events ``FROM <from_sql>`` (their table named ``alias`` there)
        into ``table`` through ``select``, a batch of ``cols`` (and ``text``, see
        :meth:`_batches`) at a time, without those of invalid times (:meth:`_valid_times`); yield
        each batch once stored; add the number stored to ``counts[kind]``."""
        where, params = self._where(alias)
        for batch in self._batches(f"FROM {from_sql}{where}", cols, params, text=text):
            batch = self._valid_times(batch)
            self._insert(table, batch, select)
            self._span(batch["start"], batch["end"])
            self.counts[kind] += len(batch["start"])
            self.ctx.progress(len(batch["start"]), 0)
            yield batch

    # -- tables -------------------------------------------------------------------------------

    def run(self) -> RankInfo:
        import numpy as np

        db = self.db
        where_g, pg = self._where("t", by_pid=False)
        strings_src = db.source("rocpd_string")
        strings = (
            db.con.execute(f"SELECT t.id, t.string FROM {strings_src} t{where_g}", pg).fetchall()
            if strings_src else []
        )
        agents_src = db.source("rocpd_info_agent")
        agents = db.dict_rows(f"SELECT * FROM {agents_src} t{where_g}", pg) if agents_src else []
        devices = _gpu_devices(agents)
        for a in agents:
            aid = _int(a.get("id"))
            if aid is not None and aid in devices:
                self.ctx.add_device_info(_device_info(self.rank, devices[aid], a))
        sym_src = db.source("rocpd_info_kernel_symbol")
        symbols = db.dict_rows(f"SELECT * FROM {sym_src} t{where_g}", pg) if sym_src else []
        pmc_info_src = db.source("rocpd_info_pmc")
        pmc_info = (
            db.con.execute(f"SELECT t.id, t.name FROM {pmc_info_src} t{where_g}", pg).fetchall()
            if pmc_info_src else []
        )

        def i64(values: list[Any]) -> np.ndarray:
            # a value past 64 bits (a hostile file) is unknown, like NULL
            return np.array([_NULL if v is None or not -(1 << 63) <= v < (1 << 63) else v for v in values],
                            dtype=np.int64)

        tables: dict[str, dict[str, Any]] = {
            "_rocpd_strings": {
                "id": i64([_int(r[0]) for r in strings]),
                "string": np.array([_str(r[1]) for r in strings], dtype=object),
            },
            "_rocpd_agents": {
                "id": i64([_int(a.get("id")) for a in agents]),
                "device": i64([devices.get(_int(a.get("id")) or -1) for a in agents]),
            },
            "_rocpd_symbols": {
                "id": i64([_int(s.get("id")) for s in symbols]),
                "name": np.array(
                    [_str(s.get("display_name")) or _str(s.get("kernel_name")) for s in symbols], dtype=object
                ),
                "vgpr": i64([_int(s.get("arch_vgpr_count")) for s in symbols]),
                "agpr": i64([_int(s.get("accum_vgpr_count")) for s in symbols]),
                "sgpr": i64([_int(s.get("sgpr_count")) for s in symbols]),
            },
            "_rocpd_pmc_info": {
                "id": i64([_int(r[0]) for r in pmc_info]),
                "name": np.array([_str(r[1]) for r in pmc_info], dtype=object),
            },
        }
        # Small lookup tables live as DuckDB temp tables while this process is read.
        for name, arrays in tables.items():
            cols = ", ".join(f"nullif({c}, $nul) AS {c}" if arrays[c].dtype != object else c for c in arrays)
            create_temp_table(self.con, name, arrays, select=f"SELECT {cols} FROM batch", params={"nul": _NULL},
                              source=self.db.path)
        try:
            pmc = self._read_pmc()
            counted = self._read_dispatches(pmc)
            self._write_counters(pmc, counted)
            self._read_copies()
            self._read_regions()
            self._read_pc_samples()
            self._count_skipped()
        finally:
            for name in tables:
                self.con.execute(f"DROP TABLE IF EXISTS {name}").fetchall()
        return self._rank_info(agents)

    def _read_pmc(self) -> dict[str, np.ndarray] | None:
        """(event_id, pmc_id) -> SUM(value) over the per-instance rows, as NumPy columns."""
        import numpy as np

        src = self.db.source("rocpd_pmc_event")
        if src is None:
            return None
        where, params = self._where("p", by_pid=False)
        sample_src = self.db.source("rocpd_sample")
        if sample_src is not None:  # PC-sample fields are pmc_event rows too: not counters
            where += (" AND" if where else " WHERE") + (
                f" p.event_id NOT IN (SELECT event_id FROM {sample_src} WHERE event_id IS NOT NULL)")
        cur = self.db.con.execute(
            f"SELECT p.event_id, p.pmc_id, SUM(p.value), COUNT(*) FROM {src} p{where} "
            "GROUP BY p.event_id, p.pmc_id",
            params,
        )
        ev: list[np.ndarray] = []
        pm: list[np.ndarray] = []
        val: list[np.ndarray] = []
        n_rows = 0
        while rows := cur.fetchmany(_BATCH_ROWS):
            cols = list(zip(*rows))
            try:
                ev.append(np.array([_NULL if v is None else v for v in cols[0]], dtype=np.int64))
                pm.append(np.array(cols[1], dtype=np.int64))
                val.append(np.array([np.nan if v is None else v for v in cols[2]], dtype=np.float64))
            except (TypeError, ValueError, OverflowError):
                raise TraceInputError(self.db.path, "unexpected non-numeric value in rocpd_pmc_event "
                                                    "(event_id, pmc_id or value)") from None
            n_rows += sum(cols[3])
        self.counts["pmc_event_rows"] = n_rows
        if not ev:
            return None
        return {"event_id": np.concatenate(ev), "pmc_id": np.concatenate(pm), "value": np.concatenate(val)}

    def _read_dispatches(self, pmc: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        import numpy as np

        src = self.db.source("rocpd_kernel_dispatch")
        self.counts["kernel_dispatch"] = 0
        if src is None:
            return None
        have = self.db.columns(src)
        join, e = self._event_join("k")
        cols: list[tuple[str, str | None]] = [
            ("tid", "k.tid"), ("agent_id", "k.agent_id"), ("kernel_id", "k.kernel_id"),
            ("dispatch_id", "coalesce(k.dispatch_id, k.id)"), ("queue_id", "k.queue_id"),
            ("stream_id", "k.stream_id"), ("start", "k.start"), ("end", 'k."end"'),
            ("scratch", "k.private_segment_size"), ("lds", "k.group_segment_size"),
            ("wg_x", "k.workgroup_size_x"), ("wg_y", "k.workgroup_size_y"), ("wg_z", "k.workgroup_size_z"),
            ("grid_x", "k.grid_size_x"), ("grid_y", "k.grid_size_y"), ("grid_z", "k.grid_size_z"),
            ("region_name_id", "k.region_name_id"), ("event_id", "k.event_id"),
            ("stack_id", e("stack_id")), ("corr_id", e("correlation_id")), ("category_id", e("category_id")),
            ("graph_exec_id", "k.graph_exec_id" if "graph_exec_id" in have else None),
            ("graph_node_id", "k.graph_node_id" if "graph_node_id" in have else None),
        ]
        pmc_events = np.unique(pmc["event_id"]) if pmc is not None else None
        counted: list[dict[str, np.ndarray]] = []
        for batch in self._store_events("kernel_dispatch", f"{src} k{join}", "k", cols, "device_activity", _KERNELS):
            if pmc_events is not None:
                mask = np.isin(batch["event_id"], pmc_events)
                if mask.any():
                    counted.append({k: batch[k][mask] for k in
                                    ("event_id", "dispatch_id", "stack_id", "kernel_id", "agent_id")})
        if not counted:
            return None
        return {k: np.concatenate([c[k] for c in counted]) for k in counted[0]}

    def _write_counters(
        self, pmc: dict[str, np.ndarray] | None, counted: dict[str, np.ndarray] | None
    ) -> None:
        import numpy as np

        if pmc is None:
            return
        n_matched = 0
        if counted is not None:
            n_matched = int(np.isin(pmc["event_id"], counted["event_id"]).sum())
            create_temp_table(self.con, "_rocpd_counted", counted, source=self.db.path)
            try:
                # counters of a database under pmc_N/ or pass_N/ come from that collection pass
                pass_dir = self.db.path.parent.name
                pass_name = pass_dir if re.fullmatch(r"(pmc|pass)_\d+", pass_dir) else None
                self._insert("counter_values", pmc, _COUNTERS, {"pass": pass_name})
            finally:
                self.con.execute("DROP TABLE IF EXISTS _rocpd_counted").fetchall()
        self.counts["counter_values"] = n_matched
        self.counts["counter_values_without_dispatch"] = len(pmc["event_id"]) - n_matched

    def _read_copies(self) -> None:
        src = self.db.source("rocpd_memory_copy")
        self.counts["memory_copy"] = 0
        if src is None:
            return
        have = self.db.columns(src)
        join, e = self._event_join("m")
        cols: list[tuple[str, str | None]] = [
            ("tid", "m.tid"), ("start", "m.start"), ("end", 'm."end"'), ("name_id", "m.name_id"),
            ("dst_agent_id", "m.dst_agent_id"), ("src_agent_id", "m.src_agent_id"),
            ("dst_address", "m.dst_address"), ("src_address", "m.src_address"), ("size", "m.size"),
            ("queue_id", "m.queue_id"), ("stream_id", "m.stream_id"),
            ("region_name_id", "m.region_name_id" if "region_name_id" in have else None),
            ("stack_id", e("stack_id")), ("corr_id", e("correlation_id")), ("category_id", e("category_id")),
            ("graph_exec_id", "m.graph_exec_id" if "graph_exec_id" in have else None),
            ("graph_node_id", "m.graph_node_id" if "graph_node_id" in have else None),
        ]
        for _ in self._store_events("memory_copy", f"{src} m{join}", "m", cols, "device_activity", _COPIES):
            pass

    def _read_regions(self) -> None:
        src = self.db.source("rocpd_region")
        self.counts["region"] = 0
        if src is None:
            return
        join, e = self._event_join("r")
        cols: list[tuple[str, str | None]] = [
            ("tid", "r.tid"), ("start", "r.start"), ("end", 'r."end"'), ("name_id", "r.name_id"),
            ("stack_id", e("stack_id")), ("parent_stack_id", e("parent_stack_id")),
            ("corr_id", e("correlation_id")), ("category_id", e("category_id")),
        ]
        # roctx messages sit in the event's extdata JSON ({"message": ...}); API calls have '{}'.
        message = (
            "CASE WHEN e.extdata IS NOT NULL AND e.extdata NOT IN ('{}', '') "
            "THEN json_extract(e.extdata, '$.message') END"
            if join else "NULL"
        )
        for _ in self._store_events("region", f"{src} r{join}", "r", cols, "host_events", _REGIONS,
                                    ("message", message)):
            pass

    def _read_pc_samples(self) -> None:
        """PC samples: ``rocpd_sample`` rows on the ``pc_sample`` track, their fields pivoted from
        ``rocpd_pmc_event`` (the SDK's ``pc_sampling`` view, written out over the tables)."""
        import numpy as np

        self.counts["pc_sample"] = 0
        db = self.db
        srcs = [db.source(b) for b in ("rocpd_sample", "rocpd_track", "rocpd_event", "rocpd_pmc_event",
                                       "rocpd_info_pmc", "rocpd_string")]
        if any(x is None for x in srcs):
            return
        sample, track, event, pmc_event, info_pmc, string = srcs
        where, params = self._where("s", by_pid=False)
        fields = ", ".join(f"MAX(CASE WHEN i.name = '{f}' THEN p.value END)" for f in _PC_FIELDS)
        sql = (
            f"SELECT s.timestamp, e.stack_id, {fields}, "
            "MAX(CASE WHEN i.name = 'exec_mask' THEN p.value END) "
            f"FROM {sample} s JOIN {track} t ON t.id = s.track_id JOIN {event} e ON e.id = s.event_id "
            f"JOIN {pmc_event} p ON p.event_id = e.id JOIN {info_pmc} i ON i.id = p.pmc_id"
            + (where + " AND" if where else " WHERE")
            + f" t.name_id IN (SELECT id FROM {string} WHERE string = 'pc_sample') GROUP BY s.id"
        )
        names = ("timestamp", "stack_id", *_PC_FIELDS)
        n = 0
        cur = db.con.execute(sql, params)
        while rows := cur.fetchmany(_BATCH_ROWS):
            cols = list(zip(*rows))
            try:
                batch: dict[str, Any] = {
                    name: np.array([_NULL if v is None else int(v) for v in cols[j]], dtype=np.int64)
                    for j, name in enumerate(names)
                }
                # exec_mask is a 64-bit lane mask stored as REAL: 2^64 - 1 rounds up to 2^64
                batch["exec_mask"] = np.array(
                    [0 if v is None else max(0, min(int(v), 2**64 - 1)) for v in cols[len(names)]],
                    dtype=np.uint64)
            except (TypeError, ValueError, OverflowError):
                raise TraceInputError(db.path, "unexpected non-integer value in a PC sample "
                                               "(rocpd_sample / rocpd_pmc_event)") from None
            self._insert("pc_sample_rows", batch, _PC_SAMPLES)
            self._span(batch["timestamp"], batch["timestamp"])
            n += len(rows)
        self.counts["pc_sample"] = n

    def _count_skipped(self) -> None:
        for base, key in (("rocpd_memory_allocate", "memory_allocate"), ("rocpd_sample", "sample")):
            src = self.db.source(base)
            if src is None:
                self.counts[key] = 0
                continue
            by_pid = base != "rocpd_sample"  # samples have no pid column
            where, params = self._where("t", by_pid=by_pid)
            row = self.db.con.execute(f"SELECT count(*) FROM {src} t{where}", params).fetchall()
            self.counts[key] = int(row[0][0]) if row else 0
        self.counts["sample"] -= self.counts.get("pc_sample", 0)  # PC samples are stored

    def _rank_info(self, agents: list[dict[str, Any]]) -> RankInfo:
        db, proc, c = self.db, self.proc, self.counts
        node: dict[str, Any] = {}
        node_src = db.source("rocpd_info_node")
        if node_src:
            nid = proc.row.get("nid")
            rows = db.dict_rows(f"SELECT * FROM {node_src} WHERE id = ?", (nid,)) if nid is not None else []
            if not rows:
                rows = db.dict_rows(f"SELECT * FROM {node_src} LIMIT 1")
            node = rows[0] if rows else {}
        stored = c["kernel_dispatch"] + c["memory_copy"] + c["region"] + c["pc_sample"]
        invalid = c.get("bad_timestamps", 0)  # no start or end, or a time past 64 bits
        skipped = c["memory_allocate"] + c["sample"] + invalid
        pr = proc.row
        metadata: dict[str, Any] = {
            "format": "rocpd",
            "schema_version": db.version,
            "guid": proc.guid,
            "pid": proc.pid,
            "ppid": pr.get("ppid"),
            "command": pr.get("command"),
            "process_init_ns": pr.get("init"),
            "process_fini_ns": pr.get("fini"),
            # rocprofv3's own configuration (what was traced, counter sets, filters); the
            # process environment is deliberately not copied (it may hold secrets).
            "rocprofv3_config": _json(pr.get("extdata")) if pr.get("extdata") else None,
            "node": {k: node.get(k) for k in ("hostname", "machine_id", "system_name", "release",
                                              "version", "hardware_name") if k in node},
            "agents": [{k: a.get(k) for k in ("id", "type", "absolute_index", "logical_index",
                                              "type_index", "name", "product_name")} for a in agents],
            "counts": dict(c),
        }
        return RankInfo(
            rank=self.rank,
            rank_source="process",
            path=db.path,
            host=_str(node.get("hostname")),
            schema_version=_int(str(db.version or "3").split(".")[0]),
            trace_id=proc.guid,
            runtime="hip",
            metadata=metadata,
            n_trace_events=stored + skipped,
            n_python_events=0,
            n_flow_events=0,
            n_other_skipped=skipped - invalid,
            n_invalid_events=invalid,
            first_ns=self.first_ns,
            last_ns=self.last_ns,
            captured_at_unix_s=None,  # rocpd times are a boot-time clock, not wall clock
        )


# ---------------------------------------------------------------------------------------------


class RocpdParser(Parser, format_name="rocpd"):
    """rocprofv3 rocpd SQLite (``<pid>_results.db``); a directory is one run, one rank per process."""

    suffixes = ("_results.db", ".db")

    def sniff(self, path: Path) -> bool:
        try:
            if _read_magic(path) != SQLITE_MAGIC:
                return False
        except TraceInputError:
            return False
        try:
            con = _connect(path)
        except SQLITE_ERRORS:
            return path.name.lower().endswith(".db")
        try:
            return _kind(_objects(con)) == "rocpd"
        except SQLITE_ERRORS:
            # A corrupt SQLite file named like a rocpd output: let parse() say what is wrong.
            return path.name.lower().endswith(".db")
        finally:
            con.close()

    def explain(self, path: Path) -> str:
        return refusal(lambda p: _Database.open(p).close(), path, "not a rocprofv3 rocpd database")

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        # Ranks: every process of every file, by pid; the same pid twice (two hosts, or a file
        # copied) keeps file-name order. Ranks are added in file order, as ingest expects.
        keys: list[tuple[int, int, str, int]] = []
        for fi, path in enumerate(files):
            db = _Database.open(path)
            try:
                for pi, proc in enumerate(db.processes):
                    keys.append((proc.pid if proc.pid is not None else 1 << 62, fi, proc.guid or "", pi))
            finally:
                db.close()
        rank_of = {(k[1], k[3]): r for r, k in enumerate(sorted(keys))}
        # ingest pairs ctx.ranks[i] with files[i] for file_sha256: one rank per file first, in
        # file order; further processes of a merged file come after, with their hash set here.
        first: list[RankInfo] = []
        extra: list[RankInfo] = []
        for fi, path in enumerate(files):
            db = _Database.open(path)
            try:
                multi = len(db.processes) > 1
                for pi, proc in enumerate(db.processes):
                    try:
                        info = _ProcessReader(db, proc, rank_of[(fi, pi)], ctx, multi).run()
                    except SQLITE_ERRORS as exc:
                        reason = f"corrupt or unreadable SQLite database ({one_line(exc)})"
                        raise TraceInputError(path, reason) from None
                    if pi == 0:
                        first.append(info)
                    else:
                        info.file_sha256 = file_sha256(path)
                        extra.append(info)
                ctx.progress(0, path.stat().st_size)
            finally:
                db.close()
        for info in first + extra:
            ctx.add_rank(info)
