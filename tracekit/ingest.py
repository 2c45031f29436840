"""Ingest: turn trace files and directories into runs in the store, atomically.

Each PATH is one run: a file, or a directory whose recognized files (searched recursively) are
the ranks/processes of that run. All runs of one call are written in a single DuckDB
transaction, so a failure of any of them leaves the store exactly as it was (a store file that
did not exist before is removed again). A run's id is derived from the SHA-256 of its files'
bytes, so ingesting the same content twice returns the existing run instead of a duplicate.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import itertools
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from tracekit import __version__
from tracekit.errors import ConfigError, StoreError, TraceInputError
from tracekit.limits import (
    DEFAULT_MEMORY_LIMIT,
    max_event_bytes,
    max_inflate_ratio,
    memory_limit_setting,
    temp_dir,
)
from tracekit.parsers import REGISTRY, IngestContext, Parser, get_parser
from tracekit.parsers._io import file_sha256
from tracekit.parsers.base import DeviceInfo, RankInfo
from tracekit.parsers.store_writer import insert_rows
from tracekit.store import connect, resolve_store, update_run_meta, utc_now

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.parsers.kineto import ReadAhead
    from tracekit.request_rows import RequestRecord
    from tracekit.server_metric_rows import Scrape

#: The request log of a capture directory (``tracekit capture`` writes it; one JSON object per
#: request, see :func:`tracekit.request_rows.write_requests`): stored with the run.
REQUESTS_FILE = "tracekit-requests.jsonl"
#: The server's Prometheus scrapes of a capture window (``tracekit capture --load`` writes it when
#: the server has a ``/metrics`` endpoint; :func:`tracekit.server_metric_rows.write_scrapes`).
SERVER_METRICS_FILE = "tracekit-server-metrics.jsonl"

#: Called as ``progress(n_events, n_bytes)`` with the trace events and input-file bytes (as on
#: disk) processed since the last call; the total of bytes is the sum of the inputs' sizes.
ProgressFn = Callable[[int, int], None]


@dataclass
class RunInput:
    """One run to ingest: its files (in name order), their format and content hash."""

    source: Path
    files: list[Path]
    format: str
    content_sha256: str
    file_hashes: list[str] = field(default_factory=list)
    input_bytes: int = 0
    #: a directory's request log (``tracekit capture`` writes it), read and checked up front
    requests: list[RequestRecord] | None = None
    server_metrics: list[Scrape] | None = None
    #: the parser instance that will read the files (``prepare`` may already have started it)
    parser: Parser | None = None

    @property
    def run_id(self) -> str:
        return self.content_sha256[:12]


@dataclass
class IngestResult:
    """Outcome for one PATH: its run id and whether it was new to the store."""

    run_id: str
    source: str
    format: str
    created: bool
    vendor: str = ""
    device_name: str | None = None
    n_files: int = 0
    n_device_events: int = 0
    n_host_events: int = 0
    n_trace_events: int = 0
    #: events read but not stored because physics forbids them (see ``runs.n_invalid_events``)
    n_invalid_events: int = 0
    #: stored already: the fields a different --label/--workload/--tag changed
    updated: list[str] = field(default_factory=list)
    #: things the user should know about the new run (e.g. its ranks ran on different devices)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _sniff(path: Path, format_name: str | None) -> str | None:
    names = [format_name] if format_name else list(REGISTRY)
    for name in names:
        if get_parser(name).sniff(path):
            return name
    return None


#: rocprofv3 writes the same records in every ``--output-format`` asked for; in one output folder
#: the most complete copy is read: rocpd (copy sizes, full agent records), then JSON, then CSV.
_ROCPROF_PREFERENCE = ("rocpd", "rocprofv3_json", "rocprofv3")


def _drop_derived_traces(by_format: dict[str, list[Path]]) -> None:
    """Leave out second copies of the same capture in one directory.

    * A JAX/XLA profile session holds ``<host>.xplane.pb`` and, derived from the same capture,
      ``<host>.trace.json.gz``: the XPlane is the complete source, so the JSON copy is left out.
    * A rocprofv3 output folder written with ``--output-format rocpd json csv`` holds the same
      records three times: only the most complete format is read (``_ROCPROF_PREFERENCE``).
    * An Nsight Systems report ``X.nsys-rep`` (or ``.qdrep``) beside its SQLite export ``X.sqlite``:
      the export is read.
    """
    def capture(f: Path) -> tuple[Path, str]:  # rocprofv3 names every file <prefix>_<what>
        return f.parent, f.name.split("_", 1)[0]

    kept: set[tuple[Path, str]] = set()
    for fmt in _ROCPROF_PREFERENCE:
        files = by_format.get(fmt)
        if not files:
            continue
        rest = [f for f in files if capture(f) not in kept]
        kept |= {capture(f) for f in files}
        if rest:
            by_format[fmt] = rest
        else:
            del by_format[fmt]
    nsys = by_format.get("nsys")
    if nsys:  # X.nsys-rep beside its export X.sqlite: the export is read, the report left out
        exports = {(f.parent, f.stem) for f in nsys if f.suffix.lower() == ".sqlite"}
        by_format["nsys"] = [f for f in nsys if f.suffix.lower() == ".sqlite" or (f.parent, f.stem) not in exports]
    xplanes = by_format.get("xplane")
    kineto = by_format.get("kineto")
    if not xplanes or not kineto:
        return
    stems = {(f.parent, re.sub(r"\.xplane\.pb(\.gz)?$", "", f.name)) for f in xplanes}
    rest = [f for f in kineto if (f.parent, re.sub(r"\.trace\.json(\.gz)?$", "", f.name)) not in stems]
    if rest:
        by_format["kineto"] = rest
    else:
        del by_format["kineto"]


def _dir_traces(p: Path, format_name: str | None) -> tuple[str, list[Path]]:
    """The format and the trace files of directory ``p``: one format, else TraceInputError."""
    if not os.access(p, os.R_OK | os.X_OK):
        raise TraceInputError(p, "cannot read directory (permission denied)")
    by_format: dict[str, list[Path]] = {}
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        fmt = _sniff(f, format_name)
        if fmt is not None:
            by_format.setdefault(fmt, []).append(f)
    if not by_format:
        raise TraceInputError(p, "directory holds no recognizable trace file")
    _drop_derived_traces(by_format)
    if len(by_format) > 1:
        found = ", ".join(f"{k} ({len(v)} files)" for k, v in sorted(by_format.items()))
        raise TraceInputError(p, f"directory mixes trace formats: {found}; ingest them separately")
    return next(iter(by_format.items()))


def _file_format(p: Path, format_name: str | None) -> str:
    """The format of trace file ``p``; TraceInputError saying why when it has none (the parser
    whose suffix it has explains)."""
    if not os.access(p, os.R_OK):
        raise TraceInputError(p, "cannot read file (permission denied)")
    if p.stat().st_size == 0:
        raise TraceInputError(p, "empty file")
    fmt = _sniff(p, format_name)
    if fmt is None:
        for name in [format_name] if format_name else sorted(REGISTRY):
            parser = get_parser(name)
            if p.name.lower().endswith(parser.suffixes):
                raise TraceInputError(p, parser.explain(p))
        known = ", ".join(sorted(REGISTRY))
        raise TraceInputError(p, f"not a recognized trace format (known formats: {known})")
    return fmt


def resolve_input(path: str | Path, format_name: str | None = None) -> RunInput:
    """Find the trace files of one PATH and their format; raise TraceInputError if there are none."""
    p = Path(path)
    if format_name is not None and format_name not in REGISTRY:
        raise TraceInputError(p, f"unknown format {format_name!r} (known: {', '.join(sorted(REGISTRY))})")
    if not p.exists():
        raise TraceInputError(p, "no such file or directory")
    fmt, files = _dir_traces(p, format_name) if p.is_dir() else (_file_format(p, format_name), [p])
    requests = None
    if p.is_dir() and (p / REQUESTS_FILE).is_file():
        from tracekit.request_rows import read_requests

        requests = read_requests(p / REQUESTS_FILE)
    scrapes = None
    if p.is_dir() and (p / SERVER_METRICS_FILE).is_file():
        from tracekit.server_metric_rows import read_scrapes

        scrapes = read_scrapes(p / SERVER_METRICS_FILE)
    hashes = [file_sha256(f) for f in files]
    if len(files) == 1:
        content = hashes[0]
    else:
        content = hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()
    return RunInput(
        source=p,
        files=files,
        format=fmt,
        content_sha256=content,
        file_hashes=hashes,
        input_bytes=sum(f.stat().st_size for f in files),
        requests=requests,
        server_metrics=scrapes,
    )


def _run_vendor(con: duckdb.DuckDBPyConnection, ctx: IngestContext) -> tuple[str, str | None]:
    """(vendor, device_name) of a run: the device that ran most activity, else what the trace says."""
    # fetchall, never fetchone: a half-read result blocks the next register() on the connection
    busiest_rows = con.execute(
        """SELECT rank, device, count(*) AS n FROM device_activity WHERE run_id = ?
           GROUP BY ALL ORDER BY n DESC LIMIT 1""",
        [ctx.run_id],
    ).fetchall()
    busiest = busiest_rows[0] if busiest_rows else None
    dev = None
    if busiest is not None:
        dev = next((d for d in ctx.devices if d.rank == busiest[0] and d.device == busiest[1]), None)
    if dev is None and ctx.devices:
        dev = ctx.devices[0]
    runtimes = {r.runtime for r in ctx.ranks if r.runtime}
    if dev is not None and dev.vendor:
        return dev.vendor, dev.name
    if "cuda" in runtimes:
        return "nvidia", dev.name if dev else None
    if "hip" in runtimes:
        return "amd", dev.name if dev else None
    if busiest is not None:
        return "other", dev.name if dev else None
    return "cpu", "CPU"


def _write_rollups(con: duckdb.DuckDBPyConnection, run_id: str, n_host: int) -> None:
    """Fill the run's rollups in ``run_meta`` (schema 5) from the views that compute them for a run
    without any: ``run_device_totals`` and ``run_main_device`` hold the one definition of each."""
    con.execute(
        """UPDATE run_meta SET n_device_events = t.n_device_events, device_time_ns = t.device_time_ns,
                  n_host_events = $h, main_rank = c.rank, main_device = c.device
           FROM run_device_totals t LEFT JOIN run_main_device c USING (run_id)
           WHERE t.run_id = $r AND run_meta.run_id = $r""",
        {"r": run_id, "h": n_host})


#: Ranks recorded on one host whose time ranges are this far apart (ns) and do not overlap are
#: separate captures (a directory of unrelated captures), not ranks of one.
CAPTURE_GAP_NS = 1_000_000_000


def _separate_captures(ranks: Sequence[RankInfo]) -> list[list[RankInfo]]:
    """The ranks of the host with the most separate captures, grouped into captures: ranks whose
    [first, last] ranges overlap or lie within :data:`CAPTURE_GAP_NS` of each other form one.
    Hosts are judged apart (unknown hosts together): other hosts' clocks may not be comparable,
    so ranks of different hosts never make separate captures. One group means one capture; ranks
    without events are left out."""
    by_host: dict[str | None, list[RankInfo]] = {}
    for r in ranks:
        if r.first_ns is not None and r.last_ns is not None:
            by_host.setdefault(r.host, []).append(r)
    worst: list[list[RankInfo]] = []
    for host_ranks in by_host.values():
        groups: list[list[RankInfo]] = []
        end: int | None = None
        for r in sorted(host_ranks, key=lambda x: (x.first_ns or 0, x.last_ns or 0)):
            assert r.first_ns is not None and r.last_ns is not None
            if end is None or r.first_ns > end + CAPTURE_GAP_NS:
                groups.append([])
            groups[-1].append(r)
            end = r.last_ns if end is None else max(end, r.last_ns)
        if len(groups) > len(worst):
            worst = groups
    return worst


def _check_one_capture(item: RunInput, ranks: Sequence[RankInfo]) -> None:
    groups = _separate_captures(ranks)
    if len(groups) < 2 or not item.source.is_dir():
        return
    groups.sort(key=lambda g: min(r.first_ns or 0 for r in g))
    gap = max(min(r.first_ns or 0 for r in b) - max(r.last_ns or 0 for r in a) for a, b in itertools.pairwise(groups))
    listed = "; ".join(f"{i}: " + ", ".join(sorted({Path(r.path).name for r in g})[:3])
                       + (", …" if len({r.path for r in g}) > 3 else "") for i, g in enumerate(groups, 1))
    from tracekit.formatting import duration_ns

    raise TraceInputError(
        item.source,
        f"holds {len(groups)} separate captures, recorded up to {duration_ns(gap)} apart ({listed}): put each "
        "capture's files in a folder of its own and ingest each folder (a single file is read alone, "
        "without its siblings), or pass --one-run if they are one capture",
    )


def _mixed_devices(con: duckdb.DuckDBPyConnection, ctx: IngestContext) -> str | None:
    """A warning when the devices that ran work (device rows) are of more than one model."""
    busy = set(con.execute("SELECT DISTINCT rank, device FROM device_activity WHERE run_id = ?",
                           [ctx.run_id]).fetchall())
    names: dict[str, set[int]] = {}
    for d in ctx.devices:
        if d.name and (d.rank, d.device) in busy:
            names.setdefault(d.name, set()).add(d.rank)
    if len(names) < 2:
        return None
    parts = [f"{n} (rank{'s' if len(r) > 1 else ''} {', '.join(map(str, sorted(r)))})" for n, r in sorted(names.items())]
    return f"one run mixes devices: {', '.join(parts)}; compare and cost them apart (ingest each as its own PATH)"


@dataclass(frozen=True)
class RunOptions:
    """What an ingest command says about every new run it writes (see :func:`ingest`)."""

    label: str | None = None
    workload: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    progress: ProgressFn | None = None
    python_events: bool = False
    captured_at: dt.datetime | None = None  # naive UTC; wins over the trace's own time
    one_run: bool = False


def _write_run(con: duckdb.DuckDBPyConnection, item: RunInput, opts: RunOptions) -> IngestResult:
    label, workload, tags = opts.label, opts.workload, opts.tags
    ctx = IngestContext(con, item.run_id, opts.progress, python_events=opts.python_events)
    (item.parser or get_parser(item.format)).parse(item.files, ctx)
    dropped = drop_impossible_events(con, item.run_id)
    for info in ctx.ranks:
        if dropped.get(info.rank):
            info.n_invalid_events += dropped[info.rank]
            bounds = con.execute(  # the rank's extent without what was dropped
                """SELECT min(lo), max(hi) FROM (
                     SELECT min(start_ns) lo, max(start_ns + dur_ns) hi FROM device_activity WHERE run_id = $r AND rank = $k
                     UNION ALL SELECT min(start_ns), max(start_ns + dur_ns) FROM host_events WHERE run_id = $r AND rank = $k)""",
                {"r": item.run_id, "k": info.rank}).fetchone()
            if bounds is not None:
                info.first_ns, info.last_ns = bounds
    if not opts.one_run:
        _check_one_capture(item, ctx.ranks)
    if item.requests is not None:
        from tracekit.request_rows import insert_requests

        insert_requests(con, item.run_id, item.requests)
    if item.server_metrics is not None:
        from tracekit.server_metric_rows import insert_scrapes

        insert_scrapes(con, item.run_id, item.server_metrics)
    hash_of = dict(zip(item.files, item.file_hashes))
    for info in ctx.ranks:
        # a rank read from one file carries that file's hash; a rank assembled from several
        # files (a rocprofv3 CSV prefix) carries the run's content hash
        info.file_sha256 = hash_of.get(Path(info.path), item.content_sha256)
    vendor, device_name = _run_vendor(con, ctx)
    captured = [r.captured_at_unix_s for r in ctx.ranks if r.captured_at_unix_s is not None]
    captured_at = (
        dt.datetime.fromtimestamp(min(captured), dt.UTC).replace(tzinfo=None) if captured else None
    )
    if opts.captured_at is not None:  # given by the user (--captured-at): wins over the trace
        captured_at = opts.captured_at
    n_events = sum(r.n_trace_events for r in ctx.ranks)
    n_invalid = sum(r.n_invalid_events for r in ctx.ranks)
    n_dev, n_host, n_pc = con.execute(
        """SELECT (SELECT count(*) FROM device_activity WHERE run_id = $r),
                  (SELECT count(*) FROM host_events WHERE run_id = $r),
                  (SELECT count(*) FROM pc_sample_rows WHERE run_id = $r)""",
        {"r": item.run_id},
    ).fetchall()[0]
    insert_rows(con, "run_meta", [{
        "run_id": item.run_id,
        "content_sha256": item.content_sha256,
        "source": str(item.source),
        "format": REGISTRY[item.format].run_format,
        "vendor": vendor,
        "device_name": device_name,
        "label": label,
        "workload": workload,
        "captured_at": captured_at,
        "ingested_at": utc_now(),
        "tags": dict(tags),
        "n_files": len(item.files),
        "n_ranks": len({r.rank for r in ctx.ranks}),
        "input_bytes": item.input_bytes,
        "n_trace_events": n_events,
        "n_skipped_events": n_events - n_dev - n_host - n_pc,  # PC samples are stored records too
        "tracekit_version": __version__,
        "n_invalid_events": n_invalid,
    }], source=None)  # an error here is mapped by _plain_error
    insert_rows(con, "rank_meta", [
        {
            "run_id": item.run_id, "rank": r.rank, "world_size": r.world_size, "dist_backend": r.dist_backend,
            "rank_source": r.rank_source, "host": r.host, "path": str(r.path), "file_sha256": r.file_sha256,
            "schema_version": r.schema_version, "trace_id": r.trace_id, "base_time_ns": r.base_time_ns,
            "display_time_unit": r.display_time_unit, "runtime": r.runtime, "runtime_version": r.runtime_version,
            "trace_metadata": json.dumps(r.metadata or {}, default=str), "n_trace_events": r.n_trace_events,
            "n_python_events": r.n_python_events, "n_flow_events": r.n_flow_events,
            "n_other_skipped": r.n_other_skipped, "first_ns": r.first_ns, "last_ns": r.last_ns,
            "n_invalid_events": r.n_invalid_events,
        }
        for r in ctx.ranks
    ], source=None)
    insert_rows(con, "device_meta", [dict(zip(DeviceInfo.COLUMNS, row)) for row in ctx.device_rows()], source=None)
    _write_rollups(con, item.run_id, n_host)
    return IngestResult(
        run_id=item.run_id,
        source=str(item.source),
        format=REGISTRY[item.format].run_format,
        created=True,
        vendor=vendor,
        device_name=device_name,
        n_files=len(item.files),
        n_device_events=int(n_dev),
        n_host_events=int(n_host),
        n_trace_events=n_events,
        n_invalid_events=n_invalid,
        warnings=[w for w in (_mixed_devices(con, ctx), _invalid_note(n_invalid, n_events), *ctx.warnings) if w],
    )


#: A gap (ns) between consecutive event starts of one rank that splits it into separate groups: a
#: profile covers seconds to minutes, so events a day away from all others are a corrupt or
#: sentinel timestamp when there are few of them. Also the longest duration an event may have.
FAR_NS = 86_400 * 10**9

#: A group of a rank's events (split at gaps over :data:`FAR_NS`) holding less than this share of
#: the rank's events is stray: its times cannot be right. Larger groups are captures pooled into
#: one run on purpose (``one_run``), kept.
STRAY_SHARE = 0.01

#: The start-time ranges of each rank's stray groups. ``$r`` is the run id.
_STRAY = f"""
WITH ev AS (
    SELECT rank, start_ns FROM device_activity WHERE run_id = $r
    UNION ALL SELECT rank, start_ns FROM host_events WHERE run_id = $r
), gaps AS (
    SELECT rank, start_ns,
           CASE WHEN start_ns::HUGEINT - lag(start_ns) OVER (PARTITION BY rank ORDER BY start_ns) > {FAR_NS}
                THEN 1 ELSE 0 END AS new_group
    FROM ev
), grouped AS (
    SELECT rank, start_ns,
           sum(new_group) OVER (PARTITION BY rank ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS grp
    FROM gaps
), sized AS (
    SELECT rank, grp, min(start_ns) AS lo, max(start_ns) AS hi, count(*) AS n,
           sum(count(*)) OVER (PARTITION BY rank) AS total
    FROM grouped GROUP BY rank, grp
)
SELECT rank, lo, hi FROM sized WHERE n < {STRAY_SHARE} * total
"""


def _plain_error(exc: BaseException, store_path: Path, item: RunInput | None) -> Exception | None:
    """The one-line error for what went wrong inside an ingest's transaction, blamed on what
    caused it: the memory limit, the disk, the input being read, or the store; None to re-raise.
    DuckDB's "Current transaction is aborted" (from a cleanup after the failure) gives way to the
    failure itself, found in the exception's context."""
    while "transaction is aborted" in str(exc) and exc.__context__ is not None:
        exc = exc.__context__
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    source = item.source if item is not None else store_path
    if isinstance(exc, (duckdb.OutOfMemoryException, MemoryError)):
        limit = os.environ.get("TRACEKIT_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT
        return ConfigError("TRACEKIT_MEMORY_LIMIT", f"{limit} is too little for {source} ({first}); "
                           "raise it, e.g. TRACEKIT_MEMORY_LIMIT=4GB")
    if isinstance(exc, RecursionError):
        return TraceInputError(source, "nested too deeply to read")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return StoreError(source, "no space left on device (free space where the store is, or point "
                          "TRACEKIT_TMPDIR elsewhere)")
    if isinstance(exc, (duckdb.ConversionException, duckdb.InvalidInputException, duckdb.OutOfRangeException))\
            and item is not None:
        return TraceInputError(source, f"bad value in the trace: {first}")
    if isinstance(exc, duckdb.Error):
        return StoreError(store_path, f"ingest failed in DuckDB: {first}")
    return None


def drop_impossible_events(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[int, int]:
    """Delete the run's stored device and host events that physics forbids, inside the ingest's
    transaction; return how many were dropped per rank.

    Dropped: a negative duration (an end before its start; ``device_dur_ns`` too), a duration over
    :data:`FAR_NS` (a day), and the events of a stray group: a rank's events split at gaps of
    more than a day between consecutive starts, a group with under :data:`STRAY_SHARE` of them (a
    corrupt or sentinel timestamp such as ``-1``, far from the capture). Times are compared as
    HUGEINT, so no sum overflows. The usual trace costs one aggregate scan."""
    spans = con.execute(
        """SELECT min(lo), max(hi), min(shortest) FROM (
             SELECT min(start_ns) lo, max(start_ns::HUGEINT + dur_ns) hi, least(min(dur_ns), min(device_dur_ns)) shortest
             FROM device_activity WHERE run_id = $r
             UNION ALL SELECT min(start_ns), max(start_ns::HUGEINT + dur_ns), min(dur_ns)
             FROM host_events WHERE run_id = $r)""", {"r": run_id}).fetchone()
    if spans is None or spans[0] is None or (spans[1] - spans[0] <= FAR_NS and (spans[2] or 0) >= 0):
        return {}  # nothing can be out of bounds
    con.execute("CREATE OR REPLACE TEMP TABLE tracekit_stray AS " + _STRAY, {"r": run_id})
    dropped: dict[int, int] = {}
    try:
        for table, extra in (("device_activity", " OR coalesce(t.device_dur_ns, 0) < 0"), ("host_events", "")):
            where = f"""t.run_id = $r AND (t.dur_ns < 0{extra} OR t.dur_ns > {FAR_NS}
                OR EXISTS (SELECT 1 FROM tracekit_stray s WHERE s.rank = t.rank AND t.start_ns BETWEEN s.lo AND s.hi))"""
            # one scan: the deleted rows' ranks come back (few: only what physics forbids)
            for (rank,) in con.execute(f"DELETE FROM {table} t WHERE {where} RETURNING t.rank",
                                       {"r": run_id}).fetchall():
                dropped[int(rank)] = dropped.get(int(rank), 0) + 1
    finally:
        con.execute("DROP TABLE IF EXISTS tracekit_stray")
    return dropped


def _invalid_note(n_invalid: int, n_events: int) -> str | None:
    if not n_invalid:
        return None
    return (f"dropped {n_invalid:,} of {n_events:,} events that cannot be right (a negative duration, a "
            "truncated or repeated record, or a time more than a day from the rest of the trace); "
            "counted in runs.n_invalid_events")


def _ingest_one(con: duckdb.DuckDBPyConnection, item: RunInput, opts: RunOptions) -> IngestResult:
    """Write one input as a new run, or, when its content is stored already, apply the command's
    --label/--workload/--tag to that run."""
    row = con.execute(
        "SELECT run_id, format, vendor, device_name, n_files FROM run_meta WHERE content_sha256 = ?",
        [item.content_sha256],
    ).fetchone()
    if row is None:
        return _write_run(con, item, opts)
    return IngestResult(
        run_id=row[0], source=str(item.source), format=row[1], created=False,
        vendor=row[2], device_name=row[3], n_files=row[4],
        updated=update_run_meta(con, row[0], label=opts.label, workload=opts.workload,
                                tags=dict(opts.tags) if opts.tags else None),
    )


def _roll_back(con: duckdb.DuckDBPyConnection) -> None:
    """Roll the ingest's transaction back and close the connection."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:  # the transaction is already gone: nothing was committed
        pass
    con.close()


@contextmanager
def store_transaction(store_path: Path, on_lock_wait: Callable[[], None] | None,
                      reading: Callable[[], RunInput | None] = lambda: None) -> Iterator[duckdb.DuckDBPyConnection]:
    """One write transaction on the store file ``store_path``: BEGIN, then COMMIT when the block
    ends. On any failure it is rolled back, a store this call created is removed again, and the
    error becomes one line (:func:`_plain_error`, blaming the input ``reading()`` names)."""
    existed = store_path.exists()
    con = None
    try:
        con = connect(store_path, on_wait=on_lock_wait)
        con.execute("BEGIN")
        yield con
        con.execute("COMMIT")
    except BaseException as exc:
        if con is not None:
            _roll_back(con)
            con = None
        if not existed:
            for leftover in (store_path, Path(str(store_path) + ".wal")):
                leftover.unlink(missing_ok=True)
        plain = _plain_error(exc, store_path, reading())
        if plain is not None:
            raise plain from None
        raise
    finally:
        if con is not None:
            con.close()


def _prepared_inputs(paths: Sequence[str | Path], format_name: str | None, python_events: bool,
                     read_ahead: ReadAhead | None) -> list[RunInput]:
    """Each PATH resolved and checked, its parser prepared: store-independent work (imports,
    decoding) may start now, in the background. A read-ahead no input claims is stopped."""
    try:
        items = [resolve_input(p, format_name) for p in paths]
        for item in items:
            item.parser = get_parser(item.format)
            item.parser.prepare(item.files, python_events=python_events, started=read_ahead)
    finally:
        if read_ahead is not None and not read_ahead.claimed:
            read_ahead.cancel()  # for a file this ingest does not read (or not as it is now)
    return items


def _elsewhere(paths: Sequence[str | Path], target: str | Path, read_ahead: ReadAhead | None, jobs: int,
               ray: str | None = None, ray_analyze: Callable[[list[str], Path], object] | None = None,
               **options: Any) -> list[IngestResult]:
    """Ingest into a lake (:func:`tracekit.ingest_lake.ingest_into_lake`) or, with ``jobs`` > 1,
    parse the runs in parallel and store them in one transaction (:mod:`tracekit.ingest_jobs`), or
    with ``ray``, one Ray task per run (:mod:`tracekit.ingest_ray`).
    Each run's own ingest reads its files: a read-ahead started for this command is stopped."""
    from tracekit.ingest_jobs import MAX_JOBS, default_jobs, ingest_in_parallel

    if read_ahead is not None:
        read_ahead.cancel()
    if jobs < 0 or jobs > MAX_JOBS:
        raise ConfigError("--jobs", f"{jobs} is not from 0 (one per core) to {MAX_JOBS}")
    if ray is not None:
        if jobs != 1:
            raise ConfigError("--jobs", "give --jobs or --ray, not both (Ray runs a task per CPU of its cluster)")
        from tracekit.ingest_ray import ingest_on_ray

        options.pop("analyze", None)  # Ray tasks analyze with ray_analyze
        options.pop("analyze_threads", None)
        return ingest_on_ray(paths, target, ray, analyze=ray_analyze, **options)
    jobs = jobs or default_jobs()
    if isinstance(target, str):
        from tracekit.ingest_lake import ingest_into_lake

        return ingest_into_lake(paths, target, jobs=jobs, **options)
    items = [resolve_input(p, options.get("format_name")) for p in paths]  # all checked first
    # the store is written by one ingest() of this process (its own share, then the workers'
    # staged runs before its COMMIT), which leaves a store it created absent on failure
    with tempfile.TemporaryDirectory(prefix="tracekit-stage-", dir=temp_dir()) as stage_dir:
        done = ingest_in_parallel(items, target, jobs, Path(stage_dir), options)
    return [done[item.run_id] for item in items]


def ingest(  # noqa: PLR0913 - the public API: every option is keyword-only with a default
    paths: Sequence[str | Path],
    store: str | Path | None = None,
    *,
    label: str | None = None,
    workload: str | None = None,
    tags: Mapping[str, str] | None = None,
    format_name: str | None = None,
    progress: ProgressFn | None = None,
    on_lock_wait: Callable[[], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    python_events: bool = False,
    captured_at: dt.datetime | None = None,
    before_commit: Callable[[duckdb.DuckDBPyConnection, list[IngestResult]], None] | None = None,
    one_run: bool = False,
    read_ahead: ReadAhead | None = None,
    jobs: int = 1,
    ray: str | None = None,
    ray_analyze: Callable[[list[str], Path], object] | None = None,
    analyze: Callable[[duckdb.DuckDBPyConnection, list[str]], object] | None = None,
    analyze_threads: int | None = None,
) -> list[IngestResult]:
    """Ingest each PATH as one run into ``store`` (default ``$TRACEKIT_STORE`` or ./tracekit.duckdb,
    or a lake URL: :mod:`tracekit.ingest_lake`).

    All inputs are checked (existence, format, readability) before the store is touched; the runs
    are then written in one transaction. ``on_start(total_bytes)`` is called once the inputs are
    resolved, then ``progress(n_events, n_bytes)`` as they are read. ``python_events`` stores
    Python-stack events (Kineto ``python_function``, the XLA Python tracer) as host events of
    category ``python``; by default they are only counted (they can be 95 % of a trace). It applies
    to new runs: content already in the store is not re-read. ``captured_at`` (UTC; an aware
    datetime is converted) replaces the capture time read from the traces, for new runs.
    ``before_commit(con, results)`` is called with the writer connection once every run is
    written, before COMMIT, for read-only queries of what was stored (the CLI's summary; no
    second connection). A directory whose files are separate captures (ranks recorded on one host
    more than :data:`CAPTURE_GAP_NS` apart, e.g. a decode and a prefill capture side by side) is
    refused unless ``one_run``; a run whose ranks ran on different devices carries a warning.
    ``read_ahead`` is a Kineto file already being read in the background
    (:func:`tracekit.parsers.kineto.read_ahead`, which the CLI starts before DuckDB loads): used if
    this ingest reads the same content, else stopped once the inputs are resolved. Raises
    :class:`TraceInputError` for bad input and :class:`StoreError` for store problems; in both
    cases the store is unchanged. ``ray`` (a Ray address, ``local`` for a private instance) ingests
    one run per Ray task (:mod:`tracekit.ingest_ray`), each task calling ``ray_analyze([run_id],
    staged_store_file)`` once its run is staged (the CLI passes :func:`tracekit.api.analyze_runs`).
    ``analyze(con, run_ids)`` (``tracekit ingest --analyze`` passes
    :func:`tracekit.api.analyze_open`) analyzes the new runs on the writer connection before
    COMMIT, so runs and findings are stored together; with ``jobs`` each worker analyzes the runs
    it stages, into a lake with each run. It must be a module-level function (workers import it).
    ``analyze_threads``: DuckDB threads for that analysis (default: every core; a ``--jobs``
    worker uses one, the other cores being busy with the other processes).
    """
    if not paths:
        raise TraceInputError("<none>", "no input path given")
    # settings are checked before any input is read or the store opened
    memory_limit_setting(), temp_dir(), max_event_bytes(), max_inflate_ratio()
    target = resolve_store(store)
    if isinstance(target, str) or (jobs != 1 and len(paths) > 1) or ray is not None:
        # a lake URL (each run staged in a file, then published) or runs parsed in parallel
        return _elsewhere(paths, target, read_ahead, jobs, ray, ray_analyze, format_name=format_name,
                          label=label, workload=workload, tags=tags, progress=progress, on_start=on_start,
                          python_events=python_events, captured_at=captured_at, before_commit=before_commit,
                          one_run=one_run, on_lock_wait=on_lock_wait, analyze=analyze,
                          analyze_threads=analyze_threads)
    items = _prepared_inputs(paths, format_name, python_events, read_ahead)
    if captured_at is not None and captured_at.tzinfo is not None:
        captured_at = captured_at.astimezone(dt.UTC).replace(tzinfo=None)
    if on_start is not None:
        on_start(sum(i.input_bytes for i in items))
    results: list[IngestResult] = []
    current: RunInput | None = None
    with store_transaction(target, on_lock_wait, lambda: current) as con:
        seen: dict[str, IngestResult] = {}
        opts = RunOptions(label=label, workload=workload, tags=tags or {}, progress=progress,
                          python_events=python_events, captured_at=captured_at, one_run=one_run)
        for item in items:
            current = item
            if item.content_sha256 not in seen:
                seen[item.content_sha256] = _ingest_one(con, item, opts)
            results.append(seen[item.content_sha256])
        new = list(dict.fromkeys(r.run_id for r in results if r.created))
        if analyze is not None and new:
            # alone on the machine, the analyzers' sorts and joins may use every core
            con.execute(f"SET threads = {analyze_threads or max(1, os.cpu_count() or 1)}")
            analyze(con, new)
        if before_commit is not None:
            before_commit(con, results)
    return results
