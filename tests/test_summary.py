"""`tracekit summary RUN`: one screen (≤ 40 lines of ≤ 80 columns) that says the device, busy %,
step time, top kernels with readable names and the top finding — each number recomputed here
from the store with SQL."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from conftest import SAMPLES, needs_shared
from corpus_runs import CORPUS_RUNS, run_path
from helpers import library_query, run_cli

import tracekit
from tracekit import formatting as fmt
from tracekit.names import short_kernel_names


def _check_screen(text: str) -> list[str]:
    lines = text.rstrip("\n").split("\n")
    assert len(lines) <= 40, len(lines)
    assert max(len(x) for x in lines) <= 80, max(lines, key=len)
    return lines


def _top_kernels(store: Path, run: str) -> list[tuple[str, int, int]]:
    return library_query(store, """SELECT name, count(*), sum(dur_ns)::BIGINT FROM device_work WHERE run_id = ?
                                   GROUP BY name ORDER BY 3 DESC, name LIMIT 5""", [run])


def test_summary_of_a_bundled_sample(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    [res] = tracekit.ingest([SAMPLES / "amd_synthetic_rocpd"], store, workload="amd-synthetic")
    r = run_cli("summary", res.run_id[:6], "--store", str(store))
    assert r.returncode == 0, r.stderr
    lines = _check_screen(r.stdout)
    assert lines[0].startswith(f"run {res.run_id}") and "amd-synthetic" in lines[0]
    # never analyzed: analyzed first, findings stored
    con = duckdb.connect(str(store), read_only=True)
    busy, n_findings = con.execute(
        "SELECT (SELECT value FROM metrics WHERE run_id = $r AND name = 'device_busy_fraction'), "
        "(SELECT count(*) FROM findings WHERE run_id = $r)", {"r": res.run_id}).fetchall()[0]
    con.close()
    assert n_findings > 0
    assert f"device busy  {fmt.percent(busy)}" in r.stdout
    top = _top_kernels(store, res.run_id)
    total = library_query(store, "SELECT sum(dur_ns) FROM device_work WHERE run_id = ?", [res.run_id])[0][0]
    for (name, calls, ns), short in zip(top, short_kernel_names([t[0] for t in top], 44)):
        row = next(x for x in lines if x.startswith(short + " "))
        assert row.split()[-3:] == [*fmt.duration_ns(ns).split(), fmt.percent(ns / total)][-3:]
    assert "findings:" in r.stdout and "[" in r.stdout
    # JSON for scripts carries the whole names and raw numbers
    j = json.loads(run_cli("summary", res.run_id, "--store", str(store), "--json").stdout)
    assert j["kernels"][0]["name"] == top[0][0] and j["kernels"][0]["time_ns"] == top[0][2]


def test_summary_refuses_an_unknown_run(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    tracekit.ingest([SAMPLES / "amd_synthetic_rocpd"], store)
    before = store.read_bytes()
    r = run_cli("summary", "ffffffff", "--store", str(store))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    assert store.read_bytes() == before


@needs_shared
def test_summary_of_a_gpu_serving_trace(tmp_path: Path) -> None:
    """SGLang Qwen3-8B decode on MI300X: the device costed against, busy %, decode step time and
    MBU with coverage, Tensile GEMMs told apart by their tile, the top finding."""
    store = tmp_path / "s.duckdb"
    label = "tracelens-mi300x-sglang-qwen3-8b-decode"
    [res] = tracekit.ingest([run_path(label, tmp_path)], store, workload="sglang-qwen3-8b-decode")
    assert label in CORPUS_RUNS
    r = run_cli("analyze", res.run_id, "--store", str(store), "--model", "qwen3-8b")
    assert r.returncode == 0, r.stderr
    r = run_cli("summary", res.run_id, "--store", str(store))
    assert r.returncode == 0, r.stderr
    lines = _check_screen(r.stdout)
    con = duckdb.connect(str(store), read_only=True)
    m = dict(con.execute("SELECT name, value FROM metrics WHERE run_id = ?", [res.run_id]).fetchall())
    top_finding = con.execute(
        """SELECT severity, analyzer FROM findings WHERE run_id = ? ORDER BY
           CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, saving_ns DESC NULLS LAST,
           analyzer, title LIMIT 1""", [res.run_id]).fetchall()[0]
    con.close()
    assert "AMD Instinct MI300X" in lines[1]
    assert f"device busy  {fmt.percent(m['device_busy_fraction'])}" in r.stdout
    assert fmt.duration(m["decode_step_time_ms"], "ms") in r.stdout
    mbu_line = next(x for x in lines if "decode MBU" in x)
    assert fmt.percent(m["decode_mbu"]) in mbu_line and fmt.percent(m["decode_mbu_coverage"]) in mbu_line
    gemms = [x for x in lines if x.startswith("Cijk_")]
    assert len(gemms) >= 3 and len({x.split()[0] for x in gemms}) == len(gemms)
    assert all("…MT" in x for x in gemms)  # the macro tile, which the 48-character cut lost
    assert f"[{top_finding[0]}] {top_finding[1]}:" in r.stdout
