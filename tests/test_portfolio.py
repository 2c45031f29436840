"""Issue 21 end to end: sweeps, server metrics, the agentic profile and the portfolio, against the
bundled example server (examples/serve_tiny_decoder.py, a real torch decoder with a prefix cache and
vLLM's /metrics) on 127.0.0.1, captured through its vLLM-style profiler endpoints.

Two configurations of the server stand in for two kinds of hardware (docs/portfolio.md): ``fast``
(every decode step computed once, $1.00 per hour) and ``slow`` (``--slowdown 4``: every step four
times, $0.10 per hour). Each is swept over concurrency; the portfolio must name the cheaper one at
a speed band both reach, and the fast one where only it gets there, as the stored metrics say
(recomputed here from the ``metrics`` view, not taken from the portfolio). The dashboard's
Portfolio page is driven in Debian's Chromium.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import library_query, run_cli, serve_example

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "serve_tiny_decoder.py"
PRICES = {"fast": 1.00, "slow": 0.10}  # USD per device-hour, the two stand-ins' price sheet
# the series names: the store also holds an agentic capture, so the load profile names the series
FAST, SLOW = "tiny-fast · independent", "tiny-slow · independent"
SWEEP = {"fast": "concurrency=1,2,3,4,6", "slow": "concurrency=1,2,4"}

pytest.importorskip("torch", reason="the example server's model is a torch module (pip install 'tracekit[torch]')")


def _serve(trace_dir: Path, *args: str) -> Iterator[str]:
    yield from serve_example(*args, env={"VLLM_TORCH_PROFILER_DIR": str(trace_dir)})


def _capture(url: str, trace_dir: Path, store: Path, out: Path, *extra: str, duration: float = 0.8) -> dict[str, Any]:
    """``tracekit capture --server vllm`` with a load, JSON result; short windows (the server's
    PyTorch profiler takes seconds to export each)."""
    r = run_cli("capture", "--server", "vllm", url, "--trace-dir", str(trace_dir), "--duration", f"{duration}",
                "--warmup", "0.3", "--load", url, "--max-tokens", "12", "--store", str(store), "--out", str(out),
                "--json", *extra, timeout=900)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both stand-ins swept into one store, plus an independent and an agentic capture of the fast one."""
    tmp = tmp_path_factory.mktemp("portfolio")
    store = tmp / "store.duckdb"
    out: dict[str, Any] = {"store": store, "tmp": tmp}
    for name, args in (("fast", ()), ("slow", ("--slowdown", "4"))):
        trace_dir = tmp / f"prof-{name}"
        trace_dir.mkdir()
        for url in _serve(trace_dir, *args):
            out[name] = _capture(url, trace_dir, store, tmp / f"sweep-{name}", "--prompt-tokens", "40",
                                 "--sweep", SWEEP[name], "--tag", f"hardware=tiny-{name}")
            if name == "fast":
                common = ("--concurrency", "2", "--prompt-tokens", "48")
                out["independent"] = _capture(url, trace_dir, store, tmp / "independent", *common,
                                              "--tag", "hardware=tiny-fast", duration=2.0)
                out["agentic"] = _capture(url, trace_dir, store, tmp / "agentic", *common, "--load-profile",
                                          "agentic", "--turns", "4", "--turn-tokens", "24",
                                          "--tag", "hardware=tiny-fast", duration=2.0)
    prices = tmp / "prices.toml"
    prices.write_text("# the stand-ins' rented prices (USD per device-hour)\nsheet = \"rented\"\n" + "".join(
        f'[prices."tiny-{n}"]\nprice_per_hour_usd = {p}\n' for n, p in PRICES.items()))
    out["prices"] = prices
    return out


