"""Rows physics forbids are dropped at ingest and counted, visibly: a negative duration, and a
time more than a day from the rest of the rank (a corrupt or sentinel timestamp). The rule is one
SQL step after every parser (tracekit.ingest.drop_impossible_events), so it is tested through a
real Kineto sample edited the way corrupt traces are, and the counters are checked end to end."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from tests.helpers import run_cli, undo_schema_6
from tracekit.analysis.hardware import run_device
from tracekit.ingest import FAR_NS, ingest
from tracekit.store import SCHEMA_VERSION, connect

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
SAMPLE_GPU = SAMPLE.parent / "amd_synthetic.rpd"  # a sample with device activity


def _edited(tmp_path: Path, edits: dict[int, dict[str, float]]) -> Path:
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    complete = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    for i, change in edits.items():
        complete[i].update(change)
    out = tmp_path / "edited.pt.trace.json"
    out.write_text(json.dumps(doc))
    return out


def _host_rows(store: Path) -> tuple[int, int, int]:
    con = connect(store, read_only=True)
    try:
        row = con.execute("SELECT count(*), min(dur_ns), max(start_ns + dur_ns) - min(start_ns) FROM host_events"
                          ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])
    finally:
        con.close()


def test_impossible_events_are_dropped_and_counted(tmp_path: Path) -> None:
    clean = ingest([SAMPLE], tmp_path / "clean.duckdb")[0]
    first_ts = min(e["ts"] for e in json.loads(gzip.decompress(SAMPLE.read_bytes()))["traceEvents"] if e.get("ph") == "X")
    bad = _edited(tmp_path, {
        5: {"dur": -1500},                        # an end before its start
        6: {"ts": first_ts + 3 * 86_400e6},       # three days after the capture (µs)
        7: {"dur": 9e15},                         # a duration of 285 years
        8: {"ts": -1},                            # a sentinel start
    })
    got = run_cli("ingest", str(bad), "--store", str(tmp_path / "s.duckdb"), "--json")
    assert got.returncode == 0, got.stderr
    res = json.loads(got.stdout)[0]
    assert res["n_invalid_events"] == 4
    assert res["n_host_events"] == clean.n_host_events - 4
    warnings = [line for line in got.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "dropped 4 of" in warnings[0] and "n_invalid_events" in warnings[0]
    n, shortest, span = _host_rows(tmp_path / "s.duckdb")
    assert n == clean.n_host_events - 4
    assert shortest >= 0 and span < FAR_NS
    con = connect(tmp_path / "s.duckdb", read_only=True)
    try:
        runs = con.execute("SELECT n_invalid_events, n_skipped_events FROM runs").fetchall()
        ranks = con.execute("SELECT sum(n_invalid_events) FROM ranks").fetchone()
    finally:
        con.close()
    assert runs[0][0] == 4 and ranks == (4,)
    # n_skipped_events counts what was read and not stored, the dropped events included
    assert runs[0][1] == clean.n_trace_events - clean.n_host_events + 4


def test_a_clean_trace_drops_nothing(tmp_path: Path) -> None:
    res = ingest([SAMPLE], tmp_path / "s.duckdb")[0]
    assert res.n_invalid_events == 0 and res.warnings == []


def test_schema_3_store_gains_the_counters_and_rollups(tmp_path: Path) -> None:
    """A store written before the counters and rollups existed migrates: its runs read 0 invalid
    events, and rollups equal to what their events count (the run list reads them, not events)."""
    store = tmp_path / "s.duckdb"
    ingest([SAMPLE, SAMPLE_GPU], store)
    con = duckdb.connect(str(store))
    con.execute("DROP VIEW runs")
    con.execute("DROP VIEW ranks")
    con.execute("ALTER TABLE run_meta DROP COLUMN n_invalid_events")
    con.execute("ALTER TABLE rank_meta DROP COLUMN n_invalid_events")
    for column in ("n_device_events", "n_host_events", "device_time_ns", "main_rank", "main_device"):
        con.execute(f"ALTER TABLE run_meta DROP COLUMN {column}")
    undo_schema_6(con)
    con.execute("UPDATE tracekit_schema SET version = 3")
    con.close()
    con = connect(store)
    try:
        assert con.execute("SELECT max(version) FROM tracekit_schema").fetchone() == (SCHEMA_VERSION,)
        assert con.execute("SELECT DISTINCT n_invalid_events FROM runs").fetchall() == [(0,)]
        assert _rollups_are_counts(con) == 2
    finally:
        con.close()


def _rollups_are_counts(con: duckdb.DuckDBPyConnection) -> int:
    """Assert every run's rollups equal its events' count and summed duration; the number of runs."""
    got = con.execute(
        """SELECT r.run_id, r.n_device_events, r.device_time_ns, r.n_host_events,
                  (SELECT count(*) FROM device_activity d WHERE d.run_id = r.run_id),
                  (SELECT coalesce(sum(dur_ns), 0) FROM device_activity d WHERE d.run_id = r.run_id),
                  (SELECT count(*) FROM host_events h WHERE h.run_id = r.run_id)
           FROM runs r""").fetchall()
    for run_id, n_dev, dev_ns, n_host, count_dev, sum_dev, count_host in got:
        assert (n_dev, dev_ns, n_host) == (count_dev, sum_dev, count_host), run_id
        # the main device is the one the analyzers cost against (chosen from the events)
        row, _spec = run_device(con, run_id)
        main = con.execute("SELECT main_rank, main_device FROM runs WHERE run_id = ?", [run_id]).fetchone()
        assert main == ((row["rank"], row["device"]) if row else (None, None)), run_id
    assert any(n_dev for _r, n_dev, *_ in got), "a sample with device events"
    return len(got)


def test_ingest_writes_rollups_equal_to_the_events(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    ingest([SAMPLE, SAMPLE_GPU], store)
    con = connect(store, read_only=True)
    try:
        assert _rollups_are_counts(con) == 2
    finally:
        con.close()


@pytest.mark.parametrize("value", ["lots", "1KB", "-5MB", "99999999999999999999TB", "0"])
def test_bad_memory_limit_is_one_line_about_the_setting(tmp_path: Path, value: str) -> None:
    got = run_cli("ingest", str(SAMPLE), "--store", str(tmp_path / "s.duckdb"), env={"TRACEKIT_MEMORY_LIMIT": value})
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1 and got.stderr.startswith("error: TRACEKIT_MEMORY_LIMIT: "), got.stderr
    assert not (tmp_path / "s.duckdb").exists()


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_bad_tmpdir_is_one_line_about_the_setting(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "nowhere"
    if kind == "file":
        target.write_text("x")
    got = run_cli("ingest", str(SAMPLE), "--store", str(tmp_path / "s.duckdb"), env={"TRACEKIT_TMPDIR": str(target)})
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1 and got.stderr.startswith("error: TRACEKIT_TMPDIR: "), got.stderr
    assert not (tmp_path / "s.duckdb").exists()
