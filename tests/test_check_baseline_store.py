"""`tracekit check --baseline-store`: candidates in one store file, baselines in another (a PR job's
local store against main's store, here two files; the lake case is tests/test_ci_workflow_lake.py).
The verdict and its explanation are those of one store holding both sides; the baseline store is
opened read-only and left byte for byte as it was; its mistakes are one error line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

import duckdb
import pytest
from helpers import distinct_copies, run_cli

from tracekit.analysis.base import ANALYZERS, Analyzer, AnalyzerResult, Metric, analyze_run
from tracekit.check import load_config, run_check
from tracekit.ingest import ingest
from tracekit.store import open_store

BASE_MS = [100.0, 101.0, 99.0, 100.5, 99.5]
CAND_MS = [106.0, 105.0, 107.0, 105.5, 106.5]  # +6 %: a regression at the 3 % minimum


class _Latency(Analyzer):
    """An analyzer plugin whose metric values are set by the test (``values[run_id]``)."""

    values: ClassVar[dict[str, float]] = {}

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        return AnalyzerResult(metrics=[Metric("bs_latency_ms", self.values.get(run_id), "ms", "lower")])


def _put(store: Path, paths: list[Path], values: list[float], label: str, *, analyze: bool = True) -> list[str]:
    """Ingest ``paths`` into ``store`` as runs of workload ``w`` labelled ``label``, each with its
    latency from ``values`` stored by the analyzer (unless not ``analyze``)."""
    ids = [r.run_id for r in ingest(paths, store, label=label, workload="w")]
    _Latency.values.update(zip(ids, values, strict=True))
    if analyze:
        ANALYZERS["bs_latency"] = _Latency
        try:
            with open_store(store) as con:
                for rid in ids:
                    analyze_run(con, rid, ["bs_latency"])
        finally:
            ANALYZERS.pop("bs_latency", None)
    return ids


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``main.duckdb`` (5 baseline runs labelled main), ``pr.duckdb`` (5 candidate runs) and
    ``both.duckdb`` (the same 10 runs in one store: the reference). Tests copy a store they change."""
    tmp = tmp_path_factory.mktemp("stores")
    paths = distinct_copies(tmp, 10)
    main, pr, both = (tmp / f"{n}.duckdb" for n in ("main", "pr", "both"))
    base = _put(main, paths[:5], BASE_MS, "main")
    cand = _put(pr, paths[5:], CAND_MS, "pr-1")
    assert _put(both, paths[:5], BASE_MS, "main") == base and _put(both, paths[5:], CAND_MS, "pr-1") == cand
    cfg = tmp / "check.toml"
    cfg.write_text('[metrics.bs_latency_ms]\nmin_change = "3%"\n')
    return {"main": main, "pr": pr, "both": both, "base": base, "cand": cand, "cfg": cfg}


def _untouched(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), os.stat(path).st_mtime_ns


def test_same_verdict_as_one_store_and_the_baseline_store_untouched(stores: dict[str, Any]) -> None:
    main, cfg = stores["main"], load_config(stores["cfg"])
    before = _untouched(main)
    split = run_check(stores["pr"], candidates=stores["cand"], baseline_label="main", config=cfg, baseline_store=main)
    whole = run_check(stores["both"], candidates=stores["cand"], baseline_label="main", config=cfg)
    assert whole.regression and split.regression
    assert sorted(split.baseline_runs) == sorted(stores["base"]) == sorted(whole.baseline_runs)
    a, b = split.as_dict(), whole.as_dict()
    # the explanation compares a baseline run (main.duckdb) with a candidate run (pr.duckdb)
    assert a["explanations"] and a["explanations"][0]["baseline_run"] in stores["base"]
    for key in ("verdicts", "explanations", "runs", "candidate_runs", "baseline_runs", "tier", "regression"):
        assert a[key] == b[key], key
    # where the baselines came from is said; the rest of the notes are the same
    said = f"baseline runs read from {main} (read-only); candidate runs from {stores['pr']}"
    assert said in a["notes"]
    assert [n.replace(" with stored metrics", "") for n in a["notes"] if n != said] == b["notes"]
    assert _untouched(main) == before


def test_cli_json_and_a_newer_unanalyzed_baseline(stores: dict[str, Any], tmp_path: Path) -> None:
    """An unanalyzed newest main run (its writer has not analyzed it yet) is not picked by
    --baseline-label, and named with --baseline it is an error: the baseline store is only read."""
    main, pr = tmp_path / "main.duckdb", stores["pr"]
    shutil.copyfile(stores["main"], main)
    (fresh,) = _put(main, distinct_copies(tmp_path, 11, stem="fresh")[10:], [1000.0], "main", analyze=False)
    before = _untouched(main)
    args = ["check", "--store", str(pr), "--baseline-store", str(main), "--config", str(stores["cfg"]),
            *[a for c in stores["cand"] for a in ("--candidate", c)]]
    r = run_cli(*args, "--baseline-label", "main", "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(doc["baseline_runs"]) == sorted(stores["base"]) and fresh not in doc["baseline_runs"]
    assert doc["verdicts"][0]["verdict"] == "regression"
    assert "baseline: the 5 newest run(s) labelled 'main' of workload 'w' with stored metrics" in doc["notes"]
    r = run_cli(*args, "--baseline", fresh)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {main}: baseline run '{fresh}' has no stored metrics"), r.stderr
    assert _untouched(main) == before


def test_baseline_store_mistakes_are_one_line(stores: dict[str, Any], tmp_path: Path) -> None:
    main, pr = stores["main"], stores["pr"]
    before = {p: _untouched(p) for p in (main, pr)}
    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("hello\n")
    cand = ["--candidate", stores["cand"][0]]
    cases = [
        (["--baseline-store", str(tmp_path / "missing.duckdb"), *cand, "--baseline-label", "main"],
         f"error: {tmp_path / 'missing.duckdb'}: no such store"),
        (["--baseline-store", str(not_a_store), *cand, "--baseline-label", "main"], f"error: {not_a_store}: "),
        (["--baseline-store", str(main), "--history", "w"], f"error: {main}: --baseline-store is for --candidate runs"),
        # a baseline id is looked up in the baseline store, not in the candidates' store
        (["--baseline-store", str(main), *cand, "--baseline", stores["cand"][1]],
         f"error: {main}: no run '{stores['cand'][1]}'"),
        (["--baseline-store", str(main), *cand, "--baseline-label", "nightly"],
         f"error: {main}: no runs labelled 'nightly' of workload 'w' with stored metrics"),
    ]
    for args, start in cases:
        r = run_cli("check", "--store", str(pr), *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith(start) and r.stderr.count("\n") == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "missing.duckdb").exists()
    assert {p: _untouched(p) for p in (main, pr)} == before
