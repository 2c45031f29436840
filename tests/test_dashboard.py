"""The Dash dashboard (issue 7), driven by a real headless Chromium (Debian's ``/usr/bin/chromium``
and ``chromedriver`` through Selenium) against ``tracekit dashboard`` serving a store that holds
the project's samples: the bundled CPU, JAX and AMD captures and the weekly captures of
``tools/make_weekly_samples.py``, all analyzed. Every expected number is read from the
store with SQL of its own, never from the dashboard's code. Screenshots go to
``test-artifacts/dashboard/``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import ROOT, SAMPLES
from helpers import run_cli, sha256
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tracekit import formatting as fmt
from tracekit.names import short_kernel_name
from tracekit.xprof import has_xprof

ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
JAX = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
DECODER = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
ROCPD = SAMPLES / "amd_synthetic_rocpd"
RPD = SAMPLES / "amd_synthetic.rpd"
WORKLOAD = "tiny-decoder-cpu"
# selenium 4.2 (the newest dash[testing] allows) calls urllib3 APIs that warn
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:selenium.*")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sql(store: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _run_id(store: Path, source: Path) -> str:
    return str(_sql(store, "SELECT run_id FROM runs WHERE source = ?", [str(source)])[0][0])


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import make_weekly_samples  # tools/ (on the path through conftest.py)

    import tracekit
    from tracekit.api import analyze_runs

    store = tmp_path_factory.mktemp("dash") / "samples.duckdb"
    tracekit.ingest([DECODER, SAMPLES / "cpu_torch_compile_recompile.pt.trace.json.gz", JAX, ROCPD, RPD], store)
    make_weekly_samples.ingest(store)
    analyze_runs([], store, only_new=True)
    return store


def _wait_http(url: str, proc: subprocess.Popen[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # workers still booting
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def _start(cmd: list[str], url: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    try:
        _wait_http(url, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


@pytest.fixture(scope="module")
def server(sample_store: Path) -> Iterator[str]:
    """``tracekit dashboard`` (the real CLI, its own process) on a free loopback port."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start([sys.executable, "-c", "from tracekit.cli.main import main; main()", "dashboard",
                   "--store", str(sample_store), "--port", str(port)], base + "/")
    yield base
    _stop(proc)


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2400"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def _open(driver: webdriver.Chrome, url: str, css: str, timeout: float = 40) -> Any:
    driver.get(url)
    return WebDriverWait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, css) or False)


def _wait(driver: webdriver.Chrome, cond: Any, timeout: float = 40) -> Any:
    return WebDriverWait(driver, timeout).until(cond)


def _shot(driver: webdriver.Chrome, name: str) -> None:
    time.sleep(0.5)  # let plotly finish drawing
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _query(url: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlparse(url).query)


