"""The one way parsers hand batches to DuckDB (tracekit/parsers/store_writer.py): by column name,
through a replacement scan that lets each batch go as soon as it is inserted, and with one error
mapping (a bad value: one line naming the file; out of memory: left to the ingest)."""

from __future__ import annotations

import gc
import gzip
import re
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import SAMPLES
from helpers import run_cli

from tracekit.errors import TraceInputError
from tracekit.ingest import ingest
from tracekit.parsers import _rocprofv3_json_read, rocpd, rpd, store_writer
from tracekit.parsers.store_writer import create_temp_table, insert_batch, insert_rows


def _table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE t (a BIGINT, b VARCHAR, c DOUBLE DEFAULT 1.5)")


def test_batch_is_released_right_after_insert_inside_the_transaction() -> None:
    con = duckdb.connect()
    _table(con)
    con.execute("BEGIN")
    a = np.arange(1000, dtype=np.int64)
    b = np.array([f"x{i}" for i in range(1000)], dtype=object)
    alive = [weakref.ref(a), weakref.ref(b)]
    n = insert_batch(con, "t", {"a": a, "b": b}, source="trace.json")
    del a, b
    gc.collect()
    assert n == 1000
    assert [r() for r in alive] == [None, None], "the writer kept the batch alive until COMMIT"
    assert con.execute("SELECT count(*), sum(a), min(b), max(c) FROM t").fetchall() == [(1000, 499500, "x0", 1.5)]
    con.execute("COMMIT")


def test_the_check_above_sees_a_registered_batch_kept_alive() -> None:
    """Why the writer does not use ``con.register``: the same check fails for it (DuckDB keeps a
    registered object until the transaction ends, even once unregistered)."""
    con = duckdb.connect()
    _table(con)
    con.execute("BEGIN")
    a = np.arange(10, dtype=np.int64)
    alive = weakref.ref(a)
    con.register("reg", {"a": a})
    con.execute("INSERT INTO t (a) SELECT a FROM reg").fetchall()
    con.unregister("reg")
    del a
    gc.collect()
    assert alive() is not None
    con.execute("COMMIT")


def test_columns_go_by_name_and_select_transforms_them() -> None:
    con = duckdb.connect()
    _table(con)
    # the SELECT's columns in another order than the table's, one computed, one left out (default)
    insert_batch(con, "t", {"x": np.array([1, 2], dtype=np.int64)},
                 select="SELECT 'v' || x AS b, x * $k AS a FROM batch", params={"k": 10, "unused": 1},
                 source="trace.json")
    assert con.execute("SELECT a, b, c FROM t ORDER BY a").fetchall() == [(10, "v1", 1.5), (20, "v2", 1.5)]


def test_temp_table_and_rows() -> None:
    con = duckdb.connect()
    _table(con)
    create_temp_table(con, "lookup", {"k": np.array([1, 2], dtype=np.int64), "v": np.array(["p", "q"], dtype=object)},
                      source="trace.json")
    insert_batch(con, "t", {"a": np.array([2, 1, 3], dtype=np.int64)},
                 select="SELECT b.a AS a, l.v AS b FROM batch b LEFT JOIN lookup l ON l.k = b.a", source="trace.json")
    insert_rows(con, "t", [{"a": 7, "c": 2.0}, {"a": 8, "c": None}], source="trace.json")
    assert con.execute("SELECT a, b, c FROM t ORDER BY a").fetchall() == [
        (1, "p", 1.5), (2, "q", 1.5), (3, None, 1.5), (7, None, 2.0), (8, None, None)]


def test_bad_value_is_one_line_naming_the_file(tmp_path: Path) -> None:
    con = duckdb.connect()
    _table(con)
    path = tmp_path / "rank3.json"
    with pytest.raises(TraceInputError) as exc:
        insert_batch(con, "t", {"a": np.array(["12", "soon"], dtype=object)},
                     select="SELECT CAST(a AS BIGINT) AS a FROM batch", source=path, what="unexpected value")
    err = exc.value
    assert err.path == str(path)
    assert "\n" not in str(err)
    assert err.reason.startswith("unexpected value: ") and "soon" in err.reason, err.reason


