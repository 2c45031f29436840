"""The weekly-review samples (``sample_traces/weekly``, made by ``tools/make_weekly_samples.py``) and
``tracekit ingest --captured-at``: sizes stay small, each sample is a run directory (trace and
request log), the dates land in ``runs.captured_at``, the bucketing runs carry the padding the
capture really did, and the request logs become the ``serving`` metrics (TTFT/TPOT/tokens per s)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import SAMPLES
from helpers import run_cli

WEEKLY = SAMPLES / "weekly"
MANIFEST = json.loads((WEEKLY / "manifest.json").read_text())
REQUESTS_FILE = "tracekit-requests.jsonl"
ROUNDS = len(MANIFEST["runs"][0]["tags"]["prompt_lens"].split(","))  # one batch of prompts per prompt length


def _requests(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The request log of a sample, read as plain JSON lines."""
    lines = (WEEKLY / entry["dir"] / REQUESTS_FILE).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_committed_weekly_captures_are_small_directories() -> None:
    assert len(MANIFEST["runs"]) == 6
    assert sorted(p.name for p in WEEKLY.iterdir()) == sorted(["manifest.json", *(e["dir"] for e in MANIFEST["runs"])])
    for e in MANIFEST["runs"]:
        assert sorted(p.name for p in (WEEKLY / e["dir"]).iterdir()) == sorted(
            [f"{e['dir']}.pt.trace.json.gz", REQUESTS_FILE])
        assert (WEEKLY / e["dir"] / f"{e['dir']}.pt.trace.json.gz").stat().st_size < 300_000
    assert sum(f.stat().st_size for f in WEEKLY.rglob("*") if f.is_file()) < 2_000_000


def test_request_logs_are_one_request_per_prompt_of_each_round() -> None:
    for e in MANIFEST["runs"]:
        reqs = _requests(e)
        batch, steps = int(e["tags"]["batch"]), int(e["tags"]["decode_steps"])
        lens = [int(x) for x in e["tags"]["prompt_lens"].split(",")]
        assert len(reqs) == batch * ROUNDS
        assert [r["request_id"] for r in reqs] == list(range(batch * ROUNDS))
        # real prompt lengths (not the bucket's), round by round; every request of a round starts with it
        assert [r["prompt_tokens"] for r in reqs] == [n for n in lens for _ in range(batch)]
        assert len({r["start_ns"] for r in reqs}) == ROUNDS
        for r in reqs:
            assert (r["status"], r["error"], r["token_count_source"]) == (200, None, "counted")
            assert r["output_tokens"] == 1 + steps == len(r["itl_ns"]) + 1
            assert 0 < r["ttft_ns"] < r["e2e_ns"] == r["ttft_ns"] + sum(r["itl_ns"])
            assert all(g > 0 for g in r["itl_ns"])
        # the second round starts after the first one's last token
        first, second = reqs[0], reqs[batch]
        assert second["start_ns"] >= first["start_ns"] + first["e2e_ns"]


def test_ingest_captured_at_option(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    entry = MANIFEST["runs"][0]
    r = run_cli("ingest", str(WEEKLY / entry["dir"]), "--store", str(store), "--workload", "w",
                "--captured-at", "2026-11-02T10:00:00+01:00")
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT captured_at, workload FROM runs").fetchall() == [(dt.datetime(2026, 11, 2, 9), "w")]
    # the directory's request log is stored with the run
    assert con.execute("SELECT count(*) FROM requests").fetchall() == [(len(_requests(entry)),)]
    con.close()
    bad = tmp_path / "bad.duckdb"
    r = run_cli("ingest", str(WEEKLY / entry["dir"]), "--store", str(bad), "--captured-at", "last tuesday")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --captured-at last tuesday: expected an ISO 8601 date/time, e.g. 2026-11-02T10:00:00"]
    assert not bad.exists()


def test_weekly_ingest_dates_padding_and_serving_metrics(tmp_path: Path) -> None:
    import make_weekly_samples  # tools/ (on the path through conftest.py)

    store = tmp_path / "w.duckdb"
    ids = make_weekly_samples.ingest(store)
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute(
        """SELECT r.run_id, r.captured_at, r.label, r.tags['bucket'], m.value FROM runs r
           JOIN metrics m ON m.run_id = r.run_id AND m.name = 'bucket_padded_token_fraction'"""
    ).fetchall()
    metrics = {(rid, name): value for rid, name, value in con.execute(
        "SELECT run_id, name, value FROM metrics WHERE analyzer = 'serving'").fetchall()}
    stored = dict(con.execute("SELECT run_id, count(*) FROM requests GROUP BY run_id").fetchall())
    p95 = dict(con.execute(
        "SELECT run_id, quantile_cont(ttft_ns, 0.95) / 1e6 FROM requests GROUP BY run_id").fetchall())
    con.close()
    assert sorted(r[0] for r in rows) == sorted(ids) and len(ids) == 6
    by_label = {r[2]: r for r in rows}
    lens = [int(x) for x in MANIFEST["runs"][0]["tags"]["prompt_lens"].split(",")]
    for e in MANIFEST["runs"]:
        rid, when, _, bucket, padded = by_label[e["label"]]
        assert when == dt.datetime.fromisoformat(e["captured_at"])
        if bucket == "off":
            assert padded == 0
        else:  # prompts of 37 and 45 tokens left-padded to the bucket, read back from the trace
            b = int(bucket)
            assert padded == sum(b - n for n in lens) / (b * len(lens))
        # requests: batch × rounds, each run's own; serving metrics from them
        reqs = _requests(e)
        assert stored[rid] == int(e["tags"]["batch"]) * ROUNDS == len(reqs)
        for name in ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "tpot_p95_ms", "itl_p95_ms", "e2e_p95_ms",
                     "output_tokens_per_s", "requests_per_s", "request_error_rate"):
            assert metrics[(rid, name)] is not None, name
        ttft = np.array([r["ttft_ns"] for r in reqs], dtype=float)
        assert metrics[(rid, "ttft_p95_ms")] == p95[rid]  # the test's own quantile_cont over the stored requests
        # and from the request log itself (numpy's linear percentile is quantile_cont's interpolation)
        assert metrics[(rid, "ttft_p95_ms")] == pytest.approx(np.percentile(ttft, 95) / 1e6, rel=1e-12)
        tpot = [(r["e2e_ns"] - r["ttft_ns"]) / (r["output_tokens"] - 1) for r in reqs]
        assert metrics[(rid, "tpot_p95_ms")] == pytest.approx(np.percentile(tpot, 95) / 1e6, rel=1e-12)
        window_s = (max(r["start_ns"] + r["e2e_ns"] for r in reqs) - min(r["start_ns"] for r in reqs)) / 1e9
        tokens = sum(r["output_tokens"] for r in reqs)
        assert metrics[(rid, "output_tokens_per_s")] == pytest.approx(tokens / window_s, rel=1e-12)
        assert metrics[(rid, "request_error_rate")] == 0
    assert len({r[1].isocalendar()[1] for r in rows}) == 6  # six different weeks
