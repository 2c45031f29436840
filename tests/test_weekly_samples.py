"""The weekly-review samples (``sample_traces/weekly``, made by ``make_weekly_samples.py``) and
``tracekit ingest --captured-at``: sizes stay small, the dates land in ``runs.captured_at``, and
the bucketing runs carry the padding the capture really did."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import duckdb
from conftest import SAMPLES
from helpers import run_cli

WEEKLY = SAMPLES / "weekly"
MANIFEST = json.loads((WEEKLY / "manifest.json").read_text())


def test_committed_weekly_captures_are_small() -> None:
    sizes = {e["file"]: (WEEKLY / e["file"]).stat().st_size for e in MANIFEST["runs"]}
    assert len(sizes) == 6
    assert all(s < 300_000 for s in sizes.values()), sizes
    assert sum(sizes.values()) < 2_000_000


def test_ingest_captured_at_option(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    entry = MANIFEST["runs"][0]
    r = run_cli("ingest", str(WEEKLY / entry["file"]), "--store", str(store), "--workload", "w",
                "--captured-at", "2026-11-02T10:00:00+01:00")
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT captured_at, workload FROM runs").fetchall() == [(dt.datetime(2026, 11, 2, 9), "w")]
    con.close()
    bad = tmp_path / "bad.duckdb"
    r = run_cli("ingest", str(WEEKLY / entry["file"]), "--store", str(bad), "--captured-at", "last tuesday")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --captured-at last tuesday: expected an ISO 8601 date/time, e.g. 2026-11-02T10:00:00"]
    assert not bad.exists()


def test_weekly_ingest_dates_and_real_bucket_padding(tmp_path: Path) -> None:
    sys.path.insert(0, str(SAMPLES))
    import make_weekly_samples

    store = tmp_path / "w.duckdb"
    ids = make_weekly_samples.ingest(store)
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute(
        """SELECT r.run_id, r.captured_at, r.label, r.tags['bucket'], m.value FROM runs r
           JOIN metrics m ON m.run_id = r.run_id AND m.name = 'bucket_padded_token_fraction'"""
    ).fetchall()
    con.close()
    assert sorted(r[0] for r in rows) == sorted(ids) and len(ids) == 6
    by_label = {r[2]: r for r in rows}
    lens = [int(x) for x in MANIFEST["runs"][0]["tags"]["prompt_lens"].split(",")]
    for e in MANIFEST["runs"]:
        _, when, _, bucket, padded = by_label[e["label"]]
        assert when == dt.datetime.fromisoformat(e["captured_at"])
        if bucket == "off":
            assert padded == 0
        else:  # prompts of 37 and 45 tokens left-padded to the bucket, read back from the trace
            b = int(bucket)
            assert padded == sum(b - n for n in lens) / (b * len(lens))
    assert len({r[1].isocalendar()[1] for r in rows}) == 6  # six different weeks