def _sql(store: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    return library_query(store, sql, params or [])


def test_a_sweep_stores_one_run_per_point_with_requests_server_metrics_and_a_trace(sweeps: dict[str, Any]) -> None:
    store = sweeps["store"]
    doc = sweeps["fast"]
    assert [p["value"] for p in doc["points"]] == [1, 2, 3, 4, 6]
    ids = [p["run_id"] for p in doc["points"]]
    assert len(set(ids)) == 5
    tags = dict(_sql(store, "SELECT run_id, tags FROM runs WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [ids]))
    assert {t["sweep_id"] for t in tags.values()} == {doc["sweep_id"]}
    assert sorted((int(t["sweep_point"]), t["sweep_value"]) for t in tags.values()) == [
        (0, "1"), (1, "2"), (2, "3"), (3, "4"), (4, "6")]
    assert all(t["sweep_param"] == "concurrency" and t["hardware"] == "tiny-fast" and t["load_profile"] == "independent"
               and t["served_model"] == "tiny-decoder" for t in tags.values())
    # the sweep directory says what it was and where each point's traces are
    meta = json.loads((Path(doc["out_dir"]) / "tracekit-sweep.json").read_text())
    assert meta["sweep_id"] == doc["sweep_id"] and [p["run_id"] for p in meta["points"]] == ids
    for rid in ids:
        n_req, n_err = _sql(store, "SELECT count(*), count(error) FROM requests WHERE run_id = ?", [rid])[0]
        scrapes = _sql(store, "SELECT count(DISTINCT t_ns) FROM server_metrics WHERE run_id = ?", [rid])[0][0]
        ops = _sql(store, "SELECT count(*) FROM ops WHERE run_id = ?", [rid])[0][0]
        assert n_req > 0 and n_err == 0 and ops > 0, rid
        assert scrapes >= 2, rid
        # the server's metrics landed, and the serving analyzer derived its three from them
        names = {n for (n,) in _sql(store, "SELECT name FROM metrics WHERE run_id = ?", [rid])}
        assert {"prefix_cache_hit_rate", "kv_cache_usage_p95", "queue_depth_p95", "output_tokens_per_s_per_user"} <= names
        # every scrape lies inside the capture window, every request started inside it
        point_dir = Path(doc["out_dir"]) / next(p["dir"] for p in meta["points"] if p["run_id"] == rid)
        window = json.loads((point_dir / "tracekit-capture.json").read_text())
        w0, w1 = window["window_start_ns"], window["window_end_ns"]
        lo, hi = _sql(store, "SELECT min(t_ns), max(t_ns) FROM server_metrics WHERE run_id = ?", [rid])[0]
        assert lo < w0 <= hi <= w1  # the last scrape before the window is the counters' baseline
        assert _sql(store, "SELECT count(DISTINCT t_ns) FROM server_metrics WHERE run_id = ? AND t_ns < ?",
                    [rid, w0])[0][0] == 1
        assert _sql(store, "SELECT min(start_ns) >= ? AND max(start_ns) <= ? FROM requests WHERE run_id = ?",
                    [w0, w1, rid])[0][0]
        # the server's own throughput: Δ generation tokens from the window's first scrape to the first one
        # after the last request started, recomputed from the raw samples
        (server_tps,) = _sql(store, "SELECT value FROM metrics WHERE run_id = ? AND name = 'server_output_tokens_per_s'",
                             [rid])[0]
        (raw,) = _sql(store, """
            WITH g AS (SELECT t_ns, value FROM server_metrics WHERE run_id = $1 AND name = 'vllm:generation_tokens_total'),
                 e AS (SELECT min(t_ns) AS t1 FROM g WHERE t_ns >= (SELECT max(start_ns) FROM requests WHERE run_id = $1))
            SELECT ((SELECT value FROM g, e WHERE t_ns = t1) - (SELECT value FROM g ORDER BY t_ns LIMIT 1))
                   / (((SELECT t1 FROM e) - (SELECT min(t_ns) FROM g)) / 1e9)""", [rid])[0]
        assert server_tps == pytest.approx(raw)
    # more clients: each user gets fewer tokens/s from this unbatched server
    speed = dict(_sql(store, "SELECT run_id, value FROM metrics WHERE name = 'output_tokens_per_s_per_user' "
                             "AND run_id IN (SELECT unnest(?::VARCHAR[]))", [ids]))
    assert speed[ids[0]] > speed[ids[-1]]


def test_prefix_cache_hit_rate_rises_with_the_agentic_profiles_context_reuse(sweeps: dict[str, Any]) -> None:
    store = sweeps["store"]
    ind, agt = sweeps["independent"]["run"]["run_id"], sweeps["agentic"]["run"]["run_id"]
    rate = dict(_sql(store, "SELECT run_id, value FROM metrics WHERE name = 'prefix_cache_hit_rate' "
                            "AND run_id IN (?, ?)", [ind, agt]))
    # recomputed from the raw scrapes: Δ hits ÷ Δ queries of vLLM's counters over the window
    raw = dict(_sql(store, """
        SELECT run_id, (max(value) FILTER (WHERE name = 'vllm:prefix_cache_hits_total')
                        - min(value) FILTER (WHERE name = 'vllm:prefix_cache_hits_total'))
                     / (max(value) FILTER (WHERE name = 'vllm:prefix_cache_queries_total')
                        - min(value) FILTER (WHERE name = 'vllm:prefix_cache_queries_total'))
        FROM server_metrics WHERE run_id IN (?, ?) GROUP BY run_id""", [ind, agt]))
    assert math.isclose(rate[agt], raw[agt]) and math.isclose(rate[ind], raw[ind])
    # independent random prompts share no 16-token block; each agentic turn re-sends the last one's
    assert rate[ind] == 0.0
    assert rate[agt] > 0.3
    # per turn: the prompt grows, and from turn 1 on most of it comes from the cache (the server's
    # usage.prompt_tokens_details.cached_tokens, per request)
    turns = _sql(store, "SELECT turn, prompt_tokens_mean, cached_share FROM ttft_by_turn WHERE run_id = ? "
                        "ORDER BY turn", [agt])
    assert [t[0] for t in turns] == list(range(len(turns))) and len(turns) >= 2
    assert all(b[1] > a[1] for a, b in itertools.pairwise(turns))
    assert turns[0][2] == 0.0 and all(t[2] > 0.5 for t in turns[1:])
    finding = _sql(store, "SELECT title, evidence FROM findings WHERE run_id = ? AND title LIKE 'TTFT p95 %'", [agt])
    assert finding and len(json.loads(finding[0][1])["turns"]) == len(turns)


def _expected(store: Path, band: float) -> tuple[str | None, dict[str, float]]:
    """Each stand-in's cheapest cost at ≥ band tokens/s per user (its independent-prompt runs: the
    series FAST and SLOW), from the stored metrics alone."""
    # throughput: the server's own count over the load's period (every run here was scraped)
    rows = _sql(store, """
        SELECT r.tags['hardware'], m1.value, m2.value FROM runs r
        JOIN metrics m1 ON m1.run_id = r.run_id AND m1.name = 'server_output_tokens_per_s'
        JOIN metrics m2 ON m2.run_id = r.run_id AND m2.name = 'output_tokens_per_s_per_user'
        WHERE r.tags['load_profile'] = 'independent' AND coalesce(r.tags['steady_state'], 'reached') = 'reached'""")
    best: dict[str, float] = {}
    for hw, tps, per_user in rows:
        if per_user >= band:
            cost = PRICES[hw.removeprefix("tiny-")] / (tps * 3600) * 1e6
            best[hw] = min(best.get(hw, math.inf), cost)
    return (min(best, key=lambda k: best[k]) if best else None), best


def _portfolio(sweeps: dict[str, Any], band: float, store: Path | None = None) -> dict[str, Any]:
    r = run_cli("portfolio", "--store", str(store or sweeps["store"]), "--price-sheet", str(sweeps["prices"]),
                "--min-speed", f"{band}", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _max_speed(store: Path, hw: str) -> float:
    return _sql(store, """SELECT max(m.value) FROM metrics m JOIN runs r USING (run_id)
                          WHERE m.name = 'output_tokens_per_s_per_user' AND r.tags['hardware'] = ?
                            AND r.tags['sweep_id'] IS NOT NULL""", [hw])[0][0]


def test_portfolio_names_the_cheaper_hardware_at_a_band_and_the_only_one_above(sweeps: dict[str, Any]) -> None:
    store = sweeps["store"]
    slow_max, fast_max = _max_speed(store, "tiny-slow"), _max_speed(store, "tiny-fast")
    assert fast_max > slow_max  # four times the compute per step
    # a band both reach: the cheaper per token wins (the slow one, at a tenth of the price)
    low = round(0.5 * slow_max, 1)
    want, costs = _expected(store, low)
    doc = _portfolio(sweeps, low)
    assert want == "tiny-slow" and doc["cheapest"] == SLOW, (doc["answer"], costs)
    assert doc["answer"].startswith(f"At ≥ {low:g} tokens/s per user, {SLOW} is cheapest")
    cheapest = next(s for s in doc["series"] if s["series"] == SLOW)
    assert math.isclose(cheapest["usd_per_1m"], costs["tiny-slow"])
    # above the slow one's best speed only the fast one serves the band: the ranking flips
    high = round((slow_max + fast_max) / 2, 1)
    want, costs = _expected(store, high)
    doc = _portfolio(sweeps, high)
    assert want == "tiny-fast" and doc["cheapest"] == FAST
    assert [s["reaches_band"] for s in doc["series"] if s["series"] == SLOW] == [False]
    # every point priced from the sheet, and the frontiers are the Pareto sets of each series
    pts = doc["points"]
    assert len([p for p in pts if p["sweep_id"]]) == 8 and all(p["price_source"] == str(sweeps["prices"]) for p in pts)
    for p in pts:
        same = [q for q in pts if q["series"] == p["series"] and q is not p]
        dominated = any(q["per_user"] >= p["per_user"] and q["per_device"] >= p["per_device"]
                        and (q["per_user"], q["per_device"]) != (p["per_user"], p["per_device"]) for q in same)
        assert p["on_throughput_frontier"] == (not dominated)
        cheaper = any(q["per_user"] >= p["per_user"] and q["usd_per_1m"] <= p["usd_per_1m"]
                      and (q["per_user"], q["usd_per_1m"]) != (p["per_user"], p["usd_per_1m"]) for q in same)
        assert p["on_cost_frontier"] == (not cheaper)
        assert math.isclose(p["usd_per_1m"], PRICES[p["hardware"].removeprefix("tiny-")]
                            / (p["output_tokens_per_s"] * 3600) * 1e6)
        assert p["throughput_source"] == "server"


def test_a_point_whose_load_never_reached_steady_state_answers_no_band(sweeps: dict[str, Any], tmp_path: Path) -> None:
    """Every closed-loop sweep point drained its warm-up and is tagged ``steady_state=reached`` (the
    other captures, not sweeps, are not tagged). A point tagged ``past_capacity`` (an open loop
    whose queue was still growing) stays in the table, says why it is excluded, and the band goes
    to the series' next cheapest point, as the metrics say."""
    store = tmp_path / "store.duckdb"
    shutil.copy(sweeps["store"], store)  # the module's store stays as the other tests read it
    tagged = _sql(store, "SELECT tags['sweep_id'] IS NOT NULL, tags['steady_state'] FROM runs")
    assert {t for sweep, t in tagged if sweep} == {"reached"} and {t for sweep, t in tagged if not sweep} == {None}
    low = round(0.5 * _max_speed(store, "tiny-slow"), 1)
    doc = _portfolio(sweeps, low, store)
    winner = next(s for s in doc["series"] if s["series"] == SLOW)["run_id"]
    assert all(p["excluded"] is None for p in doc["points"])
    assert run_cli("update", winner, "--tag", "steady_state=past_capacity", "--store", str(store)).returncode == 0
    _, costs = _expected(store, low)
    doc = _portfolio(sweeps, low, store)
    after = next(s for s in doc["series"] if s["series"] == SLOW)
    assert after["run_id"] != winner
    if "tiny-slow" in costs:  # another slow point still reaches the band: the next cheapest answers
        assert math.isclose(after["usd_per_1m"], costs["tiny-slow"])
    else:
        assert after["run_id"] is None and not after["reaches_band"]
    # whichever series now wins (the agentic capture is a series too) is the cheapest left, and not it
    priced = [s for s in doc["series"] if s["usd_per_1m"] is not None]
    assert doc["cheapest"] == min(priced, key=lambda s: s["usd_per_1m"])["series"] and winner not in doc["answer"]
    [excluded] = [p for p in doc["points"] if p["excluded"] is not None]
    assert excluded["run_id"] == winner and excluded["excluded"] == "past capacity: its queue grew during the window"
    table = run_cli("portfolio", "--store", str(store), "--price-sheet", str(sweeps["prices"]), "--format", "csv")
    assert table.returncode == 0 and f"{winner}," in table.stdout and "past capacity: its queue grew" in table.stdout


def test_portfolio_filters_and_bad_price_sheets(sweeps: dict[str, Any], tmp_path: Path) -> None:
    store = sweeps["store"]
    one = run_cli("portfolio", "--store", str(store), "--sweep", sweeps["slow"]["sweep_id"], "--format", "json")
    assert one.returncode == 0, one.stderr
    doc = json.loads(one.stdout)
    assert {p["run_id"] for p in doc["points"]} == {p["run_id"] for p in sweeps["slow"]["points"]}
    # without a price for the CPU stand-ins: points, no cost, and the answer says why
    assert all(p["usd_per_1m"] is None for p in doc["points"])
    assert "no point there has a price" in doc["answer"] or "No hardware reaches" in doc["answer"]
    bad = tmp_path / "bad.toml"
    bad.write_text('sheet = "leased"\n')
    r = run_cli("portfolio", "--store", str(store), "--price-sheet", str(bad))
    assert r.returncode == 2 and r.stderr.strip() == f"error: {bad}: sheet must be 'rented' or 'owned', got 'leased'"
    bad.write_text('[prices."x"]\nprice_per_hour_usd = "cheap"\n')
    r = run_cli("portfolio", "--store", str(store), "--price-sheet", str(bad))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {bad}: prices.x.price_per_hour_usd") and "Traceback" not in r.stderr
    r = run_cli("portfolio", "--store", str(store), "--price-sheet", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_sweep_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    for args, why in (
        (["--sweep", "concurrency=1,2"], "--sweep varies the load: give --load URL"),
        (["--load", "http://127.0.0.1:9", "--sweep", "concurrency=1,1.5"], "positive integers"),
        (["--load", "http://127.0.0.1:9", "--sweep", "batch=1,2"], "expected concurrency=N,N,… or rate=R,R,…"),
        (["--load", "http://127.0.0.1:9", "--sweep", "rate=1,2", "--load-profile", "agentic"], "closed-loop"),
        (["--load", "http://127.0.0.1:9", "--sweep", "concurrency=2,2"], "given twice"),
        (["--load", "http://127.0.0.1:9", "--steady-timeout", "5"], "--steady-timeout bounds a sweep point's wait"),
        (["--load", "http://127.0.0.1:9", "--sweep", "concurrency=1,2", "--steady-timeout", "0"],
         "--steady-timeout: must be more than 0"),
    ):
        r = run_cli("capture", "--server", "vllm", "http://127.0.0.1:9", "--trace-dir", str(tmp_path),
                    "--duration", "1", "--store", str(store), *args)
        assert r.returncode == 2, (args, r.stderr)
        assert why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not store.exists()


# ---------------------------------------------------------------------------------------------
# The dashboard's Portfolio page, in Chromium


def test_portfolio_page_shows_the_frontiers_and_the_answer_and_links_each_point(
    sweeps: dict[str, Any]
) -> None:
    pytest.importorskip("selenium", reason="the browser tests need selenium (pip install 'tracekit[test]')")
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from test_dashboard import _free_port, _open, _shot, _start, _stop, _wait

    store, prices = sweeps["store"], sweeps["prices"]
    slow_max = _max_speed(store, "tiny-slow")
    low = round(0.5 * slow_max, 1)
    want, costs = _expected(store, low)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start([sys.executable, "-c", "from tracekit.cli.main import main; main()", "dashboard", "--store",
                   str(store), "--port", str(port), "--price-sheet", str(prices)], base + "/")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2400"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        answer = _open(driver, f"{base}/portfolio?speed={low:g}", "#portfolio-answer")[0]
        assert want == "tiny-slow"
        assert answer.text.startswith(f"At ≥ {low:g} tokens/s per user, {SLOW} is cheapest: "
                                      f"${costs['tiny-slow']:.2f} per 1M output tokens")
        # both plots drawn: per series, the points and the frontier line
        for graph in ("portfolio-throughput", "portfolio-cost"):
            traces = _wait(driver, lambda d, g=graph: d.find_elements(By.CSS_SELECTOR, f"#{g} .scatterlayer .trace")
                           or False)
            assert len(traces) == 6  # 3 series (two stand-ins, and the agentic run) × (points, frontier line)
        _shot(driver, "portfolio")
        rows = driver.find_elements(By.CSS_SELECTOR, "#portfolio-points tbody tr")
        # header row + the 8 sweep points + the independent and agentic captures (series tiny-fast)
        assert len(rows) - 1 == 10
        # a point's link opens its run
        link = driver.find_element(By.CSS_SELECTOR, "#portfolio-points a[href^='/run?run=']")
        rid = link.text
        link.click()
        _wait(driver, lambda d: f"run={rid}" in d.current_url and d.find_elements(By.CSS_SELECTOR, "#page h2"))
        # the band moves with the speed box: above the slow one's best, the fast one
        high = round((slow_max + _max_speed(store, "tiny-fast")) / 2, 1)
        answer = _open(driver, f"{base}/portfolio?speed={high:g}&sheet=rented", "#portfolio-answer")[0]
        assert answer.text.startswith(f"At ≥ {high:g} tokens/s per user, {FAST} is cheapest")
        # a bad parameter: one line on the page, no traceback
        err = _open(driver, f"{base}/portfolio?speed=fast", "#page-error")[0]
        assert err.text == "speed='fast': expected a number (output tokens/s per user)"
    finally:
        driver.quit()
        _stop(proc)


def test_the_notebook_api_reads_the_same_portfolio_and_request_rows(sweeps: dict[str, Any]) -> None:
    pytest.importorskip("pandas", reason="the notebook API returns pandas DataFrames (pip install 'tracekit[notebook]')")
    import tracekit

    store = tracekit.Store(sweeps["store"])
    band = round(0.5 * _max_speed(sweeps["store"], "tiny-slow"), 1)
    df = store.portfolio(price_sheet=sweeps["prices"], min_speed=band)
    assert df.attrs["answer"] == _portfolio(sweeps, band)["answer"]
    assert len(df) == 10 and set(df["series"]) == {FAST, SLOW, "tiny-fast · agentic"}
    agentic = store.run(sweeps["agentic"]["run"]["run_id"])
    req = agentic.requests()
    assert req["turn"].notna().all() and req["session_id"].notna().all() and req["cached_tokens"].notna().all()
    assert list(agentic.ttft_by_turn()["turn"]) == sorted(req["turn"].unique())
    assert set(agentic.server_metrics()["name"]) >= {"vllm:prefix_cache_hits_total", "vllm:num_requests_waiting"}


def test_a_sweep_works_on_a_command_backend_restarting_the_server_per_point(tmp_path: Path) -> None:
    """--backend torch -- CMD: each point starts the command (the example server) under the injected
    profiler, loads it, captures its window and stops it; two points, two runs of one sweep."""
    from test_dashboard import _free_port

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    store = tmp_path / "s.duckdb"
    r = run_cli("capture", "--backend", "torch", "--duration", "0.8", "--warmup", "0.3", "--load", url,
                "--max-tokens", "8", "--prompt-tokens", "24", "--sweep", "concurrency=1,2", "--store", str(store),
                "--out", str(tmp_path / "sweep"), "--json", "--", sys.executable, str(EXAMPLE), "--port", str(port),
                timeout=900)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [p["value"] for p in doc["points"]] == [1, 2]
    for p in doc["points"]:
        rid = p["run_id"]
        tags = _sql(store, "SELECT tags FROM runs WHERE run_id = ?", [rid])[0][0]
        assert tags["sweep_id"] == doc["sweep_id"] and tags["capture_backend"] == "torch"
        assert _sql(store, "SELECT count(*) FROM requests WHERE run_id = ?", [rid])[0][0] > 0
        assert _sql(store, "SELECT count(*) FROM ops WHERE run_id = ?", [rid])[0][0] > 0
        assert _sql(store, "SELECT count(DISTINCT t_ns) FROM server_metrics WHERE run_id = ?", [rid])[0][0] >= 2
