"""Changes to stored runs after ingest (``tracekit.run_edits``): what ends up in the store, under
which run, and how a bad value in the user's file is refused."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES

import tracekit
from tracekit.errors import TraceInputError
from tracekit.run_edits import attach_model, store_token_lengths

TRACE = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"


def _rows(store: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_token_lengths_given_a_run_id_prefix_are_stored_under_the_full_run_id(tmp_path: Path, store: Path) -> None:
    [run] = tracekit.ingest([TRACE], store=store)
    prefix = run.run_id[:6]
    assert prefix != run.run_id
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("real,padded\n5,8\n7\n# a comment\n3 4\n")
    assert store_token_lengths(prefix, lengths, store) == 3
    want = [(run.run_id, 0, 5, 8, str(lengths)), (run.run_id, 1, 7, 7, str(lengths)), (run.run_id, 2, 3, 4, str(lengths))]
    assert _rows(store, "SELECT * FROM token_length_rows ORDER BY request") == want
    # stored again (by the prefix): replaced, not added to
    assert store_token_lengths(prefix, lengths, store) == 3
    assert _rows(store, "SELECT * FROM token_length_rows ORDER BY request") == want


def test_a_token_count_past_64_bits_is_refused_in_one_line_naming_the_file(tmp_path: Path, store: Path) -> None:
    [run] = tracekit.ingest([TRACE], store=store)
    good = tmp_path / "good.txt"
    good.write_text("5,8\n")
    store_token_lengths(run.run_id, good, store)
    bad = tmp_path / "bad.txt"
    bad.write_text(f"5,8\n{2**63}\n")  # one past BIGINT's largest value
    with pytest.raises(TraceInputError) as err:
        store_token_lengths(run.run_id, bad, store)
    assert err.value.path == str(bad)
    assert err.value.reason.startswith("bad token count: ") and "\n" not in str(err.value)
    # the run's earlier lengths are untouched
    assert _rows(store, "SELECT request, real_tokens, padded_tokens, source FROM token_length_rows") == [
        (0, 5, 8, str(good))]


def test_attach_model_stores_one_row_per_run_and_replaces_it(store: Path) -> None:
    from tracekit.analysis import models

    [run] = tracekit.ingest([TRACE], store=store)
    first = attach_model(run.run_id[:6], "gpt-oss-20b", store, tp=2)
    assert first == {"model": "gpt-oss-20b", "origin": "catalog", "tensor_parallel": 2, "tp_source": "--tp"}
    attach_model(run.run_id, "gpt-oss-20b", store)
    rows = _rows(store, "SELECT run_id, model, origin, tensor_parallel, tp_source, spec, constants, "
                        "attached_at IS NOT NULL FROM model_rows")
    spec = models.load("gpt-oss-20b")
    # no world size in this CPU trace: tp 1 by default
    assert [(*r[:5], json.loads(str(r[5])), json.loads(str(r[6])), r[7]) for r in rows] == [
        (run.run_id, "gpt-oss-20b", "catalog", 1, "default (no world size in the trace)",
         json.loads(models.to_json(spec)), json.loads(json.dumps(spec.step_constants(1))), True)]
