"""`tracekit compare` / api.compare_runs on real corpus captures: per-category totals equal sums
computed here from the Kineto JSON with the test's own classification of unambiguous names; deltas
equal the difference of those per-run sums; CLI json/csv shapes; unknown run → exit 2."""

from __future__ import annotations

import csv
import gzip
import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS, KINETO, needs_shared
from helpers import run_cli

import tracekit
from tracekit.analysis.categories import CATEGORIES
from tracekit.api import compare_runs

pytestmark = needs_shared

B200 = KINETO / "tracelens-b200-vllm-eager-inference-rank0of8" / "eager_trace.json.gz"
MI300X = KINETO / "tracelens-mi300x-vllm-decode-graph" / "graph_execution.json.gz"
TPU = CORPUS / "xplane" / "xprof_tpu_v6e_inference" / "tpu_inference_2.xplane.pb"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _device_events(path: Path) -> list[tuple[str, str, int]]:
    """(cat, name, dur_ns) of every complete device event, durations exact from the µs text."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [
        (e["cat"].lower(), e["name"], int((Decimal(e.get("dur", 0)) * 1000).to_integral_value()))
        for e in events
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in DEVICE_CATS
    ]


def _mine(name: str) -> str | None:
    """The test's own classification of names that are unambiguous; None for everything else."""
    if "multimem_all_reduce" in name or name.startswith("ncclDevKernel"):
        return "communication"
    if name.startswith("Cijk_"):
        return "gemm"
    if name.startswith("_matmul_ogs"):
        return "moe"
    if name.startswith(("kernel_unified_attention", "fmhaSm100")) or "paged_attention" in name:
        return "attention"
    return None


def _sums(path: Path) -> dict[str, tuple[int, int]]:
    """category → (count, total ns) for the test's classification; 'all' = every device event."""
    out: dict[str, tuple[int, int]] = {}
    for cat, name, ns in _device_events(path):
        keys = ["all"] + ([m] if (m := _mine(name)) else []) + (["memcpy"] if cat != "kernel" else [])
        for k in keys:
            n, t = out.get(k, (0, 0))
            out[k] = (n + 1, t + ns)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    store = tmp_path_factory.mktemp("cmp") / "s.duckdb"
    ids = {}
    for key, path in (("b200", B200.parent), ("mi300x", MI300X.parent)):
        [run] = tracekit.ingest([path], store=store)
        ids[key] = run.run_id
    if TPU.is_file():
        [run] = tracekit.ingest([TPU], store=store)
        ids["tpu"] = run.run_id
    return store, ids


