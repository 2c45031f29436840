"""The server-metric views (docs/portfolio.md#server-metrics): per-series increases summed, a restart
counted from 0, aliases of one quantity never added up, SGLang's names, and the serving analyzer's
metrics from them. Scrapes built here by hand, each assertion computed from their values."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import undo_schema_6

from tracekit.analysis import library
from tracekit.collectors.load.prometheus import parse_metrics
from tracekit.server_metric_rows import Scrape, insert_scrapes, label_text
from tracekit.store import close, connect

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prometheus"


def _summary(tmp_path: Path, scrapes: list[Scrape]) -> dict[str, object]:
    con = connect(tmp_path / "s.duckdb")
    try:
        insert_scrapes(con, "run", scrapes)
        library.install(con)
        cur = con.execute("SELECT * FROM server_metric_summary WHERE run_id = 'run'")
        cols = [d[0] for d in cur.description]
        return dict(zip(cols, cur.fetchone() or (), strict=True))
    finally:
        close(con)


def test_counters_increase_per_series_a_restart_counts_from_zero_and_aliases_are_read_once(tmp_path: Path) -> None:
    e0, e1 = 'engine="0"', 'engine="1"'
    first = Scrape(1, (
        ("vllm:prefix_cache_queries_total", e0, 100.0), ("vllm:prefix_cache_queries_total", e1, 1000.0),
        ("vllm:gpu_prefix_cache_queries_total", e0, 100.0),  # the old spelling, exposed too: not added
        ("vllm:prefix_cache_hits_total", e0, 10.0), ("vllm:prefix_cache_hits_total", e1, 500.0),
        ("vllm:num_requests_waiting", e0, 2.0), ("vllm:num_requests_waiting", e1, 1.0),
        ("vllm:kv_cache_usage_perc", e0, 0.5), ("vllm:kv_cache_usage_perc", e1, 0.7),
        ("vllm:num_preemptions_total", e0, 3.0)))
    second = Scrape(2, (
        ("vllm:prefix_cache_queries_total", e0, 300.0), ("vllm:prefix_cache_queries_total", e1, 50.0),  # e1 restarted
        ("vllm:gpu_prefix_cache_queries_total", e0, 300.0),
        ("vllm:prefix_cache_hits_total", e0, 110.0), ("vllm:prefix_cache_hits_total", e1, 20.0),
        ("vllm:num_requests_waiting", e0, 4.0), ("vllm:num_requests_waiting", e1, 0.0),
        ("vllm:kv_cache_usage_perc", e0, 0.6), ("vllm:kv_cache_usage_perc", e1, 0.2),
        ("vllm:num_preemptions_total", e0, 5.0)))
    s = _summary(tmp_path, [first, second])
    # engine 0 grew by 200 queries / 100 hits; engine 1 restarted: its 50 / 20 since the restart count
    assert s["prefix_cache_queries"] == 200 + 50 and s["prefix_cache_hits"] == 100 + 20
    assert s["prefix_cache_hit_rate"] == pytest.approx(120 / 250)
    assert s["preemptions"] == 2
    # waiting summed over engines per scrape (3, then 4); usage the fullest engine (0.7, then 0.6)
    assert s["queue_depth_max"] == 4 and s["queue_depth_p95"] == pytest.approx(3 + 0.95 * (4 - 3))
    assert s["kv_cache_usage_p95"] == pytest.approx(0.6 + 0.95 * (0.7 - 0.6))
    assert s["scrapes"] == 2


def test_sglang_names_give_the_same_quantities(tmp_path: Path) -> None:
    """The SGLang sample (written from its documentation) twice, its counters grown in between."""
    samples = parse_metrics((FIXTURES / "sglang_metrics.txt").read_text())
    base = tuple((x.name, label_text(x.labels), x.value) for x in samples)
    grown = tuple((n, lab, v + {"sglang:prompt_tokens_total": 1000.0, "sglang:cached_tokens_total": 600.0}.get(n, 0.0))
                  for n, lab, v in base)
    s = _summary(tmp_path, [Scrape(1, base), Scrape(2, grown)])
    names = {x.name for x in samples}
    if "sglang:cached_tokens_total" in names:
        assert s["prefix_cache_hit_rate"] == pytest.approx(600 / 1000)
    else:  # no cached-token counter in the sample: the hit-rate gauge
        gauge = next(x.value for x in samples if x.name == "sglang:cache_hit_rate")
        assert s["prefix_cache_hit_rate"] == pytest.approx(gauge)
    usage = next(x.value for x in samples if x.name == "sglang:token_usage")
    queue = next(x.value for x in samples if x.name == "sglang:num_queue_reqs")
    assert s["kv_cache_usage_p95"] == pytest.approx(usage) and s["queue_depth_p95"] == pytest.approx(queue)


def test_one_scrape_counts_nothing(tmp_path: Path) -> None:
    """A counter's increase needs two scrapes: with one, the window's count is unknown, not 0."""
    s = _summary(tmp_path, [Scrape(1, (("vllm:prefix_cache_queries_total", "", 10.0),
                                       ("vllm:prefix_cache_hits_total", "", 5.0)))])
    assert s["prefix_cache_queries"] is None and s["prefix_cache_hit_rate"] is None


def test_server_throughput_is_the_generation_counter_over_the_loads_period(tmp_path: Path) -> None:
    """From the window's first scrape to the first scrape after the last request started (the
    load stopping); the drain that follows does not count."""
    from tracekit.request_rows import RequestRecord, insert_requests

    s = 1_000_000_000
    gen = "vllm:generation_tokens_total"
    scrapes = [Scrape(10 * s, ((gen, "", 1000.0),)), Scrape(11 * s, ((gen, "", 1300.0),)),
               Scrape(12 * s, ((gen, "", 1500.0),)),  # the load stops here
               Scrape(15 * s, ((gen, "", 1600.0),))]  # the drain
    con = connect(tmp_path / "s.duckdb")
    try:
        insert_scrapes(con, "run", scrapes)
        insert_requests(con, "run", [RequestRecord(i, t, 1000, [], 2000, 10, 8, 200, None, "usage")
                                     for i, t in enumerate((10 * s + 1, int(11.5 * s)))])
        library.install(con)
        (tps,) = con.execute("SELECT output_tokens_per_s FROM server_metric_summary").fetchone() or (None,)
    finally:
        close(con)
    assert tps == pytest.approx((1500 - 1000) / 2.0)


def test_a_schema_5_store_read_before_its_migration_has_empty_views(tmp_path: Path) -> None:
    """Read-only opens never migrate: a schema-5 store (no session columns, no server metrics)
    still installs the library, and the new views read as empty."""
    import duckdb

    path = tmp_path / "old.duckdb"
    close(connect(path))
    con = duckdb.connect(str(path))
    undo_schema_6(con)
    con.execute("CREATE VIEW requests AS SELECT *, start_ns + e2e_ns AS end_ns, NULL::DOUBLE AS tpot_ns FROM request_rows")
    con.execute("UPDATE tracekit_schema SET version = 5")
    con.close()
    ro = connect(path, read_only=True)
    try:
        library.install(ro)
        for view in ("ttft_by_turn", "server_metric_summary", "portfolio_runs"):
            assert ro.execute(f"SELECT count(*) FROM {view}").fetchone() == (0,), view
    finally:
        close(ro)
