"""Request rows: the load driver's per-request records, their log file and their rows in the store.

A :class:`RequestRecord` is one request of a load (:mod:`tracekit.collectors.load`) and one row
of the store's ``request_rows`` table (the ``requests`` view). This module is the store side of
them, free of the HTTP client: the request log a capture directory carries
(``tracekit.ingest.REQUESTS_FILE``, JSON lines: :func:`write_requests`, :func:`read_requests`),
the insert inside an ingest transaction (:func:`insert_requests`) and the attachment of a load's
records to a stored run (:func:`store_requests`, behind :func:`tracekit.api.store_requests`), and
a throwaway in-memory store of records for the analyzers' SQL (:func:`memory_store`).

DuckDB and :mod:`tracekit.store` are imported on use: the load driver re-exports this module and
``import tracekit.collectors`` stays cheap.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tracekit.errors import TraceInputError
from tracekit.jsonl import json_objects

if TYPE_CHECKING:  # pragma: no cover
    import duckdb


@dataclass
class RequestRecord:
    """One request. Times are integer ns; ``start_ns`` is Unix time (``time.time_ns()``) just
    before the request is sent, the others are durations from that instant (monotonic clock).

    ``ttft_ns``: to the first text-carrying chunk (None if none arrived). ``itl_ns``: gaps between
    successive text-carrying chunks. ``e2e_ns``: to the end of the stream, or to the failure.
    ``prompt_tokens``/``output_tokens``: from the usage chunk, else counted
    (``token_count_source``: ``"usage"`` or ``"counted"``). ``status``: HTTP status (None when no
    response came). ``error``: None for a complete stream, else why it failed. ``session_id`` and
    ``turn``: the agentic profile's conversation and turn (from 0); None for independent prompts.
    ``cached_tokens``: prompt tokens the server served from its prefix cache
    (``usage.prompt_tokens_details.cached_tokens``), None when it does not say."""

    request_id: int
    start_ns: int
    ttft_ns: int | None
    itl_ns: list[int]
    e2e_ns: int
    prompt_tokens: int | None
    output_tokens: int
    status: int | None
    error: str | None
    token_count_source: Literal["usage", "counted"]
    session_id: int | None = None
    turn: int | None = None
    cached_tokens: int | None = None

    @property
    def tpot_ns(self) -> float | None:
        """Time per output token after the first (ns): ``(e2e − ttft) / (output_tokens − 1)``."""
        if self.error is not None or self.ttft_ns is None or self.output_tokens < 2:
            return None
        return (self.e2e_ns - self.ttft_ns) / (self.output_tokens - 1)


class HasRecords(Protocol):
    """What holds a load's request records (a :class:`tracekit.collectors.load.LoadResult`)."""

    @property
    def records(self) -> Sequence[RequestRecord]: ...


#: The fields of a request log line (those of :class:`RequestRecord`) and their JSON types.
RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "request_id": (int,), "start_ns": (int,), "ttft_ns": (int, type(None)), "itl_ns": (list,),
    "e2e_ns": (int,), "prompt_tokens": (int, type(None)), "output_tokens": (int,),
    "status": (int, type(None)), "error": (str, type(None)), "token_count_source": (str,),
}
#: Fields a request log line may omit (logs written before schema 6 have none of them).
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "session_id": (int, type(None)), "turn": (int, type(None)), "cached_tokens": (int, type(None)),
}