def test_runs_page_lists_runs_with_findings_and_search_goes_into_the_url(
    browser: webdriver.Chrome, server: str, sample_store: Path
) -> None:
    _open(browser, server + "/", "#runs-table a[href^='/run?run=']")
    links = browser.find_elements(By.CSS_SELECTOR, "#runs-table a[href^='/run?run=']")
    n_runs = _sql(sample_store, "SELECT count(*) FROM runs")[0][0]
    assert len(links) == n_runs == 11
    # the JAX run's critical findings, counted by the store
    jax = _run_id(sample_store, JAX)
    critical = _sql(sample_store, "SELECT count(*) FROM findings WHERE run_id = ? AND severity = 'critical'", [jax])
    row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#runs-table tr") if jax in tr.text)
    cell = row.find_element(By.CSS_SELECTOR, "td[data-dash-column='critical']")
    assert cell.text == str(critical[0][0]) == "3"  # 2 recompiles + the idle waiting on compilation
    # what a reviewer scans first fits a 1400×1000 window: workload, device, date, findings, KPIs
    browser.set_window_size(1400, 1000)
    try:
        time.sleep(0.5)
        for col in ("workload", "device", "captured_at", "critical", "warning", "device_busy_fraction",
                    "decode_step_time_ms"):
            right = browser.execute_script(
                "const c = document.querySelector(`#runs-table th[data-dash-column='${arguments[0]}']`);"
                "return c ? c.getBoundingClientRect().right : null;", col)
            assert right is not None and right <= 1400, (col, right)
        _shot(browser, "runs-1400")
    finally:
        browser.set_window_size(1400, 2400)
    # the device column names the catalog device the analyzers used; KPIs are formatted
    amd = _run_id(sample_store, ROCPD)
    row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#runs-table tr") if amd in tr.text)
    assert row.find_element(By.CSS_SELECTOR, "td[data-dash-column='device']").text == "AMD Instinct MI300X"
    busy = _sql(sample_store, "SELECT value FROM metrics WHERE run_id = ? AND name = 'device_busy_fraction'", [amd])
    shown = row.find_element(By.CSS_SELECTOR, "td[data-dash-column='device_busy_fraction']").text
    assert shown == fmt.percent(busy[0][0]) and shown.endswith("%")
    rpd = _run_id(sample_store, RPD)
    row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#runs-table tr") if rpd in tr.text)
    assert row.find_element(By.CSS_SELECTOR, "td[data-dash-column='device']").text.endswith("(not identified)")
    _shot(browser, "runs")

    box = browser.find_element(By.ID, "runs-search")
    box.send_keys("bucket64", Keys.ENTER)
    _wait(browser, lambda d: _query(d.current_url).get("q") == ["bucket64"])
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table a[href^='/run?run=']")) == 2)
    labels = {r[0] for r in _sql(sample_store, "SELECT label FROM runs WHERE label LIKE '%bucket64%'")}
    assert labels == {"bs4 bucket64", "bs8 bucket64"}
    assert all(lbl in browser.find_element(By.ID, "runs-table").text for lbl in labels)

    # sorting by a column header is kept in the URL too
    browser.get(server + "/?sort=decode_step_time_ms&dir=asc")
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table a[href^='/run?run=']")) == 11)
    first = browser.find_elements(By.CSS_SELECTOR, "#runs-table a[href^='/run?run=']")[0].text
    fastest = _sql(sample_store, "SELECT run_id FROM metrics WHERE name = 'decode_step_time_ms' "
                                 "AND value IS NOT NULL ORDER BY value LIMIT 1")[0][0]
    assert first == fastest


def test_select_two_runs_and_follow_the_compare_link(
    browser: webdriver.Chrome, server: str, sample_store: Path
) -> None:
    _open(browser, server + "/?q=amd_synthetic", "#runs-table input[type=checkbox]")
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table a[href^='/run?run=']")) == 2)
    browser.find_elements(By.CSS_SELECTOR, "#runs-table input[type=checkbox]")[0].click()
    _wait(browser, lambda d: len(_query(d.current_url).get("sel", [""])[0].split(",")) == 1)
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table input[type=checkbox]")) == 2)
    time.sleep(0.5)
    browser.find_elements(By.CSS_SELECTOR, "#runs-table input[type=checkbox]")[1].click()
    link = _wait(browser, lambda d: d.find_elements(By.ID, "compare-link") or False)[0]
    link.click()
    _wait(browser, lambda d: urllib.parse.urlparse(d.current_url).path == "/compare")
    q = _query(browser.current_url)
    a, b = q["a"][0], q["b"][0]
    assert {a, b} == {_run_id(sample_store, ROCPD), _run_id(sample_store, RPD)}
    table = _wait(browser, lambda d: d.find_elements(By.ID, "compare-categories-table") or False)[0]
    rows = [tr.find_elements(By.TAG_NAME, "td") for tr in table.find_elements(By.TAG_NAME, "tr")]
    heads = [th.text for th in table.find_elements(By.TAG_NAME, "th")]
    body = [r for r in rows if r and r[0].text != "total"]
    a_ms = sum(float(r[heads.index("a_ms")].text) for r in body)
    total_a = _sql(sample_store, "SELECT sum(dur_ns) / 1e6 FROM kernels WHERE run_id = ?", [a])[0][0]
    assert a_ms == pytest.approx(total_a, abs=0.005)  # the categories add up to the run's device time
    [total] = [r for r in rows if r and r[0].text == "total"]  # and the totals row says so
    assert float(total[heads.index("a_ms")].text) == pytest.approx(total_a, abs=0.005)
    # every metric side by side, green/red by the metric's own direction
    mt = browser.find_element(By.ID, "compare-metrics-table")
    mrows = {tr.find_elements(By.TAG_NAME, "td")[0].text: tr for tr in mt.find_elements(By.TAG_NAME, "tr")
             if tr.find_elements(By.TAG_NAME, "td")}
    va, vb, better = _sql(sample_store, """SELECT max(value) FILTER (WHERE run_id = $1), max(value) FILTER
        (WHERE run_id = $2), any_value(better) FROM metrics WHERE name = 'device_busy_fraction'
        AND run_id IN ($1, $2)""", [a, b])[0]
    busy = mrows["Device busy"].find_element(By.CSS_SELECTOR, "td[data-dash-column='b']")
    assert busy.text == fmt.percent(vb)
    if va != vb:
        good = (vb > va) == (better == "higher")
        assert busy.value_of_css_property("background-color") == (
            "rgba(227, 244, 225, 1)" if good else "rgba(251, 227, 228, 1)")
    # the chart's legend names the runs by label or workload and device, not by id
    legends = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#compare-categories .legendtext")]
    assert len(legends) == 2 and all(x.startswith(("A: ", "B: ")) and a not in x and b not in x for x in legends)
    # the two formats name the host-to-device copy differently: one kernel row up (red), one down (green)
    k = browser.find_element(By.ID, "compare-kernels-table")
    deltas = k.find_elements(By.CSS_SELECTOR, "td[data-dash-column='delta_ms']")
    colors = {float(c.text): c.value_of_css_property("background-color") for c in deltas}
    assert colors and all(v != 0 for v in colors)
    for v, color in colors.items():
        assert color == ("rgba(251, 227, 228, 1)" if v > 0 else "rgba(227, 244, 225, 1)")
    _shot(browser, "compare")