def test_constraint_violation_is_the_input(tmp_path: Path) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE n (a BIGINT NOT NULL)")
    with pytest.raises(TraceInputError, match=r"rank0\.json: bad value in the trace: .*NOT NULL"):
        insert_batch(con, "n", {"a": np.array([1, None], dtype=object)}, source=tmp_path / "rank0.json")


def test_out_of_memory_is_left_to_the_ingest() -> None:
    """The ingest maps DuckDB's OutOfMemoryException to its TRACEKIT_MEMORY_LIMIT error: the
    writer must not turn it into a complaint about the trace."""
    con = duckdb.connect(config={"memory_limit": "4MB", "threads": 1})
    con.execute("CREATE TABLE big (k BIGINT, s VARCHAR)")
    with pytest.raises(duckdb.OutOfMemoryException):
        insert_batch(con, "big", select="SELECT i AS k, string_agg(i::VARCHAR, ',') AS s "
                                        "FROM range(3000000) r(i) GROUP BY i", source="trace.json")


def test_other_errors_pass_unchanged() -> None:
    con = duckdb.connect()
    with pytest.raises(duckdb.CatalogException):
        insert_batch(con, "no_such_table", {"a": np.array([1])}, source="trace.json")


# -- the parsers' batches, end to end ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "sample"),
    [
        (rocpd, SAMPLES / "amd_synthetic_rocpd" / "27182_results.db"),
        (rocpd, SAMPLES / "amd_synthetic_pc_rocpd" / "27182_results.db"),
        (rpd, SAMPLES / "amd_synthetic.rpd"),
        (_rocprofv3_json_read, SAMPLES / "amd_synthetic_results.json"),
    ],
    ids=["rocpd", "rocpd-pc", "rpd", "rocprofv3-json"],
)
def test_parser_batches_are_gone_before_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: Any, sample: Path
) -> None:
    """Every array a parser handed to the writer is freed before the ingest's COMMIT (with
    ``con.register`` they all stayed until then)."""
    seen: list[weakref.ref[np.ndarray]] = []
    real: Callable[..., int] = store_writer.insert_batch

    def recording(con: duckdb.DuckDBPyConnection, table: str, batch: Any = None, **kw: Any) -> int:
        if isinstance(batch, dict):
            seen.extend(weakref.ref(v) for v in batch.values() if isinstance(v, np.ndarray))
        return real(con, table, batch, **kw)

    monkeypatch.setattr(module, "insert_batch", recording)
    alive_at_commit: list[int] = []

    def before_commit(con: duckdb.DuckDBPyConnection, results: Any) -> None:
        gc.collect()
        alive_at_commit.append(sum(r() is not None for r in seen))

    ingest([sample], store=tmp_path / "s.duckdb", before_commit=before_commit)
    assert seen, "the parser inserted nothing through the writer"
    assert alive_at_commit == [0]


def test_cli_bad_value_names_the_rank_file_not_the_directory(tmp_path: Path) -> None:
    """A Kineto run directory whose second rank file holds an event DuckDB cannot convert: the
    one-line error names that file (the writer's ``source``), exit 2."""
    raw = gzip.decompress((SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz").read_bytes())
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.pt.trace.json").write_bytes(raw.replace(b'"distributedInfo"', b'"distributedInfo_"'))
    bad = re.sub(rb'"traceEvents"\s*:\s*\[', b'"traceEvents": [{"ph": "X", "ts": "soon", "cat": "kernel"},',
                 raw, count=1)
    (run / "rank1.pt.trace.json").write_bytes(bad)
    res = run_cli("ingest", str(run), "--store", str(tmp_path / "s.duckdb"))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: {run / 'rank1.pt.trace.json'}: unexpected value in an event: "), lines[0]
    assert not (tmp_path / "s.duckdb").exists()