def write_requests(records: Sequence[RequestRecord], path: str | Path) -> None:
    """Write ``records`` as a request log to ``path``: JSON lines, one object per request with the
    fields of :class:`RequestRecord` (ns, tokens)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({k: getattr(r, k) for k in (*RECORD_FIELDS, *OPTIONAL_FIELDS)}) + "\n"
                      for r in records)


def read_requests(path: str | Path) -> list[RequestRecord]:
    """Read a request log (see :func:`write_requests`); raise :class:`TraceInputError` naming the
    line and the problem when it is malformed."""
    return [_record(path, i, doc) for i, doc in json_objects(path, "the request log", "request")]


def _record(path: str | Path, i: int, doc: dict[str, Any]) -> RequestRecord:
    """The record of line ``i`` of a request log."""
    for key, types in RECORD_FIELDS.items():
        v = doc.get(key)
        if not isinstance(v, types) or isinstance(v, bool):
            raise TraceInputError(path, f"line {i}: {key} missing or of the wrong type")
    if not all(isinstance(g, int) and not isinstance(g, bool) for g in doc["itl_ns"]):
        raise TraceInputError(path, f"line {i}: itl_ns must be a list of integers (ns)")
    if doc["token_count_source"] not in ("usage", "counted"):
        raise TraceInputError(path, f"line {i}: token_count_source must be 'usage' or 'counted'")
    for key, types in OPTIONAL_FIELDS.items():
        v = doc.get(key)
        if not isinstance(v, types) or isinstance(v, bool):
            raise TraceInputError(path, f"line {i}: {key} of the wrong type")
    fields: dict[str, Any] = {k: doc.get(k) for k in (*RECORD_FIELDS, *OPTIONAL_FIELDS)}  # optional: may be absent
    return RequestRecord(**fields)


#: The columns of ``request_rows`` that a record fills (all but ``run_id``) and their SQL types.
_COLUMN_TYPES = {
    "request_id": "BIGINT", "start_ns": "BIGINT", "ttft_ns": "BIGINT", "e2e_ns": "BIGINT",
    "prompt_tokens": "BIGINT", "output_tokens": "BIGINT", "itl_ns": "BIGINT[]", "status": "INTEGER",
    "error": "VARCHAR", "token_count_source": "VARCHAR", "session_id": "BIGINT", "turn": "INTEGER",
    "cached_tokens": "BIGINT",
}
#: Inserts a run's records handed over as one list parameter per column (``$run_id``, ``$<column>``):
#: one statement whatever their number (``executemany``, a statement per row, takes 7x longer).
_INSERT_REQUESTS = "INSERT INTO request_rows BY NAME SELECT $run_id AS run_id, " + ", ".join(
    f"unnest(${c}::{t}[]) AS {c}" for c, t in _COLUMN_TYPES.items()
)


def insert_requests(con: duckdb.DuckDBPyConnection, run_id: str, records: Sequence[RequestRecord]) -> int:
    """Insert ``records`` as run ``run_id``'s rows of ``request_rows`` on ``con`` (inside the
    caller's transaction, if any); return the number inserted."""
    recs = list(records)
    if recs:
        params: dict[str, Any] = {c: [getattr(r, c) for r in recs] for c in _COLUMN_TYPES}
        con.execute(_INSERT_REQUESTS, {"run_id": run_id, **params})
    return len(recs)


#: The run id :func:`memory_store` gives its records.
MEMORY_RUN_ID = "load"


def memory_store(records: Sequence[RequestRecord]) -> duckdb.DuckDBPyConnection:
    """A throwaway in-memory store (the whole schema) whose ``requests`` are ``records``, as run
    :data:`MEMORY_RUN_ID`: for the analyzers' SQL over records not stored in a run. The caller
    closes it."""
    import duckdb

    from tracekit.store import ensure_schema, no_progress_bar

    con = duckdb.connect(":memory:", config={"threads": 1})  # a few rows: no thread pool to start
    try:
        no_progress_bar(con)
        ensure_schema(con)
        insert_requests(con, MEMORY_RUN_ID, records)
    except BaseException:
        con.close()
        raise
    return con


def store_requests(run_id: str, result: HasRecords, store: str | Path | None = None) -> int:
    """Attach a load's request records (``result.records``) to run ``run_id`` (the ``requests``
    view), replacing the run's previous ones, in one transaction; return the number stored.

    Raises :class:`TraceInputError` when the store has no such run."""
    from tracekit.store import open_store, resolve_run_id, resolve_store

    recs = result.records
    path = resolve_store(store)
    with open_store(path) as con:
        run_id = resolve_run_id(con, run_id, path)
        con.execute("BEGIN")
        try:
            con.execute("DELETE FROM request_rows WHERE run_id = ?", [run_id])
            insert_requests(con, run_id, recs)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return len(recs)
