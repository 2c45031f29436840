"""Request records into the store (``tracekit.request_rows.insert_requests``): every field of every
record lands in its ``request_rows`` column, NULLs and empty latency lists included."""

from __future__ import annotations

import dataclasses

from tracekit.request_rows import OPTIONAL_FIELDS, RECORD_FIELDS, RequestRecord, insert_requests, memory_store


def _records() -> list[RequestRecord]:
    return [
        RequestRecord(0, 1_700_000_000_000_000_000, 1_000, [5, 6], 20_000, 12, 3, 200, None, "usage"),
        RequestRecord(1, 1_700_000_000_000_000_500, None, [], 9_000, None, 0, None, "timed out after 60 s", "counted"),
        RequestRecord(2, 2**62, 2**40, [2**50] * 3, 2**41, 2**33, 4, 500, "HTTP 500: boom", "usage"),
    ]


def test_insert_requests_stores_every_field_of_every_record() -> None:
    recs = _records()
    con = memory_store([])
    try:
        assert insert_requests(con, "r1", recs) == len(recs)
        assert insert_requests(con, "r2", []) == 0
        cols = ", ".join((*RECORD_FIELDS, *OPTIONAL_FIELDS))
        got = con.execute(f"SELECT run_id, {cols} FROM request_rows ORDER BY request_id").fetchall()
    finally:
        con.close()
    assert got == [("r1", *dataclasses.astuple(r)) for r in recs]


def test_memory_store_holds_the_records_as_its_one_run() -> None:
    recs = _records()
    con = memory_store(recs)
    try:
        got = con.execute("SELECT run_id, request_id, itl_ns FROM request_rows ORDER BY request_id").fetchall()
    finally:
        con.close()
    assert got == [("load", r.request_id, r.itl_ns) for r in recs]