def _metric(store: Path, name: str, day: str) -> float:
    return float(_sql(store, """SELECT m.value FROM metrics m JOIN runs r USING (run_id)
                                 WHERE r.workload = ? AND m.name = ? AND r.captured_at::DATE = ?""",
                      [WORKLOAD, name, dt.date.fromisoformat(day)])[0][0])


def test_weekly_page_trends_deltas_and_what_changed(
    browser: webdriver.Chrome, server: str, sample_store: Path
) -> None:
    _open(browser, server + "/weekly", "#trend-decode_step_time_ms .scatterlayer .point")
    _wait(browser, lambda d: _query(d.current_url).get("week") == ["2026-11-23"])
    assert _query(browser.current_url)["workload"] == [WORKLOAD]
    weeks = _sql(sample_store, "SELECT count(DISTINCT date_trunc('week', captured_at)) FROM runs WHERE workload = ?",
                 [WORKLOAD])[0][0]
    for metric in ("decode_step_time_ms", "bucket_padding_fraction"):
        points = browser.find_elements(By.CSS_SELECTOR, f"#trend-{metric} .scatterlayer .point")
        assert len(points) == weeks == 6
    # week over week: decode step time of the 2026-11-23 capture against the 2026-11-16 one
    cur, prev = _metric(sample_store, "decode_step_time_ms", "2026-11-23"), _metric(
        sample_store, "decode_step_time_ms", "2026-11-16")
    row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#wow-table tr")
               if tr.text.startswith("decode step time"))
    change = row.find_element(By.CSS_SELECTOR, "td[data-dash-column='change']").text
    assert change == f"{100 * (cur - prev) / prev:+.1f}%"
    verdict = row.find_element(By.CSS_SELECTOR, "td[data-dash-column='verdict']").text
    assert verdict == ("better" if cur < prev else "worse")  # decode step time: lower is better
    # request-level metrics (the weekly captures' request logs, through the serving analyzer): six points
    # each, the plotted values the runs' own metrics (one run per week), in week order
    days = [d.isoformat() for (d,) in _sql(sample_store, "SELECT DISTINCT captured_at::DATE FROM runs "
                                                         "WHERE workload = ? ORDER BY 1", [WORKLOAD])]
    for metric in ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s"):
        points = browser.find_elements(By.CSS_SELECTOR, f"#trend-{metric} .scatterlayer .point")
        assert len(points) == len(days) == 6, metric
        plotted = browser.execute_script(
            f"return document.querySelector('#trend-{metric} .js-plotly-plot').data[0].y;")
        assert plotted == pytest.approx([_metric(sample_store, metric, d) for d in days], rel=1e-12), metric
    assert "TTFT p95 (lower is better)" in browser.find_element(By.ID, "trend-ttft_p95_ms").text
    ttft, ttft_prev = (_metric(sample_store, "ttft_p95_ms", d) for d in ("2026-11-23", "2026-11-16"))
    row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#wow-table tr") if tr.text.startswith("TTFT p95"))
    assert row.find_element(By.CSS_SELECTOR, "td[data-dash-column='this week']").text == fmt.value(ttft, "ms")
    assert row.find_element(By.CSS_SELECTOR, "td[data-dash-column='previous']").text == fmt.value(ttft_prev, "ms")
    assert row.find_element(By.CSS_SELECTOR, "td[data-dash-column='verdict']").text == (
        "better" if ttft < ttft_prev else "worse")
    pad = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#wow-table tr") if tr.text.startswith("bucket"))
    assert pad.find_element(By.CSS_SELECTOR, "td[data-dash-column='verdict']").text == "better"  # 0.36 → 0
    changes = browser.find_element(By.ID, "finding-changes")
    title = _sql(sample_store, """SELECT f.title FROM findings f JOIN runs r USING (run_id)
                                   WHERE r.captured_at::DATE = DATE '2026-11-16' AND f.analyzer = 'padding_waste'""")
    assert title and title[0][0].startswith("Sequence buckets pad 36% of prefill tokens")
    assert f"resolved: [CPU] (padding_waste) {title[0][0]}" in changes.text
    _shot(browser, "weekly")

    # follow the finding's run link to the Run page of the week it was last seen
    changes.find_element(By.CSS_SELECTOR, "a[href^='/run?run=']").click()
    header = _wait(browser, lambda d: d.find_elements(By.ID, "run-header") or False)[0]
    assert "bs8 bucket64" in header.text
    assert "Sequence buckets pad 36%" in browser.find_element(By.ID, "page").text

    # an earlier week, picked by URL: the finding is new there
    _open(browser, server + f"/weekly?workload={WORKLOAD}&week=2026-11-09", "#finding-changes")
    text = browser.find_element(By.ID, "finding-changes").text
    assert "new: [CPU] (padding_waste) Sequence buckets pad 36%" in text


