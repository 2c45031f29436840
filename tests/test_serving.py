"""store_requests and the serving analyzer: metrics equal to percentiles computed here from the
records, cost per token from a user price, findings, and their place in analyze/report/compare."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES
from helpers import run_cli
from load_server import Behaviour, serve

import tracekit
from tracekit import formatting as fmt
from tracekit.api import analyze_runs, compare_runs, store_requests
from tracekit.collectors.load import LoadResult, LoadSpec, RequestRecord, run_load
from tracekit.errors import TraceInputError
from tracekit.store import delete_run, open_store

MS = 1_000_000


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """A store with the CPU Kineto sample (no devices) and the AMD rocpd sample (one MI300X)."""
    store = tmp_path_factory.mktemp("serving") / "store.duckdb"
    cpu, amd = tracekit.ingest(
        [SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz", SAMPLES / "amd_synthetic_rocpd"],
        store=store,
    )
    yield store, cpu.run_id, amd.run_id


@pytest.fixture(scope="module")
def loaded() -> LoadResult:
    """A real load: every 9th request fails with HTTP 500, every 5th has a 60 ms first token."""
    with serve(Behaviour(first_token_s=0.005, token_interval_s=0.002, fail_every=9, slow_every=5,
                         slow_first_token_s=0.06)) as (url, _):
        res = run_load(LoadSpec(url, duration_s=1.0, concurrency=3, max_tokens=6, prompt_tokens="uniform:4:40"))
    assert len(res.records) >= 20
    return res


@pytest.fixture(autouse=True)
def no_user_hardware(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TRACEKIT_HARDWARE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/tracekit/hardware.toml


def _serving(store: Path, run_id: str) -> tuple[dict[str, float | None], list[dict[str, object]]]:
    [res] = analyze_runs([run_id], store)
    metrics = {m["name"]: m["value"] for m in res["metrics"] if m["analyzer"] == "serving"}
    return metrics, [f for f in res["findings"] if f["analyzer"] == "serving"]


def _expected(res: LoadResult) -> dict[str, float]:
    """The serving metrics computed here with numpy (linear percentiles) from the records."""
    ok = [r for r in res.records if r.error is None]
    ttft = np.array([r.ttft_ns for r in ok], dtype=float) / 1e6
    tpot = np.array([(r.e2e_ns - r.ttft_ns) / (r.output_tokens - 1) for r in ok if r.ttft_ns is not None],
                    dtype=float) / 1e6
    itl = np.array([g for r in ok for g in r.itl_ns], dtype=float) / 1e6
    e2e = np.array([r.e2e_ns for r in ok], dtype=float) / 1e6
    window_s = (max(r.start_ns + r.e2e_ns for r in res.records) - min(r.start_ns for r in res.records)) / 1e9
    out = {f"ttft_p{q}_ms": float(np.percentile(ttft, q)) for q in (50, 95, 99)}
    out |= {f"tpot_p{q}_ms": float(np.percentile(tpot, q)) for q in (50, 95, 99)}
    out |= {"itl_p95_ms": float(np.percentile(itl, 95)), "e2e_p95_ms": float(np.percentile(e2e, 95)),
            "output_tokens_per_s": sum(r.output_tokens for r in ok) / window_s,
            "requests_per_s": len(ok) / window_s,
            "request_error_rate": (len(res.records) - len(ok)) / len(res.records)}
    out["output_tokens_per_s_per_user"] = 1000.0 / out["tpot_p50_ms"]  # the speed band
    return out


def _summary_as_metrics(res: LoadResult) -> dict[str, float | None]:
    """The load driver's summary under the serving analyzer's metric names."""
    d = res.summary().as_dict()
    names = [f"{n}_p{q}_ms" for n in ("ttft", "tpot") for q in (50, 95, 99)]
    names += ["itl_p95_ms", "e2e_p95_ms", "output_tokens_per_s", "requests_per_s"]
    return {**{n: d[n] for n in names}, "request_error_rate": d["error_rate"]}


def test_metrics_equal_percentiles_of_the_records(runs: tuple[Path, str, str], loaded: LoadResult) -> None:
    store, cpu, _ = runs
    assert store_requests(cpu, loaded, store) == len(loaded.records)
    metrics, findings = _serving(store, cpu)
    expected = _expected(loaded)
    assert set(metrics) == set(expected)  # no price for a CPU run: no cost metric
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-9), name
    # the driver's own summary is the analyzer's computation: equal to the last bit
    assert _summary_as_metrics(loaded) == {k: v for k, v in metrics.items() if k != "output_tokens_per_s_per_user"}
    # ~1 in 9 requests failed: above 1 % (warning), below 10 %... or just above: the exact rate decides
    rate = expected["request_error_rate"]
    [err] = [f for f in findings if "requests failed" in str(f["title"])]
    assert err["severity"] == ("critical" if rate >= 0.10 else "warning")
    assert err["evidence"]["errors"] == sum(r.error is not None for r in loaded.records)  # type: ignore[index]
    assert "HTTP 500" in str(err["detail"])
    [price] = [f for f in findings if f["title"] == "No cost per token: no device price"]
    assert price["severity"] == "info" and "lists no accelerator device" in str(price["detail"])


def test_stored_rows_keep_every_field(runs: tuple[Path, str, str], loaded: LoadResult) -> None:
    store, cpu, _ = runs
    store_requests(cpu, loaded, store)
    store_requests(cpu, loaded, store)  # replaces, does not append
    with open_store(store, read_only=True) as con:
        rows = con.execute(
            """SELECT request_id, start_ns, ttft_ns, e2e_ns, prompt_tokens, output_tokens, itl_ns, status,
                      error, token_count_source, end_ns, tpot_ns
               FROM requests WHERE run_id = ? ORDER BY request_id""", [cpu]).fetchall()
    assert len(rows) == len(loaded.records)
    for row, r in zip(rows, loaded.records, strict=True):
        assert row[:10] == (r.request_id, r.start_ns, r.ttft_ns, r.e2e_ns, r.prompt_tokens, r.output_tokens,
                            r.itl_ns, r.status, r.error, r.token_count_source)
        assert row[10] == r.start_ns + r.e2e_ns
        assert row[11] == (pytest.approx(r.tpot_ns) if r.tpot_ns is not None else None)


def test_cost_per_token_from_a_user_price(runs: tuple[Path, str, str], loaded: LoadResult, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store, _, amd = runs
    store_requests(amd, loaded, store)
    metrics, findings = _serving(store, amd)  # MI300X identified, but no price yet
    assert "usd_per_1m_output_tokens" not in metrics
    [f] = [f for f in findings if f["severity"] == "info"]
    assert "identified as mi300x, has no rented price (price_per_hour_usd)" in str(f["detail"])
    hw = tmp_path / "hardware.toml"
    hw.write_text("[devices.mi300x]\nprice_per_hour_usd = 2.10\n")
    monkeypatch.setenv("TRACEKIT_HARDWARE", str(hw))
    metrics, findings = _serving(store, amd)
    tokens_per_s = _expected(loaded)["output_tokens_per_s"]
    # one device at 2.10 USD/h: USD per 10⁶ output tokens
    assert metrics["usd_per_1m_output_tokens"] == pytest.approx(2.10 / (tokens_per_s * 3600) * 1e6, rel=1e-9)
    [cost] = [f for f in findings if f["severity"] == "info"]  # the cost, with the speed band it holds at
    per_user = 1000.0 / metrics["tpot_p50_ms"]  # type: ignore[operator]
    assert str(cost["title"]).startswith(f"${metrics['usd_per_1m_output_tokens']:.2f} per 1M output tokens")
    assert f"({per_user:.0f} tokens/s per user), rented prices for 1 device(s)" in str(cost["title"])
    # the owned price sheet, chosen per run by a tag: capex over years plus power
    hw.write_text("[devices.mi300x]\nprice_per_hour_usd = 2.10\nowned_capex_usd = 17532\nowned_years = 4\n"
                  "owned_power_w = 1000\nowned_usd_per_kwh = 0.10\n")
    with open_store(store) as con:
        con.execute("UPDATE run_meta SET tags = MAP {'price_sheet': 'owned'} WHERE run_id = ?", [amd])
    try:
        metrics, findings = _serving(store, amd)
    finally:
        with open_store(store) as con:
            con.execute("UPDATE run_meta SET tags = NULL WHERE run_id = ?", [amd])
    owned = 17532 / (4 * 8766) + 1.0 * 0.10  # 0.5 + 0.1 USD per device-hour
    assert metrics["usd_per_1m_output_tokens"] == pytest.approx(owned / (tokens_per_s * 3600) * 1e6, rel=1e-9)
    [cost] = [f for f in findings if f["severity"] == "info"]
    assert "owned prices for 1 device(s)" in str(cost["title"])


def _records(ttft_ms: list[float], prompt_tokens: list[int], errors: int = 0) -> LoadResult:
    recs = [
        RequestRecord(i, 1_000_000_000 * i, int(t * MS), [2 * MS] * 3, int(t * MS) + 6 * MS, p, 4, 200, None, "usage")
        for i, (t, p) in enumerate(zip(ttft_ms, prompt_tokens, strict=True))
    ]
    for r in recs[:errors]:
        r.error, r.status, r.ttft_ns, r.output_tokens, r.itl_ns = "HTTP 503: busy", 503, None, 0, []
    return LoadResult(LoadSpec("http://127.0.0.1:1", 1.0, concurrency=1), 0, 0, recs)


def test_findings_error_rate_and_ttft_tail(runs: tuple[Path, str, str]) -> None:
    store, cpu, _ = runs
    # 1 failure in 100: exactly 1 %, not above it → no error finding; 2 → warning; 10 → critical
    for n_err, severity in ((1, None), (2, "warning"), (10, "critical")):
        store_requests(cpu, _records([10.0] * 100, [50] * 100, errors=n_err), store)
        metrics, findings = _serving(store, cpu)
        assert metrics["request_error_rate"] == n_err / 100
        got = [f["severity"] for f in findings if "requests failed" in str(f["title"])]
        assert got == ([severity] if severity else [])
    # 40 requests, TTFT 10 ms except 2 at 200 ms: p99 = 200 ms ≫ p50 = 10 ms
    ttft = [10.0] * 38 + [200.0, 200.0]
    store_requests(cpu, _records(ttft, [50 + (7 * i) % 13 for i in range(40)]), store)
    metrics, findings = _serving(store, cpu)
    assert metrics["ttft_p50_ms"] == 10.0 and metrics["ttft_p99_ms"] == 200.0
    [tail] = [f for f in findings if str(f["title"]).startswith("TTFT tail")]
    assert tail["title"] == "TTFT tail: p99 200.0 ms is 20.0× the p50 of 10.0 ms"
    assert "wait before their prefill" in str(tail["detail"])  # not explained by prompt length
    # the same tail on the two longest prompts: prefill of long prompts
    store_requests(cpu, _records(ttft, [50] * 38 + [4000, 4000]), store)
    _, findings = _serving(store, cpu)
    [tail] = [f for f in findings if str(f["title"]).startswith("TTFT tail")]
    assert "follows prompt length" in str(tail["detail"])
    # a tail within 3× the median is not flagged
    store_requests(cpu, _records([10.0] * 38 + [25.0, 25.0], [50] * 40), store)
    _, findings = _serving(store, cpu)
    assert not [f for f in findings if str(f["title"]).startswith("TTFT tail")]


def test_load_summary_is_the_analyzers_numbers(runs: tuple[Path, str, str]) -> None:
    """Over records with failures, one-token and text-less requests, ties and odd counts, the load
    driver's summary and the stored metrics are the same numbers, to the last bit."""
    store, cpu, _ = runs
    for n, seed in ((1, 1), (2, 2), (7, 3), (58, 4)):
        rng = np.random.default_rng(seed)
        recs = []
        for i in range(n):
            k = int(rng.integers(0, 6))
            ttft = int(rng.integers(1, 900)) * MS + int(rng.integers(0, 999)) if k else None
            itl = [int(g) for g in rng.integers(1, 50 * MS, size=max(0, k - 1))]
            failed = bool(rng.random() < 0.25)
            recs.append(RequestRecord(i, 10**18 + int(rng.integers(0, 10**10)), ttft, itl, (ttft or 0) + sum(itl) + 7,
                                      int(rng.integers(1, 99)), k, 500 if failed else 200,
                                      "HTTP 500" if failed else None, "usage"))
        res = LoadResult(LoadSpec("http://127.0.0.1:1", 1.0, concurrency=1), 0, 0, recs)
        store_requests(cpu, res, store)
        metrics, _ = _serving(store, cpu)
        assert _summary_as_metrics(res) == {k: v for k, v in metrics.items()
                                            if k != "output_tokens_per_s_per_user"}, (n, seed)


