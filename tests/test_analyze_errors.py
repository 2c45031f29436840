"""One analyzer failing on one run is reported as an error row for that run; the others go on."""

from __future__ import annotations

from pathlib import Path

import duckdb
from conftest import SAMPLES

import tracekit
from tracekit.analysis import base
from tracekit.analysis.base import ANALYZERS, Analyzer, AnalyzerResult, analyze_run


def test_a_failing_analyzer_becomes_an_error_row_and_the_rest_run(tmp_path: Path) -> None:
    # registered here, not at import: collected with other test modules it would run in theirs
    class _Broken(Analyzer, name="_broken_for_test"):
        def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
            raise IndexError("list index out of range")  # as wave_stalls once did

    store = tmp_path / "s.duckdb"
    rid = tracekit.ingest([SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"], store=store)[0].run_id
    try:
        con = duckdb.connect(str(store))
        try:
            res = analyze_run(con, rid, ["_broken_for_test", "device_time", "launch_idle"])
            rows = con.execute("SELECT analyzer, severity, title FROM findings WHERE run_id = ? "
                               "AND analyzer = '_broken_for_test'", [rid]).fetchall()
            n_metrics = con.execute("SELECT count(*) FROM metrics WHERE run_id = ? AND analyzer = 'launch_idle'",
                                    [rid]).fetchone()
            # the session variable that scopes the library is reset even after a failure
            assert con.execute("SELECT getvariable('tracekit_run')").fetchone() == (None,)
        finally:
            con.close()
    finally:
        del ANALYZERS["_broken_for_test"]
    assert res["_broken_for_test"].findings[0].severity == "error"
    assert rows == [("_broken_for_test", "error", rows[0][2])] and "IndexError" in rows[0][2]
    assert n_metrics is not None and n_metrics[0] > 0
    assert base.ANALYZERS.get("_broken_for_test") is None