def _by_cat(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cols, rows = res["categories"]
    return {r[0]: dict(zip(cols, r)) for r in rows}


def _ms(ns: int) -> float:
    return ns / 1e6


def test_category_totals_match_trace(runs: tuple[Path, dict[str, str]]) -> None:
    store, ids = runs
    res = compare_runs(ids["b200"], ids["mi300x"], store)
    cats = _by_cat(res)
    assert list(cats) == list(CATEGORIES)
    b200, mi = _sums(B200), _sums(MI300X)
    # B200: every multimem_all_reduce kernel (73 of them) and the one NCCL kernel is communication,
    # and nothing else is; the gemm-free, attention-free classes are checked on MI300X
    assert b200["communication"][0] == 74
    assert cats["communication"]["a_kernels"] == b200["communication"][0]
    assert cats["communication"]["a_ms"] == pytest.approx(_ms(b200["communication"][1]), abs=1e-3)
    assert cats["communication"]["b_kernels"] == 0
    # MI300X vLLM decode graph (gpt-oss-20b): gemm = the Cijk_* (hipBLASLt) kernels, moe = the
    # _matmul_ogs (Triton MoE expert GEMM) kernels
    assert cats["gemm"]["b_kernels"] == mi["gemm"][0] == 73
    assert cats["gemm"]["b_ms"] == pytest.approx(_ms(mi["gemm"][1]), abs=1e-3)
    assert cats["moe"]["b_kernels"] == mi["moe"][0] == 48
    assert cats["moe"]["b_ms"] == pytest.approx(_ms(mi["moe"][1]), abs=1e-3)
    # attention holds the unified-attention kernels (plus the flash KV-cache writes)
    assert cats["attention"]["b_kernels"] >= mi["attention"][0] == 24
    # memcpy = every gpu_memcpy/gpu_memset event
    for col, s in (("a", b200), ("b", mi)):
        assert cats["memcpy"][f"{col}_kernels"] == s["memcpy"][0]
        # categories partition the device events: counts and time add up to the trace's totals
        assert sum(c[f"{col}_kernels"] for c in cats.values()) == s["all"][0]
        assert sum(c[f"{col}_ms"] for c in cats.values()) == pytest.approx(_ms(s["all"][1]), abs=0.01)
        assert sum(c[f"{col}_pct"] for c in cats.values()) == pytest.approx(100, abs=0.5)
        for c in cats.values():
            assert c[f"{col}_pct"] == pytest.approx(100 * c[f"{col}_ms"] / _ms(s["all"][1]), abs=0.06)


def test_deltas_are_difference_of_per_run_sums(runs: tuple[Path, dict[str, str]]) -> None:
    store, ids = runs
    cats = _by_cat(compare_runs(ids["b200"], ids["mi300x"], store))
    b200, mi = _sums(B200), _sums(MI300X)
    delta_comm = _ms(mi.get("communication", (0, 0))[1] - b200["communication"][1])
    assert cats["communication"]["delta_ms"] == pytest.approx(delta_comm, abs=1e-3)
    assert cats["communication"]["delta_pct"] == pytest.approx(-100.0)
    assert cats["memcpy"]["delta_ms"] == pytest.approx(_ms(mi["memcpy"][1] - b200["memcpy"][1]), abs=1e-3)
    for c in cats.values():
        assert c["delta_ms"] == pytest.approx(c["b_ms"] - c["a_ms"], abs=1e-3)
    # reversed order: every delta flips sign
    rev = _by_cat(compare_runs(ids["mi300x"], ids["b200"], store))
    for k, c in cats.items():
        assert rev[k]["delta_ms"] == pytest.approx(-c["delta_ms"], abs=1e-3)


def test_top_kernels_by_name(runs: tuple[Path, dict[str, str]]) -> None:
    store, ids = runs
    # the same run against itself: shared names, no change → no rows
    assert compare_runs(ids["b200"], ids["b200"], store)["top_kernels"][1] == []
    cols, rows = compare_runs(ids["b200"], ids["mi300x"], store, top=3)["top_kernels"]
    assert cols == ["category", "name", "a_kernels", "a_ms", "b_kernels", "b_ms", "delta_ms"]
    b200 = {}
    for _, name, ns in _device_events(B200):
        n, t = b200.get(name, (0, 0))
        b200[name] = (n + 1, t + ns)
    mi = {}
    for _, name, ns in _device_events(MI300X):
        n, t = mi.get(name, (0, 0))
        mi[name] = (n + 1, t + ns)
    assert set(b200) & set(mi)  # the runs share names (memcpy rows, at::native kernels)
    per_cat: dict[str, int] = {}
    for cat, name, a_n, a_ms, b_n, b_ms, d in rows:
        per_cat[cat] = per_cat.get(cat, 0) + 1
        assert (a_n, b_n) == (b200.get(name, (0, 0))[0], mi.get(name, (0, 0))[0])
        assert d == pytest.approx(_ms(mi.get(name, (0, 0))[1] - b200.get(name, (0, 0))[1]), abs=1e-3)
    assert per_cat and max(per_cat.values()) <= 3
    comm = [r for r in rows if r[0] == "communication"]
    assert comm[0][1].startswith("void (anonymous namespace)::multimem_all_reduce_kernel")


def test_cli_json_and_csv(runs: tuple[Path, dict[str, str]]) -> None:
    store, ids = runs
    b = ids.get("tpu", ids["b200"])  # cross-vendor: a TPU run against an MI300X run when present
    res = run_cli("compare", ids["mi300x"], b, "--store", str(store), "-f", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == {"a", "b", "categories", "top_kernels", "serving"}
    assert doc["serving"] == []  # no load-driven requests in these runs (tests/test_serving.py has them)
    assert (doc["a"], doc["b"]) == (ids["mi300x"], b)
    assert [c["category"] for c in doc["categories"]] == list(CATEGORIES)
    assert set(doc["categories"][0]) == {
        "category", "a_kernels", "a_ms", "a_pct", "b_kernels", "b_ms", "b_pct", "delta_ms", "delta_pct"
    }
    if "tpu" in ids:  # the TPU run's all-reduce ops are communication; its copies are memcpy
        comm = next(c for c in doc["categories"] if c["category"] == "communication")
        assert comm["b_kernels"] == 12 and comm["a_kernels"] == 0 and comm["delta_pct"] is None
    res = run_cli("compare", ids["mi300x"], b, "--store", str(store), "-f", "csv")
    assert res.returncode == 0, res.stderr
    table = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [r["category"] for r in table] == list(CATEGORIES)
    for r, c in zip(table, doc["categories"]):
        assert float(r["delta_ms"]) == pytest.approx(c["delta_ms"])
    res = run_cli("compare", ids["mi300x"], b, "--store", str(store))
    assert res.returncode == 0 and "gemm" in res.stdout


def test_unknown_run_is_one_line_exit_2(runs: tuple[Path, dict[str, str]]) -> None:
    store, ids = runs
    res = run_cli("compare", ids["b200"], "no-such-run", "--store", str(store), "-f", "json")
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no-such-run" in lines[0]