def test_run_page_findings_compiles_roofline(browser: webdriver.Chrome, server: str, sample_store: Path) -> None:
    jax = _run_id(sample_store, JAX)
    _open(browser, server + f"/run?run={jax}", "#compile-timeline .bars path")
    titles = [s.text for s in browser.find_elements(By.CSS_SELECTOR, ".finding-title")]
    stored = _sql(sample_store, "SELECT title FROM findings WHERE run_id = ?", [jax])
    assert len(titles) == len(stored) == 5
    assert any(t.startswith("critical prefill recompiled: 5 compiles") for t in titles)
    bars = browser.find_elements(By.CSS_SELECTOR, "#compile-timeline .bars path")
    assert len(bars) == _sql(sample_store, "SELECT count(*) FROM compiles WHERE run_id = ?", [jax])[0][0] == 7
    top = _sql(sample_store, """SELECT name FROM kernels WHERE run_id = ? GROUP BY name
                                ORDER BY sum(coalesce(device_dur_ns, dur_ns)) DESC LIMIT 1""", [jax])[0][0]
    first = browser.find_element(By.CSS_SELECTOR, "#top-table td[data-dash-column='kernel']").text
    assert first == short_kernel_name(top, 70)
    # the headline KPI strip: the stored values, formatted
    busy = _sql(sample_store, "SELECT value FROM metrics WHERE run_id = ? AND name = 'device_busy_fraction'", [jax])
    assert browser.find_element(By.ID, "kpi-device_busy_fraction").text.startswith(fmt.percent(busy[0][0]))
    # metric names in words, values formatted (no 16-digit floats)
    metrics = browser.find_element(By.ID, "metrics-table").text
    assert "Device busy" in metrics and not re.search(r"\d\.\d{6,}", metrics)
    # evidence opens under its finding
    browser.find_elements(By.CSS_SELECTOR, ".finding summary")[0].click()
    evidence = _wait(browser, lambda d: [p for p in d.find_elements(By.CSS_SELECTOR, ".finding pre")
                                         if p.is_displayed()] or False)[0]
    assert json.loads(evidence.text)  # indented JSON of the stored evidence
    assert browser.find_element(By.ID, "roofline-none").is_displayed()  # no XLA costs on CPU
    _shot(browser, "run-jax")

    run = _run_id(sample_store, DECODER)
    _open(browser, server + f"/run?run={run}", "#roofline .scatterlayer .point")
    from tracekit.report_data import roofline_points

    with duckdb.connect(str(sample_store), read_only=True) as con:  # the report's costed op names
        ops = len(roofline_points(con, run))
    points = browser.find_elements(By.CSS_SELECTOR, "#roofline .scatterlayer .point")
    assert len(points) == ops and ops >= 10
    assert browser.find_element(By.ID, "compiles-none").is_displayed()
    _shot(browser, "run-decoder")


