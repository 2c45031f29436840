"""`tracekit export RUN --perfetto`: the Chrome-trace file holds every stored event with the
original trace's times (checked against the input JSON, not the store), flows pair up, stored
findings become instant events, and the file re-ingests to the same device activity."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import KINETO, SAMPLES, needs_shared
from helpers import run_cli

import tracekit
from tracekit.api import export_perfetto

VLLM = KINETO / "tracelens-mi300x-vllm-decode-graph" / "graph_execution.json.gz"
JAX = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
DEVICE_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "mtia_ccp_events"}


def _ns(v: Any) -> int:
    """µs (JSON number or string, read as Decimal) → integer ns, halves away from zero."""
    return int((Decimal(str(v)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _export(tmp_path: Path, trace: Path) -> tuple[Path, str, dict[str, Any]]:
    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([trace], store=store)
    res = run_cli("analyze", run.run_id, "--store", str(store), "-f", "json")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out.json"
    res = run_cli("export", run.run_id, "--perfetto", str(out), "--store", str(store))
    assert res.returncode == 0, res.stderr
    with out.open() as fh:
        doc = json.load(fh, parse_float=Decimal)
    assert doc["displayTimeUnit"] == "ns"
    return store, run.run_id, doc


def _store_rows(store: Path, sql: str, run_id: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, [run_id]).fetchall()
    finally:
        con.close()


def _check_common(store: Path, run_id: str, doc: dict[str, Any]) -> None:
    events = doc["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    # X events per cat equal the store's row counts (grouped by its own category columns)
    got = Counter(e["args"]["category"] if e["cat"] in DEVICE_CATS | {"xla_async"} else e["cat"] for e in xs)
    want: Counter[str] = Counter()
    for cat, n in _store_rows(store, "SELECT category, count(*) FROM device_activity WHERE run_id = ? GROUP BY 1", run_id):
        want[cat] = n
    for cat, n in _store_rows(store, """SELECT trace_category, count(*) FROM host_events WHERE run_id = ?
                                         AND category IN ('op', 'runtime', 'driver') GROUP BY 1""", run_id):
        want[{"Operator": "cpu_op"}.get(cat, cat)] += n
    for on_dev, n in _store_rows(store, "SELECT on_device, count(*) FROM annotations WHERE run_id = ? GROUP BY 1", run_id):
        want["gpu_user_annotation" if on_dev else "user_annotation"] += n
    # every other host row (XPlane TraceMe rows, XLA module spans, ...) under its own category
    for cat, n in _store_rows(store, """SELECT category, count(*) FROM host_events WHERE run_id = ? AND category
                                         NOT IN ('op', 'runtime', 'driver', 'annotation', 'gpu_annotation', 'step')
                                         GROUP BY 1""", run_id):
        want[cat] += n
    assert got == want
    # every X/flow event sits on a process and thread named by metadata events
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all((e["pid"], e["tid"]) in named for e in events if e["ph"] in ("X", "s", "f"))
    # flows pair up: one s and one f per id, the f bound to the enclosing slice, after the s
    s = {(e["name"], e["id"]): e for e in events if e["ph"] == "s"}
    f = {(e["name"], e["id"]): e for e in events if e["ph"] == "f"}
    assert len(s) == sum(e["ph"] == "s" for e in events) and s.keys() == f.keys()
    assert all(f[k]["bp"] == "e" and f[k]["ts"] >= s[k]["ts"] for k in s)
    # findings: stored titles as global instant events, and listed in metadata
    titles = sorted(r[0] for r in _store_rows(store, "SELECT title FROM findings WHERE run_id = ?", run_id))
    assert titles, "the analyzers produce findings for these runs"
    inst = [e for e in events if e["ph"] == "i"]
    assert sorted(e["name"] for e in inst) == titles and all(e["s"] == "g" for e in inst)
    assert sorted(x["title"] for x in doc["metadata"]["findings"]) == titles
    assert doc["metadata"]["findings_present"] is True


def _roundtrip(tmp_path: Path, doc_path: Path, kernels: list[tuple[int, int]]) -> None:
    store2 = tmp_path / "again.duckdb"
    [run2] = tracekit.ingest([doc_path], store=store2)
    [(n, total)] = _store_rows(store2, "SELECT count(*), sum(dur_ns) FROM kernels WHERE run_id = ?", run2.run_id)
    assert (n, int(total)) == (len(kernels), sum(d for _, d in kernels))


@needs_shared
def test_kineto_export_matches_input_trace(tmp_path: Path) -> None:
    store, run_id, doc = _export(tmp_path, VLLM)
    _check_common(store, run_id, doc)
    with gzip.open(VLLM, "rt") as fh:
        src = json.load(fh, parse_float=Decimal)["traceEvents"]
    src_dev = sorted((e["name"], _ns(e["ts"]), _ns(e.get("dur", 0))) for e in src
                     if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS)
    out_dev = sorted((e["name"], _ns(e["ts"]), _ns(e["dur"])) for e in doc["traceEvents"]
                     if e["ph"] == "X" and e["cat"] in DEVICE_CATS)
    assert len(out_dev) == len(src_dev) == 434
    assert out_dev == src_dev  # each kernel's ts and dur to the ns
    # flows: every runtime call of the input that launched device work has one
    launched = {e["args"]["correlation"] for e in src if e.get("cat") in DEVICE_CATS}
    calls = {e["args"]["correlation"] for e in src if e.get("cat") == "cuda_runtime"} & launched
    assert {e["id"] for e in doc["traceEvents"] if e["ph"] == "s"} == calls
    _roundtrip(tmp_path, tmp_path / "out.json", [(t, d) for _, t, d in src_dev])


def test_jax_sample_export(tmp_path: Path) -> None:
    store, run_id, doc = _export(tmp_path, JAX)
    _check_common(store, run_id, doc)
    rows = _store_rows(store, "SELECT start_ns, dur_ns FROM device_activity WHERE run_id = ?", run_id)
    got = sorted((_ns(e["ts"]), _ns(e["dur"])) for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel")
    assert got == sorted(rows) and len(got) == 3099
    # the host timeline is exported too (was dropped: TraceMe rows stored, none exported)
    host = Counter(e["cat"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] not in DEVICE_CATS)
    stored = dict(_store_rows(store, "SELECT category, count(*) FROM host_events WHERE run_id = ? GROUP BY 1", run_id))
    assert stored and all(host[c] == n for c, n in stored.items() if c not in ("annotation", "step")), (host, stored)
    _roundtrip(tmp_path, tmp_path / "out.json", got)


def test_export_errors(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([JAX], store=store)
    res = run_cli("export", "nope", "--perfetto", str(tmp_path / "x.json"), "--store", str(store))
    assert res.returncode == 2 and res.stderr.startswith("error:") and len(res.stderr.strip().splitlines()) == 1
    res = run_cli("export", run.run_id, "--perfetto", str(tmp_path / "no" / "x.json"), "--store", str(store))
    assert res.returncode == 2 and "cannot write" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # unanalyzed run: exported, with no findings and saying so
    counts = export_perfetto(run.run_id, tmp_path / "y.json", store)
    meta = json.loads((tmp_path / "y.json").read_text())["metadata"]
    assert counts["findings"] == 0 and meta["findings_present"] is False and meta["analyzed"] is False


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
