"""The fast materializations of ``tracekit/analysis/fastpath.py`` give exactly the rows of the SQL
library's definitions (the reference ``tracekit query`` runs): ``device_work``,
``busy_intervals`` and ``chain_kernels(max_gap_ns)``, on a hand-made timeline built to hit the
edge cases (several devices and streams, rows without a correlation id, identical start times,
overlaps, fusable chains cut by gaps and by other kernels), on the bundled samples, and on every
corpus run when ``../shared`` is present."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from conftest import ROOT, needs_shared

import tracekit
from tracekit.analysis import fastpath, library
from tracekit.analysis.fusion import CHAIN_MAX_GAP_NS


def _body(name: str) -> str:
    obj = next(o for o in library.objects() if o.name == name)
    return library._VIEW_BODY.sub("", obj.sql.strip(), count=1).rstrip().rstrip(";")


def _differ(con: duckdb.DuckDBPyConnection, a: str, b: str) -> tuple[int, int, int]:
    """(rows of a not in b, rows of b not in a, rows of a), as multisets."""
    x = con.execute(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b}))").fetchall()[0][0]
    y = con.execute(f"SELECT count(*) FROM (({b}) EXCEPT ALL ({a}))").fetchall()[0][0]
    n = con.execute(f"SELECT count(*) FROM ({a})").fetchall()[0][0]
    return int(x), int(y), int(n)


def check_store(store: Path) -> dict[str, dict[str, int]]:
    """For every run of ``store``: the fast rows equal the SQL rows; returns row counts."""
    con = tracekit.connect(store, read_only=True)
    counts: dict[str, dict[str, int]] = {}
    try:
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        for run in runs:
            with library.scoped(con, run):
                lit = f"'{run}'"
                # device_work: the fast view against the library's SQL over the base tables
                dw = _differ(con, f"SELECT * FROM device_work WHERE run_id = {lit}",
                             f"SELECT * FROM ({_body('device_work')}) WHERE run_id = {lit}")
                # busy_intervals: against the SQL union over (the verified) device_work
                bi = _differ(con, f"SELECT * FROM busy_intervals WHERE run_id = {lit}",
                             f"SELECT * FROM ({_body('busy_intervals')}) WHERE run_id = {lit}")
                fast = fastpath.chain_kernels(con, run, CHAIN_MAX_GAP_NS)
                ck = _differ(con, f"SELECT * FROM {fast}",
                             f"SELECT * FROM chain_kernels({CHAIN_MAX_GAP_NS}) WHERE run_id = {lit}")
                fast2 = fastpath.chain_kernels(con, run, CHAIN_MAX_GAP_NS, min_kernels=2)
                ck2 = _differ(con, f"SELECT * FROM {fast2}",
                              f"""SELECT * FROM chain_kernels({CHAIN_MAX_GAP_NS}) WHERE run_id = {lit}
                                  QUALIFY count(*) OVER (PARTITION BY rank, device, stream, chain) >= 2""")
            for what, (x, y, n) in (("device_work", dw), ("busy_intervals", bi), ("chain_kernels", ck),
                                    ("chains_of_2", ck2)):
                assert (x, y) == (0, 0), f"run {run}: {what}: {x} fast rows not in SQL, {y} SQL rows not in fast"
                counts.setdefault(run, {})[what] = n
    finally:
        con.close()
    return counts


def _k(name: str, ts: float, dur: float, corr: int | None, stream: int = 7, device: int = 0) -> dict[str, object]:
    args: dict[str, object] = {"device": device, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": args}


def test_fast_rows_equal_the_sql_on_a_hand_made_timeline(tmp_path: Path) -> None:
    ew = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
    norm = "void at::native::layer_norm_kernel<float>"
    gemm = "Cijk_Alik_Bljk_HHS_BH_MT128x128"
    ev = [
        # device 0, stream 7: chain ew→norm, a GEMM, chain ew→ew cut by a 200 µs gap, ties
        _k(ew, 0, 5, 1), _k(norm, 6, 5, 2), _k(gemm, 12, 50, 3), _k(ew, 63, 5, 4), _k(ew, 69, 5, 5),
        _k(ew, 274, 5, 6), _k(ew, 280, 5, None), _k(ew, 280, 5, None), _k(norm, 280, 7, 7),
        # device 0, stream 9, overlapping stream 7 (one busy island across streams)
        _k(ew, 3, 20, 8, stream=9), _k(norm, 24, 4, 9, stream=9), _k(gemm, 400, 10, None, stream=9),
        # device 1: its own islands and chains; an overlap fully inside another row
        _k(gemm, 0, 100, 10, device=1), _k(ew, 10, 5, 11, device=1), _k(ew, 101, 3, 12, device=1),
        _k(norm, 105, 3, 13, device=1), _k(ew, 500, 3, None, device=1),
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev}))
    store = tmp_path / "s.duckdb"
    tracekit.ingest([path], store=store)
    counts = next(iter(check_store(store).values()))
    assert counts["device_work"] == len(ev)
    # islands (µs): device 0 = [0, 62] (streams 7 and 9 overlap), [63, 68], [69, 74], [274, 279],
    # [280, 287] (three rows starting together), [400, 410]; device 1 = [0, 100] (a row inside
    # it), [101, 104], [105, 108], [500, 503]
    assert counts["busy_intervals"] == 10
    assert counts["chain_kernels"] == sum(1 for e in ev if e["name"] != gemm)
    assert counts["chains_of_2"] > 0


def test_fast_rows_equal_the_sql_on_the_bundled_samples(tmp_path: Path) -> None:
    samples = ROOT / "sample_traces"
    store = tmp_path / "s.duckdb"
    for p in (samples / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz", samples / "amd_synthetic.rpd",
              samples / "amd_synthetic_rocpd", samples / "amd_synthetic_results.json",
              samples / "jax_cpu_decode_recompile.xplane.pb.gz"):
        tracekit.ingest([p], store=store)
    counts = check_store(store)
    assert len(counts) == 5
    assert sum(c["device_work"] for c in counts.values()) > 0


@needs_shared
def test_fast_rows_equal_the_sql_on_every_corpus_run(tmp_path: Path) -> None:
    from corpus_runs import CORPUS_RUNS, run_path

    store = tmp_path / "c.duckdb"
    for label in CORPUS_RUNS:
        tracekit.ingest([run_path(label, tmp_path)], store=store, label=label)
    counts = check_store(store)
    assert len(counts) == len(CORPUS_RUNS)
    assert sum(c["chains_of_2"] for c in counts.values()) > 0