def test_bad_url_parameters_show_a_message_not_a_traceback(browser: webdriver.Chrome, server: str) -> None:
    err = _open(browser, server + "/run?run=deadbeef0000", "#page-error")[0]
    assert err.text == "no run 'deadbeef0000' in the store (see the Runs page)"
    _shot(browser, "unknown-run")
    cases = {
        "/run": "no run given (add ?run=RUN_ID; see the Runs page)",
        "/run?run=x';DROP TABLE run_meta;--": "no run \"x';DROP TABLE run_meta;--\" in the store (see the Runs page)",
        "/weekly?week=2026-13-01": "week='2026-13-01': expected a date YYYY-MM-DD",
        "/weekly?workload=nope": f"no runs of workload 'nope' with a capture time (workloads: {WORKLOAD})",
        "/?dir=sideways": "dir='sideways': expected asc or desc",
        "/compare?a=1&a=2": "parameter 'a' given 2 times",
        "/nowhere": "No page '/nowhere': the pages are /, /weekly, /run, /compare, /portfolio.",
        "/portfolio?speed=-3": "speed='-3': expected a number ≥ 0",
        "/portfolio?sheet=leased": "sheet='leased': expected rented or owned",
    }
    for url, message in cases.items():
        err = _open(browser, server + url, "#page-error")[0]
        assert err.text == message, url
    assert "Traceback" not in browser.page_source


def test_perfetto_download(server: str, sample_store: Path, tmp_path: Path) -> None:
    from tracekit.exports import export_perfetto

    run = _run_id(sample_store, ROCPD)
    with urllib.request.urlopen(f"{server}/download/perfetto/{run}.json", timeout=60) as r:
        assert r.status == 200
        assert "attachment" in r.headers["Content-Disposition"]
        body = r.read()
    doc = json.loads(body)
    kernels = _sql(sample_store, "SELECT count(*) FROM kernels WHERE run_id = ?", [run])[0][0]
    assert doc["metadata"]["counts"]["kernels"] == kernels == 58
    # the download is the file `tracekit export` writes for the run, byte for byte
    export_perfetto(run, tmp_path / "export.json", sample_store)
    assert body == (tmp_path / "export.json").read_bytes()
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(f"{server}/download/perfetto/deadbeef0000.json", timeout=30)
    assert exc.value.code == 404


@pytest.mark.skipif(not has_xprof(), reason="XProf is not installed (pip install 'tracekit[xprof]')")
def test_xplane_run_page_opens_the_run_in_xprof(browser: webdriver.Chrome, server: str, sample_store: Path) -> None:
    decoder, jax = _run_id(sample_store, DECODER), _run_id(sample_store, JAX)
    _open(browser, server + f"/run?run={decoder}", "#perfetto-link")
    assert not browser.find_elements(By.ID, "xprof-link")  # a Kineto run: no XProf
    link = _open(browser, server + f"/run?run={jax}", "#xprof-link")[0]
    assert link.get_attribute("href") == f"{server}/xprof/{jax}"
    browser.get(link.get_attribute("href"))  # in this tab (the link opens a new one)
    dash_host = urllib.parse.urlparse(server).netloc
    _wait(browser, lambda d: urllib.parse.urlparse(d.current_url).netloc not in ("", dash_host), timeout=120)
    where = urllib.parse.urlparse(browser.current_url)
    assert where.hostname == "127.0.0.1" and _query(browser.current_url)["run"] == [jax]
    _wait(browser, lambda d: d.title == "XProf")
    with urllib.request.urlopen(f"http://{where.netloc}/data/plugin/profile/runs", timeout=60) as r:
        body = r.read()
    assert json.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body) == [jax]
    with urllib.request.urlopen(f"{server}/xprof/{jax}", timeout=60) as r:  # the same server, reused
        assert urllib.parse.urlparse(r.url).netloc == where.netloc


