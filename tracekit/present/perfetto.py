"""One run as a Chrome-trace JSON document (opens in ui.perfetto.dev and chrome://tracing).

:func:`write_chrome_trace` reads the run on an open connection and streams the events, as JSON
text DuckDB produces, to a sink the caller opens; it opens no file itself (the ``tracekit
export`` command's file is :func:`tracekit.exports.export_perfetto`, the dashboard's download a
temporary file).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

import duckdb

from tracekit.errors import TraceInputError
from tracekit.store import resolve_run_id

#: tracekit's device category → the Kineto ``cat`` that the Kineto parser maps back to it, so an
#: exported file re-ingests as the same device rows (``xla_async`` has no Kineto spelling and is
#: written as is; re-ingested it becomes a host event of category ``other``).
_KINETO_DEVICE_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset",
                      "mtia_ccp": "mtia_ccp_events"}

#: Host-event categories exported through the ops, runtime_calls and annotations views; every other
#: category (XPlane TraceMe rows, XLA module spans, syncs, Python frames, ...) is exported as is,
#: with its stored category as ``cat``.
_VIEWED_HOST = "('op', 'runtime', 'driver', 'annotation', 'gpu_annotation', 'step')"

#: Rows fetched from DuckDB per batch while streaming the events out.
EXPORT_BATCH_ROWS = 50_000

#: Evidence keys (integer ns on the trace clock) that place a finding's instant event.
_EVIDENCE_TIME_KEYS = ("start_ns", "window_start_ns", "first_start_ns", "ts_ns")


def _us(col: str) -> str:
    """SQL: an integer-ns column as the exact decimal text of µs with 3 decimals (no float)."""
    return (f"(CASE WHEN {col} < 0 THEN '-' ELSE '' END || (abs({col}) // 1000)::VARCHAR || '.' "
            f"|| lpad((abs({col}) % 1000)::VARCHAR, 3, '0'))")


def _us_text(ns: int) -> str:
    return f"{'-' if ns < 0 else ''}{abs(ns) // 1000}.{abs(ns) % 1000:03d}"


def write_chrome_trace(con: duckdb.DuckDBPyConnection, run_id: str,
                       open_sink: Callable[[], AbstractContextManager[IO[Any]]], *,
                       store_path: str | Path) -> dict[str, Any]:
    """Write run ``run_id`` (an id or unique prefix) as a Chrome-trace JSON document to the text
    stream ``open_sink()`` yields, opened only once the run's threads, window and findings are
    read (an unknown run opens nothing).

    Device activity is ``ph: "X"`` on one process per (rank, device) and one thread per stream;
    host ops, runtime/driver calls, annotations and every other host event (XPlane TraceMe rows,
    XLA module spans, syncs; ``cat`` = the stored category) are ``ph: "X"`` on one process per
    rank and one thread per host thread; every runtime call with device activity gets a flow (``s``/``f``,
    ``id`` = correlation id, ``bp: "e"``) to its first kernel; stored findings become global
    instant events. ``ts``/``dur`` are µs written as exact decimals of the stored integer ns.
    ``cat`` is the Kineto category (``kernel``, ``gpu_memcpy``, ``cpu_op``, ``cuda_runtime``, ...)
    so the file re-ingests as a Kineto trace. Events are produced as JSON text by DuckDB and
    streamed out in batches of :data:`EXPORT_BATCH_ROWS` rows. ``store_path`` is named in the
    document's metadata and in errors. Uses (and drops) the TEMP table ``tk_threads`` on ``con``.

    Returns the counts written: events per kind, flows, findings, processes, threads.
    """
    counts: dict[str, Any] = {}
    run_id = resolve_run_id(con, run_id, store_path)
    run = con.execute(
        "SELECT format, vendor, device_name, label, workload, n_ranks FROM runs WHERE run_id = ?",
        [run_id],
    ).fetchall()
    if not run:
        raise TraceInputError(store_path, f"no run {run_id!r} in the store (see `tracekit runs`)")
    fmt, vendor, device_name, label, workload, n_ranks = run[0]
    con.execute("DROP TABLE IF EXISTS temp.tk_threads")
    con.execute(
        f"""CREATE TEMP TABLE tk_threads AS
        WITH t AS (
            SELECT DISTINCT rank, 'device' AS side, device, stream AS thread FROM kernels WHERE run_id = $r
            UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM ops WHERE run_id = $r
            UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM runtime_calls WHERE run_id = $r
            UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM annotations WHERE run_id = $r
            UNION SELECT DISTINCT rank, 'host', NULL::INTEGER, tid FROM host_events
                  WHERE run_id = $r AND category NOT IN {_VIEWED_HOST})
        SELECT rank, side, device, thread,
               dense_rank() OVER (ORDER BY rank, side DESC, device) AS pid,
               row_number() OVER (PARTITION BY rank, side, device
                                  ORDER BY TRY_CAST(thread AS BIGINT) NULLS LAST, thread) AS tid
        FROM t""",
        {"r": run_id},
    )
    threads = con.execute(
        "SELECT rank, side, device, thread, pid, tid FROM tk_threads ORDER BY pid, tid"
    ).fetchall()
    window = con.execute(
        "SELECT min(first_ns), max(last_ns) FROM ranks WHERE run_id = ?", [run_id]
    ).fetchall()[0]
    findings = con.execute(
        """SELECT analyzer, severity, title, detail, evidence::VARCHAR, saving_ns, saving_fraction
           FROM findings WHERE run_id = ? ORDER BY analyzer, title""",
        [run_id],
    ).fetchall()
    analyzed = bool(con.execute(
        "SELECT count(*) FROM metric_rows WHERE run_id = ?", [run_id]
    ).fetchall()[0][0]) or bool(findings)

    queries = _event_queries()
    meta_events, seen_pids = _meta_events(threads)
    start = window[0] if window[0] is not None else 0
    finding_meta, instant_lines = _finding_events(findings, start, min(seen_pids, default=1))

    metadata = {
        "tracekit": {"version": _version(), "run_id": run_id, "store": str(store_path)},
        "run": {"format": fmt, "vendor": vendor, "device_name": device_name, "label": label,
                "workload": workload, "ranks": n_ranks},
        "window_ns": [window[0], window[1]],
        "analyzed": analyzed,
        "findings_present": bool(findings),
        "findings": finding_meta,
        "processes": len(seen_pids),
    }
    try:
        with open_sink() as fh:
            fh.write('{"displayTimeUnit":"ns","traceEvents":[\n')
            first = True

            def write_lines(lines: list[str]) -> None:
                nonlocal first
                if not lines:
                    return
                fh.write(("" if first else "\n,") + "\n,".join(lines))
                first = False

            write_lines([json.dumps(e) for e in meta_events])
            for kind, sql in queries:
                res = con.execute(sql, {"r": run_id})
                n = 0
                while True:
                    batch = res.fetchmany(EXPORT_BATCH_ROWS)
                    if not batch:
                        break
                    n += len(batch)
                    write_lines([row[0] for row in batch])
                counts[kind] = n
            write_lines(instant_lines)
            counts["findings"] = len(instant_lines)
            counts["processes"] = len(seen_pids)
            counts["threads"] = len(threads)
            metadata["counts"] = counts
            fh.write("\n],\n\"metadata\":" + json.dumps(metadata, default=str) + "}\n")
    finally:
        con.execute("DROP TABLE IF EXISTS temp.tk_threads")
    return counts


def _event_queries() -> list[tuple[str, str]]:
    """(kind, SQL) per kind of event: each statement yields one Chrome-trace event (or, for
    ``flows``, a start and a finish event) per row as JSON text, on the ``tk_threads`` ids; ``$r``
    is the run id."""
    kineto_dev = "CASE k.category " + " ".join(
        f"WHEN '{k}' THEN '{v}'" for k, v in _KINETO_DEVICE_CAT.items()) + " ELSE k.category END"
    kineto_host = "h.category"

    def x(cat: str, name: str, s: str, d: str, args: str) -> str:
        return ("""'{"ph":"X","cat":' || to_json(""" + cat + """) || ',"name":' || to_json(""" + name
                + """) || ',"pid":' || m.pid || ',"tid":' || m.tid || ',"ts":' || """ + _us(s)
                + """ || ',"dur":' || """ + _us(d) + """ || ',"args":' || to_json(""" + args + """) || '}'""")

    queries: list[tuple[str, str]] = [
        ("kernels", f"""
            SELECT {x(cat=kineto_dev, name='k.name', s='k.start_ns', d='k.dur_ns', args='''struct_pack(
                device := k.device, stream := k.stream, correlation := k.correlation_id,
                "External id" := k.external_id, category := k.category,
                trace_category := k.trace_category, grid := CASE WHEN k.grid_x IS NOT NULL THEN [k.grid_x, k.grid_y, k.grid_z] END,
                block := CASE WHEN k.block_x IS NOT NULL THEN [k.block_x, k.block_y, k.block_z] END, "bytes" := k.bytes,
                kind := k.kind, hlo_category := k.hlo_category)''')}
            FROM kernels k JOIN tk_threads m
              ON m.side = 'device' AND m.rank = k.rank AND m.device IS NOT DISTINCT FROM k.device
             AND m.thread IS NOT DISTINCT FROM k.stream
            WHERE k.run_id = $r ORDER BY k.rank, k.start_ns"""),
        ("ops", f"""
            SELECT {x(cat="'cpu_op'", name='h.name', s='h.start_ns', d='h.dur_ns', args='''struct_pack(
                "External id" := h.external_id, "Sequence number" := h.sequence_number,
                "Input Dims" := h.input_dims::JSON, "Input type" := h.input_types::JSON,
                flops := h.flops, tid := h.tid)''')}
            FROM ops h JOIN tk_threads m
              ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
            WHERE h.run_id = $r ORDER BY h.rank, h.start_ns"""),
        ("runtime_calls", f"""
            SELECT {x(cat=kineto_host, name='h.name', s='h.start_ns',
                             d='h.dur_ns', args='''struct_pack(
                correlation := h.correlation_id, "External id" := h.external_id, cbid := h.cbid,
                tid := h.tid)''')}
            FROM (SELECT *, CASE WHEN trace_category IN ('cuda_driver', 'cuda_runtime', 'Runtime', 'mtia_runtime')
                  THEN trace_category ELSE 'cuda_runtime' END AS category FROM runtime_calls) h JOIN tk_threads m
              ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
            WHERE h.run_id = $r ORDER BY h.rank, h.start_ns"""),
        ("annotations", f"""
            SELECT {x(cat="CASE WHEN h.on_device THEN 'gpu_user_annotation' ELSE 'user_annotation' END",
                             name='h.name', s='h.start_ns', d='h.dur_ns', args='''struct_pack(
                "External id" := h.external_id, on_device := h.on_device, step_num := h.step_num,
                tid := h.tid)''')}
            FROM annotations h JOIN tk_threads m
              ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
            WHERE h.run_id = $r ORDER BY h.rank, h.start_ns"""),
        ("host_events", f"""
            SELECT {x(cat='h.category', name='h.name', s='h.start_ns', d='h.dur_ns', args='''struct_pack(
                category := h.category, trace_category := h.trace_category, device := h.device,
                correlation := h.correlation_id, tid := h.tid)''')}
            FROM host_events h JOIN tk_threads m
              ON m.side = 'host' AND m.rank = h.rank AND m.thread IS NOT DISTINCT FROM h.tid
            WHERE h.run_id = $r AND h.category NOT IN {_VIEWED_HOST} ORDER BY h.rank, h.start_ns"""),
        ("flows", """
            WITH pairs AS (
                SELECT c.rank, c.correlation_id,
                       arg_min(c.start_ns, c.start_ns) AS c_start, arg_min(c.tid, c.start_ns) AS c_tid,
                       arg_min(k.start_ns, k.start_ns) AS k_start,
                       arg_min(k.device, k.start_ns) AS k_device, arg_min(k.stream, k.start_ns) AS k_stream
                FROM runtime_calls c JOIN kernels k
                  ON k.run_id = c.run_id AND k.rank = c.rank AND k.correlation_id = c.correlation_id
                WHERE c.run_id = $r AND c.correlation_id IS NOT NULL
                GROUP BY c.rank, c.correlation_id)
            SELECT '{"ph":"s","cat":"ac2g","name":' || to_json('ac2g' || CASE WHEN p.rank = 0 THEN ''
                       ELSE ' rank ' || p.rank END) || ',"id":' || p.correlation_id
                   || ',"pid":' || mh.pid || ',"tid":' || mh.tid || ',"ts":' || """ + _us("p.c_start") + """ || '}'
                   || E'\\n,' ||
                   '{"ph":"f","bp":"e","cat":"ac2g","name":' || to_json('ac2g' || CASE WHEN p.rank = 0 THEN ''
                       ELSE ' rank ' || p.rank END) || ',"id":' || p.correlation_id
                   || ',"pid":' || md.pid || ',"tid":' || md.tid || ',"ts":' || """ + _us("p.k_start") + """ || '}'
            FROM pairs p
            JOIN tk_threads mh ON mh.side = 'host' AND mh.rank = p.rank AND mh.thread IS NOT DISTINCT FROM p.c_tid
            JOIN tk_threads md ON md.side = 'device' AND md.rank = p.rank
             AND md.device IS NOT DISTINCT FROM p.k_device AND md.thread IS NOT DISTINCT FROM p.k_stream
            ORDER BY p.rank, p.c_start"""),
    ]
    return queries


def _meta_events(threads: list[tuple[Any, ...]]) -> tuple[list[dict[str, Any]], set[int]]:
    """The process and thread name events for the ``tk_threads`` rows, and the process ids."""
    meta_events: list[dict[str, Any]] = []
    seen_pids: set[int] = set()
    for rank, side, device, thread, pid, tid in threads:
        if pid not in seen_pids:
            seen_pids.add(pid)
            pname = f"rank {rank} device {device}" if side == "device" else f"rank {rank} host"
            meta_events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                "args": {"name": pname}})
            meta_events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                "args": {"sort_index": pid}})
        tname = f"stream {thread}" if side == "device" else f"thread {thread}"
        meta_events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": tname}})
    return meta_events, seen_pids


def _finding_events(findings: list[tuple[Any, ...]], start: int, pid: int
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """(the findings for the metadata, their instant events as JSON text on process ``pid``): each
    placed at the first integer time key of its evidence (:data:`_EVIDENCE_TIME_KEYS`, ns), else
    at ``start`` (ns)."""
    finding_meta: list[dict[str, Any]] = []
    instant_lines: list[str] = []
    for analyzer, severity, title, detail, evidence, saving_ns, saving_fraction in findings:
        ev = json.loads(evidence) if evidence else None
        at = start
        if isinstance(ev, dict):
            for key in _EVIDENCE_TIME_KEYS:
                if isinstance(ev.get(key), int) and not isinstance(ev.get(key), bool):
                    at = ev[key]
                    break
        item = {"analyzer": analyzer, "severity": severity, "title": title, "detail": detail,
                "saving_ns": saving_ns, "saving_fraction": saving_fraction, "ts_ns": at}
        finding_meta.append({**item, "evidence": ev})
        args = {k: item[k] for k in ("detail", "severity", "analyzer", "saving_ns", "saving_fraction")}
        instant_lines.append(
            '{"ph":"i","s":"g","cat":"tracekit_finding","name":' + json.dumps(title)
            + ',"pid":' + str(pid) + ',"tid":0,"ts":' + _us_text(at)
            + ',"args":' + json.dumps(args, default=str) + "}"
        )
    return finding_meta, instant_lines


def _version() -> str:
    from tracekit import __version__

    return __version__
