"""transfers: copy time, the copy time with nothing else on the device, bandwidth and pageable
memory, checked against sums computed here with sqlite3 from the nsys exports' own tables."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS

import tracekit
from tracekit.api import analyze_runs

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "nsys_synthetic_tp2_graphs.sqlite"
NSYS = CORPUS / "nsys"
FASTVIDEO = NSYS / "nsysai-h100x2-fastvideo-sp2-window-2026.2" / "h100_2gpu_1s.sqlite"
RODINIA = NSYS / "rodinia-rtx3090-gaussian-2022.4" / "report3.sqlite"


def q(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _analyzed(path: Path, tmp: Path) -> dict[str, Any]:
    store = tmp / "s.duckdb"
    (run,) = tracekit.ingest([path], store=store)
    (result,) = analyze_runs([run.run_id], store)
    return {"findings": [f for f in result["findings"] if f["analyzer"] == "transfers"],
            "metrics": {m["name"]: m["value"] for m in result["metrics"] if m["analyzer"] == "transfers"}}


def test_small_copies_give_metrics_and_no_finding(tmp_path: Path) -> None:
    r = _analyzed(SAMPLE, tmp_path)
    n_bytes, n_ns = q(SAMPLE, 'SELECT sum(bytes), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1')[0]
    assert r["metrics"]["htod_gbps"] == pytest.approx(n_bytes / n_ns)
    assert 0 < r["metrics"]["copy_time_fraction"] < 0.05
    assert 0 <= r["metrics"]["exposed_copy_fraction"] <= r["metrics"]["copy_time_fraction"]
    assert r["metrics"]["pageable_copy_fraction"] == 0  # srcKind 1: pinned
    assert r["findings"] == []


def test_a_cpu_run_has_null_metrics(tmp_path: Path) -> None:
    r = _analyzed(ROOT / "sample_traces" / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz", tmp_path)
    assert set(r["metrics"].values()) == {None} and r["findings"] == []


@pytest.mark.skipif(not FASTVIDEO.is_file(), reason=f"nsys corpus not found at {NSYS} (only in the project's "
                                                     "workspace and CI)")
def test_an_offloading_window_is_copy_bound(tmp_path: Path) -> None:
    """FastVideo Wan2.1 inference, 2 x H100, 1-s window: 446 host-to-device copies of pinned memory
    take almost all the device time, with no kernel beside them."""
    r = _analyzed(FASTVIDEO, tmp_path)
    (f,) = r["findings"]
    copy_ns = q(FASTVIDEO, 'SELECT sum("end" - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY')[0][0]
    n_htod, htod_bytes, htod_ns = q(FASTVIDEO, 'SELECT count(*), sum(bytes), sum("end" - start) '  # pinned HtoD
                                               "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind <> 0")[0]
    ev = f["evidence"] if isinstance(f["evidence"], dict) else json.loads(f["evidence"])
    assert ev["copy_ns"] == copy_ns  # every copy lies inside the devices' windows
    top = ev["by_direction"][0]
    assert (top["direction"], top["pageable"], top["copies"], top["bytes"], top["time_ns"]) == \
        ("HtoD", False, n_htod, htod_bytes, htod_ns)
    assert f["severity"] == "critical" and 0.9 < ev["exposed_copy_ns"] / ev["copy_ns"] <= 1
    assert f["saving_ns"] == ev["exposed_copy_ns"] and f["title"].startswith("copies take 97.7% of device busy time")
    assert "resident" in f["detail"] and "own stream" in f["detail"]


@pytest.mark.skipif(not RODINIA.is_file(), reason=f"nsys corpus not found at {NSYS} (only in the project's "
                                                   "workspace and CI)")
def test_pageable_copies_are_named(tmp_path: Path) -> None:
    r = _analyzed(RODINIA, tmp_path)
    assert q(RODINIA, "SELECT DISTINCT srcKind FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1") == [(0,)]  # pageable
    assert r["metrics"]["pageable_copy_fraction"] == 1
    (f,) = r["findings"]
    assert "pageable" in f["title"] and "pin it" in f["detail"]
