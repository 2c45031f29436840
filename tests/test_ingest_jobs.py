"""``tracekit ingest --jobs N``: runs parsed in worker processes store exactly what a sequential
ingest stores, in one transaction, and a bad input leaves the store as it was."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from helpers import distinct_copies, run_cli, sha256

from tracekit.store import RUN_TABLES

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
#: One run of each bundled format: Kineto, XPlane, rocpd, RPD, rocprofv3 CSV.
MIXED = [SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz", SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz",
         SAMPLES / "amd_synthetic_rocpd", SAMPLES / "amd_synthetic.rpd", SAMPLES / "amd_synthetic_csv"]


def _differences(a: Path, b: Path) -> dict[str, tuple[int, int]]:
    """Per run table, the rows of ``a`` not in ``b`` and of ``b`` not in ``a`` (all columns but the
    ingest time), where either is non-zero."""
    con = duckdb.connect(str(a), read_only=True)
    con.execute(f"ATTACH '{b}' AS other (READ_ONLY)")
    out = {}
    for table in RUN_TABLES:
        cols = ", ".join(c[0] for c in con.execute(f"DESCRIBE main.{table}").fetchall() if c[0] != "ingested_at")
        only_a, only_b = (con.execute(f"SELECT count(*) FROM (SELECT {cols} FROM {x}.{table} EXCEPT ALL "
                                      f"SELECT {cols} FROM {y}.{table})").fetchone()[0]
                          for x, y in (("main", "other.main"), ("other.main", "main")))
        if only_a or only_b:
            out[table] = (only_a, only_b)
    con.close()
    return out


def test_parallel_ingest_stores_what_a_sequential_one_stores(tmp_path: Path) -> None:
    paths = [*map(str, MIXED), *map(str, distinct_copies(tmp_path, 3))]
    seq, par = tmp_path / "seq.duckdb", tmp_path / "par.duckdb"
    one = json.loads(run_cli("ingest", *paths, "--store", str(seq), "--json").stdout)
    two = json.loads(run_cli("ingest", *paths, "--store", str(par), "--json", "--jobs", "2").stdout)
    assert [r["run_id"] for r in two] == [r["run_id"] for r in one]  # input order kept
    assert all(r["created"] for r in two)
    assert [(r["vendor"], r["n_files"]) for r in two] == [(r["vendor"], r["n_files"]) for r in one]
    assert _differences(seq, par) == {}
    n_rows = duckdb.connect(str(par), read_only=True).execute("SELECT count(*) FROM host_events").fetchone()
    assert n_rows and n_rows[0] > 10_000  # the comparison compared real rows


def test_parallel_reingest_updates_labels_and_adds_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    paths = [str(p) for p in MIXED[:3]]
    assert run_cli("ingest", *paths, "--store", str(store), "--jobs", "2", "--label", "a").returncode == 0
    again = json.loads(run_cli("ingest", *paths, str(MIXED[3]), "--store", str(store), "--jobs", "2",
                               "--label", "b", "--json").stdout)
    assert [r["created"] for r in again] == [False, False, False, True]
    assert [r["updated"] for r in again[:3]] == [["label"]] * 3
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT label, count(*) FROM run_meta GROUP BY ALL").fetchall() == [("b", 4)]


def test_a_bad_input_among_parallel_runs_leaves_the_store_unchanged(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    assert run_cli("ingest", str(MIXED[0]), "--store", str(store)).returncode == 0
    before = sha256(store)
    bad = tmp_path / "broken.pt.trace.json.gz"
    bad.write_bytes(MIXED[0].read_bytes()[:5000])  # a truncated gzip stream
    res = run_cli("ingest", *map(str, MIXED[1:3]), str(bad), "--store", str(store), "--jobs", "2")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stderr.startswith(f"error: {bad}")
    assert sha256(store) == before


def test_jobs_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    res = run_cli("ingest", str(MIXED[0]), "--store", str(tmp_path / "s.duckdb"), "--jobs", "65")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--jobs" in res.stderr
    assert not (tmp_path / "s.duckdb").exists()


def _verdicts(store: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every stored finding (severity, analyzer, title) and metric (value to 9 significant digits:
    a double sum's last bit depends on the order rows are stored) of every run."""
    with duckdb.connect(str(store), read_only=True) as con:
        findings = con.execute("SELECT run_id, severity, analyzer, title, saving_ns FROM finding_rows "
                               "ORDER BY ALL").fetchall()
        metrics = con.execute("SELECT run_id, analyzer, name, unit, CASE WHEN value = 0 THEN 0 ELSE "
                              "round(value / pow(10, floor(log10(abs(value))) - 8)) END FROM metric_rows "
                              "ORDER BY ALL").fetchall()
    return findings, metrics


def test_ingest_analyze_stores_the_verdict_of_ingest_then_analyze(tmp_path: Path) -> None:
    """--analyze (one process, and --jobs 2 where each process analyzes what it parsed) stores the
    findings and metrics that ingest followed by tracekit analyze --all stores."""
    paths = [*map(str, MIXED), str(SAMPLES / "nsys_synthetic_tp2_graphs.sqlite")]
    stores = {name: tmp_path / f"{name}.duckdb" for name in ("after", "one", "two")}
    assert run_cli("ingest", *paths, "--store", str(stores["after"])).returncode == 0
    assert run_cli("analyze", "--all", "--store", str(stores["after"])).returncode == 0
    r = run_cli("ingest", *paths, "--store", str(stores["one"]), "--analyze")
    assert r.returncode == 0, r.stderr
    r = run_cli("ingest", *paths, "--store", str(stores["two"]), "--analyze", "--jobs", "2")
    assert r.returncode == 0, r.stderr
    want = _verdicts(stores["after"])
    assert len(want[0]) >= 12 and len({f[0] for f in want[0]}) == len(paths)  # every run has findings
    assert _verdicts(stores["one"]) == want
    assert _verdicts(stores["two"]) == want
