"""Kineto ingest reproduces the raw oracle of every real trace set in ../shared/corpus/kineto.

The oracle (``expected/<set>/raw``) was computed with the standard library straight from the
JSON: per (cat, name) event counts and duration sums of device activity, and per-stream counts.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest
from conftest import KINETO, needs_shared

import tracekit

pytestmark = needs_shared

SETS = sorted(p.name for p in KINETO.iterdir() if p.is_dir() and p.name != "expected") if KINETO.is_dir() else []


def _oracle_dirs(set_name: str) -> dict[str, Path]:
    """Oracle folder per trace file stem (one folder for a single-file set)."""
    raw = KINETO / "expected" / set_name / "raw"
    if (raw / "raw_gpu_summary.json").exists():
        return {"": raw}
    return {p.name: p for p in raw.iterdir() if p.is_dir()}


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """All sets ingested into one store in one call: each set directory is one run."""
    store = tmp_path_factory.mktemp("corpus") / "corpus.duckdb"
    results = tracekit.ingest([KINETO / s for s in SETS], store=store)
    return store, {s: r.run_id for s, r in zip(SETS, results)}


@pytest.mark.parametrize("set_name", SETS)
def test_counts_and_duration_sums_match_raw_oracle(
    corpus_store: tuple[Path, dict[str, str]], set_name: str
) -> None:
    store, run_ids = corpus_store
    run_id = run_ids[set_name]
    con = duckdb.connect(str(store), read_only=True)
    try:
        for stem, oracle in _oracle_dirs(set_name).items():
            rank_filter = ""
            params: list[object] = [run_id]
            if stem:
                rank_filter = "AND rank = (SELECT rank FROM ranks WHERE run_id = ? AND path LIKE ?)"
                params += [run_id, f"%{stem}%"]
            got = {
                (cat, name): (n, total)
                for cat, name, n, total in con.execute(
                    f"""SELECT trace_category, name, count(*), sum(dur_ns)::BIGINT FROM kernels
                        WHERE run_id = ? {rank_filter}
                          AND trace_category IN ('kernel','Kernel','gpu_memcpy','Memcpy','gpu_memset','Memset')
                        GROUP BY ALL""",
                    params,
                ).fetchall()
            }
            with (oracle / "raw_gpu_events_by_name.csv").open() as f:
                want = {(r["cat"], r["name"]): (int(r["count"]), float(r["total_dur_us"])) for r in csv.DictReader(f)}
            assert set(got) == set(want), f"{set_name}/{stem}: (cat, name) keys differ"
            for key, (n, total_us) in want.items():
                got_n, got_ns = got[key]
                assert got_n == n, f"{set_name}: count of {key}"
                # within 1 ns per event, as the issue demands (plus float noise of the oracle sum)
                assert abs(got_ns - total_us * 1000) <= n * 1.0 + 1e-6 * abs(total_us), (
                    f"{set_name}: duration sum of {key}: {got_ns} ns vs {total_us} µs"
                )
            summary = json.loads((oracle / "raw_gpu_summary.json").read_text())
            n_all = sum(n for n, _ in want.values())
            assert n_all == summary["n_gpu_events"]
            per_stream = defaultdict(int)
            for s in summary["per_stream"]:
                per_stream[str(s["stream"])] += s["n"]
            got_stream = dict(
                con.execute(
                    f"""SELECT stream, count(*) FROM kernels WHERE run_id = ? {rank_filter}
                          AND category IN ('kernel', 'memcpy', 'memset') GROUP BY ALL""",
                    params,
                ).fetchall()
            )
            assert got_stream == dict(per_stream), f"{set_name}/{stem}: events per stream"
    finally:
        con.close()