def test_request_latency_histogram_from_the_requests_view(
    browser: webdriver.Chrome, tmp_path: Path, sample_store: Path
) -> None:
    """Requests as the load driver stores them (``request_rows``), binned in DuckDB: the counts equal
    numpy's 40-bin histogram of the same latencies."""
    import tracekit
    from tracekit.dashboard import data

    store = tmp_path / "req.duckdb"
    [res] = tracekit.ingest([DECODER], store)
    rng = np.random.default_rng(7)
    ttft = rng.lognormal(np.log(80e6), 0.4, 300).astype(np.int64)
    e2e = ttft + rng.integers(200_000_000, 900_000_000, 300)
    con = duckdb.connect(str(store))
    con.executemany(
        """INSERT INTO request_rows (run_id, request_id, start_ns, ttft_ns, e2e_ns, output_tokens, itl_ns,
                                     token_count_source) VALUES (?, ?, ?, ?, ?, 16, [], 'usage')""",
        [(res.run_id, i, 1_700_000_000_000_000_000 + i, int(t), int(e)) for i, (t, e) in enumerate(zip(ttft, e2e))])
    con.close()
    ro = tracekit.connect(store, read_only=True)
    hists = {h.column: h for h in data.request_histograms(ro, res.run_id)}
    ro.close()
    for col, values in (("ttft_ns", ttft), ("e2e_ns", e2e)):
        counts, edges = np.histogram(values / 1e6, bins=40)
        assert hists[col].counts == counts.tolist()
        assert hists[col].edges_ms == pytest.approx(edges.tolist())
    from tracekit.api import analyze_runs

    analyze_runs([res.run_id], store)  # the serving analyzer turns the requests into metrics
    port = _free_port()
    proc = _start([sys.executable, "-c", "from tracekit.cli.main import main; main()", "dashboard",
                   "--store", str(store), "--port", str(port)], f"http://127.0.0.1:{port}/")
    try:
        _open(browser, f"http://127.0.0.1:{port}/run?run={res.run_id}", "#hist-ttft_ns .bars path")
        assert "time to first token: 300 requests" in browser.find_element(By.ID, "hist-ttft_ns").text
        assert "end-to-end latency: 300 requests" in browser.find_element(By.ID, "hist-e2e_ns").text
        cards = browser.find_element(By.ID, "serving-metrics").text
        assert f"TTFT p95\n{fmt.value(np.percentile(ttft / 1e6, 95), 'ms')}" in cards
        _shot(browser, "run-requests")
    finally:
        _stop(proc)


def test_cli_errors_and_the_non_loopback_warning(sample_store: Path, tmp_path: Path) -> None:
    r = run_cli("dashboard", "--store", str(tmp_path / "none.duckdb"))
    assert r.returncode == 2
    missing = f"error: {tmp_path / 'none.duckdb'}: no such store (ingest a trace first, or pass --store)"
    assert r.stderr.strip().splitlines() == [missing]
    assert not (tmp_path / "none.duckdb").exists()
    r = run_cli("dashboard", "--store", str(sample_store), "--port", "70000")
    assert (r.returncode, r.stderr.strip()) == (2, "error: --port 70000: expected 1..65535")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_cli("dashboard", "--store", str(sample_store), "--port", str(port))
    assert r.returncode == 2 and r.stderr.startswith(f"error: --host 127.0.0.1 --port {port}: cannot listen")
    port = _free_port()
    digest = sha256(sample_store)
    proc = _start([sys.executable, "-c", "from tracekit.cli.main import main; main()", "dashboard",
                   "--store", str(sample_store), "--host", "0.0.0.0", "--port", str(port)],
                  f"http://127.0.0.1:{port}/")
    try:
        for path, search in (("/", ""), ("/weekly", ""), ("/run", f"?run={_run_id(sample_store, JAX)}")):
            assert "page-error" not in _render(f"http://127.0.0.1:{port}", path, search)
    finally:
        err = _stop(proc)
    assert "warning: listening on 0.0.0.0: anyone who can reach it can read every run" in err
    assert sha256(sample_store) == digest  # read-only: rendering pages left the store's bytes alone