def test_a_run_without_requests_gets_nothing(runs: tuple[Path, str, str]) -> None:
    store, cpu, _ = runs
    store_requests(cpu, _records([], []), store)  # an empty load clears the run's requests
    metrics, findings = _serving(store, cpu)
    assert metrics == {} and findings == []


def test_store_requests_unknown_run_and_delete(runs: tuple[Path, str, str], loaded: LoadResult,
                                               tmp_path: Path) -> None:
    store, _, _ = runs
    with pytest.raises(TraceInputError) as exc:
        store_requests("nope", loaded, store)
    assert str(exc.value) == f"{store}: no run 'nope' in the store (see `tracekit runs`)"
    other = tmp_path / "other.duckdb"
    [r] = tracekit.ingest([SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"], store=other)
    store_requests(r.run_id, loaded, other)
    with open_store(other) as con:
        assert delete_run(con, r.run_id) == 1
        assert con.execute("SELECT count(*) FROM request_rows").fetchall()[0][0] == 0


def test_analyze_report_and_compare_show_serving(runs: tuple[Path, str, str], loaded: LoadResult,
                                                 tmp_path: Path) -> None:
    store, cpu, amd = runs
    store_requests(cpu, loaded, store)
    store_requests(amd, _records([10.0] * 30, [50] * 30), store)
    hw = tmp_path / "hardware.toml"
    hw.write_text("[devices.mi300x]\nprice_per_hour_usd = 3.0\n")
    env = {"TRACEKIT_HARDWARE": str(hw), "HOME": str(tmp_path)}
    expected = _expected(loaded)
    done = run_cli("analyze", cpu, amd, "--store", str(store), env=env)
    assert done.returncode == 0, done.stderr
    assert f"{cpu}: serving" in done.stdout and "ttft_p99_ms" in done.stdout
    assert fmt.value(expected["ttft_p99_ms"], "ms") in done.stdout  # formatted for people
    # 30 requests of 4 tokens, 1 s apart: window 29.016 s → 120 / 29.016 tokens/s at 3 USD/h
    cost = 3.0 / (120 / 29.016 * 3600) * 1e6
    assert "usd_per_1m_output_tokens" in done.stdout and f"{fmt.usd(cost)} per 1M" in done.stdout
    md = tmp_path / "r.md"
    done = run_cli("report", cpu, "-o", str(md), "--store", str(store), env=env)
    assert done.returncode == 0, done.stderr
    text = md.read_text()
    assert "## Request latency" in text
    assert f"| time to first token | {fmt.duration(expected['ttft_p50_ms'], 'ms')} |" in text
    assert f"{len(loaded.records)} requests" in text and "no device price" in text
    html = tmp_path / "r.html"
    assert run_cli("report", amd, "-o", str(html), "--store", str(store), env=env).returncode == 0
    assert 'id="requests"' in html.read_text() and f"Cost: {fmt.usd(cost)} per 1M output tokens" in html.read_text()
    res = compare_runs(cpu, amd, store)
    cols, rows = res["serving"]
    assert cols == ["metric", "unit", "a", "b", "delta", "delta_pct"]
    by = {r[0]: r for r in rows}
    assert by["ttft_p50_ms"][2] == round(expected["ttft_p50_ms"], 4) and by["ttft_p50_ms"][3] == 10.0
    assert by["usd_per_1m_output_tokens"][2] is None and by["usd_per_1m_output_tokens"][3] == round(cost, 4)
    done = run_cli("compare", cpu, amd, "--store", str(store), "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [s["metric"] for s in doc["serving"]][:3] == ["ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms"]
    done = run_cli("compare", cpu, amd, "--store", str(store), env=env)
    assert "serving: request latency" in done.stdout and "ttft_p99_ms" in done.stdout