def _render(base: str, path: str, search: str) -> str:
    """The router callback's response, as the browser requests it."""
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": path},
                       {"id": "url", "property": "search", "value": search}],
            "changedPropIds": ["url.pathname"], "state": []}
    req = urllib.request.Request(base + "/_dash-update-component", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return str(r.read().decode())


def test_gunicorn_serves_the_wsgi_application(sample_store: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start([str(Path(sys.executable).with_name("gunicorn")), "-w", "2", "-b", f"127.0.0.1:{port}",
                   "tracekit.dashboard.wsgi:application"], base + "/", env={"TRACEKIT_STORE": str(sample_store)})
    try:
        run = _run_id(sample_store, JAX)
        text = _render(base, "/run", f"?run={run}")
        assert f"Run {run}" in text and "prefill recompiled: 5 compiles" in text
    finally:
        _stop(proc)


def test_weekly_page_trends_device_time_for_a_gpu_workload(browser: webdriver.Chrome, tmp_path: Path) -> None:
    """Three captures of the AMD sample on MI300X in three weeks (rocpd, CSV and JSON exports of one
    synthetic run): the weekly page trends device kernel time and step time, what `check` gates,
    per catalog device; a workload with one week gets an axis of days around it, not of
    milliseconds."""
    import tracekit
    from tracekit.api import analyze_runs

    store = tmp_path / "gpu.duckdb"
    days = ["2026-11-09T10:00:00", "2026-11-16T10:00:00", "2026-11-23T10:00:00"]
    ids = []
    for path, day in zip([ROCPD, SAMPLES / "amd_synthetic_csv", SAMPLES / "amd_synthetic_results.json"], days):
        ids += [r.run_id for r in tracekit.ingest([path], store, workload="amd-decode",
                                                   captured_at=dt.datetime.fromisoformat(day))]
    ids += [r.run_id for r in tracekit.ingest([RPD], store, workload="amd-one-week",
                                               captured_at=dt.datetime(2026, 11, 18, 9))]
    analyze_runs([], store, only_new=True)
    want = [v for (v,) in _sql(store, """SELECT m.value FROM metrics m JOIN runs r USING (run_id)
                                         WHERE r.workload = 'amd-decode' AND m.name = 'device_kernel_time_ms'
                                         ORDER BY r.captured_at""")]
    assert len(want) == 3
    port = _free_port()
    proc = _start([sys.executable, "-c", "from tracekit.cli.main import main; main()", "dashboard",
                   "--store", str(store), "--port", str(port)], f"http://127.0.0.1:{port}/")
    try:
        base = f"http://127.0.0.1:{port}"
        _open(browser, base + "/weekly?workload=amd-decode", "#trend-device_kernel_time_ms .scatterlayer .point")
        data = browser.execute_script(
            "return document.querySelector('#trend-device_kernel_time_ms .js-plotly-plot').data;")
        assert [d["name"] for d in data] == ["AMD Instinct MI300X"]  # the catalog device
        assert data[0]["y"] == pytest.approx(want, rel=1e-12)
        assert browser.find_elements(By.CSS_SELECTOR, "#trend-step_device_time .scatterlayer .point") or \
            not _sql(store, "SELECT 1 FROM metrics WHERE name = 'step_device_time' AND value IS NOT NULL")
        # no mode bar over the titles
        assert not browser.find_elements(By.CSS_SELECTOR, "#trends .modebar-container .modebar-btn")
        _shot(browser, "weekly-gpu")
        _open(browser, base + "/weekly?workload=amd-one-week", "#trend-device_kernel_time_ms .scatterlayer .point")
        lo, hi = browser.execute_script(
            "return document.querySelector('#trend-device_kernel_time_ms .js-plotly-plot').layout.xaxis.range;")
        span = dt.datetime.fromisoformat(hi[:10]) - dt.datetime.fromisoformat(lo[:10])
        assert span == dt.timedelta(days=8)  # the week ± 4 days
        _shot(browser, "weekly-one-week")
    finally:
        _stop(proc)


def test_hostile_labels_are_shown_as_text_not_run(browser: webdriver.Chrome, tmp_path: Path) -> None:
    """A label, workload and tag that are HTML and script payloads show up as literal text on the
    Runs, Run and Compare pages and in the page title; none of them runs (each payload would set a
    global the test reads back)."""
    import shutil

    import tracekit
    from tracekit.api import analyze_runs

    store = tmp_path / "xss.duckdb"
    payloads = ['<img src=x onerror="window.__xss=1">', "<script>window.__xss=2</script>",
                '"><svg onload="window.__xss=3">']
    second = tmp_path / "copy.pt.trace.json.gz"
    shutil.copyfile(DECODER, second)
    a = tracekit.ingest([DECODER], store, label=payloads[0], workload=payloads[1])[0].run_id
    b = tracekit.ingest([second], store, label=payloads[2], workload=payloads[1])[0].run_id
    analyze_runs([], store, only_new=True)
    port = _free_port()
    proc = _start([sys.executable, "-c", "from tracekit.cli.main import main; main()", "dashboard",
                   "--store", str(store), "--port", str(port)], f"http://127.0.0.1:{port}/")
    try:
        base = f"http://127.0.0.1:{port}"
        for url, css in ((base + "/", "#runs-table"), (base + f"/run?run={a}", "#run-header"),
                         (base + f"/compare?a={a}&b={b}", "#compare-metrics-table"),
                         (base + "/weekly?workload=" + urllib.parse.quote(payloads[1]), "#trends, #trends-none")):
            _open(browser, url, css)
            time.sleep(0.5)  # an onerror would fire as the page renders
            assert browser.execute_script("return window.__xss === undefined"), url
            text = browser.find_element(By.TAG_NAME, "body").text
            assert not browser.find_elements(By.CSS_SELECTOR, "img[src='x'], #react-entry-point svg[onload]"), url
            if "/weekly" not in url:
                assert payloads[0] in text or payloads[2] in text, url
    finally:
        _stop(proc)


def _many_runs(tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    """A store of ``n`` runs: one real ingest of the CPU sample, then ``n - 1`` copies of its
    ``runs`` row under new ids, one capture a minute (the Runs page reads run rows, findings and
    metrics: the copies have none of the latter two, the real run has them). Run ids, newest first."""
    import tracekit
    from tracekit.api import analyze_runs

    store = tmp_path / "many.duckdb"
    real = tracekit.ingest([DECODER], store, captured_at=dt.datetime(2026, 11, 1))[0].run_id
    analyze_runs([real], store)
    con = duckdb.connect(str(store))
    try:
        con.execute("""INSERT INTO run_meta SELECT run_meta.* REPLACE (printf('copy%04d', i) AS run_id,
                              printf('copy%04d', i) AS content_sha256,
                              TIMESTAMP '2026-11-02' + to_minutes(i) AS captured_at)
                       FROM run_meta, range(?) t(i) WHERE run_id = ?""", [n - 1, real])
        ids = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY captured_at DESC, run_id").fetchall()]
    finally:
        con.close()
    return store, ids


def test_runs_table_pages_are_the_sorted_runs_in_slices(tmp_path: Path) -> None:
    """Pages of the Runs table (limit/offset in SQL) are the unpaged table cut in slices, with the
    total of all matching runs, and KPI columns decided over every page."""
    from tracekit.dashboard import data
    from tracekit.store import connect

    store, ids = _many_runs(tmp_path, 120)
    con = connect(store, read_only=True)
    try:
        whole = data.runs_table(con)
        pages = [data.runs_table(con, limit=50, offset=o) for o in (0, 50, 100)]
        past = data.runs_table(con, limit=50, offset=150)
        found = data.runs_table(con, search="copy010", limit=5)
    finally:
        con.close()
    assert [r["run_id"] for r in whole.rows] == ids and whole.total == 120
    assert [r["run_id"] for p in pages for r in p.rows] == ids
    assert [len(p.rows) for p in pages] == [50, 50, 20] and {p.total for p in pages} == {120}
    # the one analyzed run is the oldest, on the last page only: its KPI columns are on every page
    assert all(p.columns == whole.columns for p in pages)
    assert past.rows == [] and past.total == 120
    assert found.total == 10 and len(found.rows) == 5


def _texts(driver: webdriver.Chrome, css: str) -> list[str] | None:
    """The texts of the elements ``css`` finds; None while the page is replacing them."""
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]
    except StaleElementReferenceException:
        return None


def test_runs_page_is_served_a_page_at_a_time(browser: webdriver.Chrome, tmp_path: Path) -> None:
    """With more runs than a page, the browser gets 50 rows, the next page comes from the server
    (its number in the URL), and a new sort starts again at page 1."""
    store, ids = _many_runs(tmp_path, 61)
    port = _free_port()
    proc = _start([sys.executable, "-c", "from tracekit.cli.main import main; main()", "dashboard",
                   "--store", str(store), "--port", str(port)], f"http://127.0.0.1:{port}/")
    links = "#runs-table a[href^='/run?run=']"
    try:
        base = f"http://127.0.0.1:{port}"
        _open(browser, base + "/", links)
        assert _texts(browser, links) == ids[:50]
        assert "61 runs (page 1 of 2)" in browser.find_element(By.ID, "runs-count").text
        browser.find_element(By.CSS_SELECTOR, "#runs-table button.next-page").click()
        _wait(browser, lambda d: _query(d.current_url).get("page") == ["2"])
        _wait(browser, lambda d: _texts(d, links) == ids[50:])
        assert "(page 2 of 2)" in browser.find_element(By.ID, "runs-count").text
        browser.get(base + "/?page=2&sort=captured_at&dir=asc")  # a page of a sorted list
        _wait(browser, lambda d: _texts(d, links) == ids[::-1][50:])
        browser.execute_script(  # a new sort: back to page 1
            "document.querySelector(`#runs-table th[data-dash-column='captured_at'] .column-header--sort`).click()")
        _wait(browser, lambda d: "page" not in _query(d.current_url) and "sort" in _query(d.current_url))
        _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, links)) == 50)
        browser.get(base + "/?page=0")
        _wait(browser, lambda d: "page='0': expected a page number from 1" in d.find_element(By.TAG_NAME, "body").text)
    finally:
        _stop(proc)
