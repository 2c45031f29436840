"""`tracekit check` end to end: real ingested runs, metrics written through the analyzer API, the
CLI's exit codes and messages, config files, and the real-trace acceptance (a copy of a real trace
with one kernel 20 % slower names that kernel first)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import duckdb
import numpy as np
import pytest
from conftest import KINETO, SAMPLES, needs_shared
from helpers import distinct_copies, run_cli
from slowed_trace import slow_kernel

from tracekit.analysis.base import ANALYZERS, Analyzer, AnalyzerResult, Metric, analyze_run
from tracekit.api import analyze_runs
from tracekit.check import load_config, run_check
from tracekit.check.message import marker, to_markdown
from tracekit.errors import TraceInputError
from tracekit.ingest import ingest
from tracekit.store import open_store

CPU_TRACE = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"


class _Given(Analyzer):
    """An analyzer plugin whose metric values are set by the test (`values[run_id]`)."""

    values: ClassVar[dict[str, float]] = {}

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        return AnalyzerResult(metrics=[Metric("e2e_latency_ms", self.values.get(run_id), "ms", "lower"),
                                       Metric("e2e_tokens_per_s", 1e4 / self.values[run_id]
                                              if run_id in self.values else None, "tokens/s", "higher")])


@pytest.fixture
def given() -> Iterator[type[_Given]]:
    ANALYZERS["given"] = _Given
    _Given.values = {}
    try:
        yield _Given
    finally:
        ANALYZERS.pop("given", None)


def _ingest_with(store: Path, paths: list[Path], values: list[float], given: type[_Given], **kw: Any) -> list[str]:
    ids = []
    for i, (p, v) in enumerate(zip(paths, values, strict=True)):
        extra = dict(kw)
        if "captured" in extra:
            extra["captured_at"] = extra.pop("captured")[i]
        r = ingest([p], store, **extra)[0]
        ids.append(r.run_id)
        given.values[r.run_id] = v
    with open_store(store) as con:
        for rid in ids:
            analyze_run(con, rid, ["given"])
    return ids


CONFIG = """
[check]
alpha = 0.01
[metrics.e2e_latency_ms]
min_change = "3%"
[metrics.e2e_tokens_per_s]
analyzer = "given"
"""


def test_pr_tier_regression_exit_1_and_json(tmp_path: Path, store: Path, given: type[_Given]) -> None:
    paths = distinct_copies(tmp_path, 10)
    base = _ingest_with(store, paths[:5], [100.0, 101.0, 99.0, 100.5, 99.5], given, label="main")
    cand = _ingest_with(store, paths[5:], [106.0, 105.0, 107.0, 105.5, 106.5], given, label="pr-1")
    cfg = tmp_path / "check.toml"
    cfg.write_text(CONFIG)
    args = ["check", *[a for c in cand for a in ("--candidate", c)], *[a for b in base for a in ("--baseline", b)],
            "--store", str(store), "--config", str(cfg), "--format", "json", "--dashboard-url", "http://dash:8050/"]
    r = run_cli(*args)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    v = {x["metric"]: x for x in doc["verdicts"]}
    assert list(v) == ["e2e_latency_ms", "e2e_tokens_per_s"]
    lat = v["e2e_latency_ms"]
    assert lat["verdict"] == "regression"
    assert lat["baseline_median"] == 100.0 and lat["candidate_median"] == 106.0
    assert lat["change"] == pytest.approx(0.06)
    assert lat["p_value"] == pytest.approx(1 / 252)  # exact Mann–Whitney: all 5 above all 5
    assert lat["better"] == "lower" and lat["min_change"] == "3%"
    tok = v["e2e_tokens_per_s"]  # higher is better, falls by 5.7 % with the default 2 % minimum
    assert (tok["verdict"], tok["min_change"]) == ("regression", "2%")
    # explained between the median runs of each side; CPU copies of one trace: no kernel moved
    (e,) = doc["explanations"]
    assert e["baseline_run"] == base[0] and e["candidate_run"] == cand[0]
    assert e["compare_url"] == f"http://dash:8050/compare?a={base[0]}&b={cand[0]}"
    assert e["slower_kernels"] == [] and e["new_findings"] == []
    md = run_cli(*[a for a in args if a not in ("--format", "json")])
    assert md.returncode == 1
    assert md.stdout.startswith(marker() + "\n## tracekit check: 🔴 2 regressions")
    assert "| e2e_latency_ms | lower | 100 ms (n=5) | 106 ms (n=5) | +6.0 % | 0.00397 | 3% | 🔴 regression |" in md.stdout
    assert f"(http://dash:8050/compare?a={base[0]}&b={cand[0]})" in md.stdout
    # --baseline-label main picks the same five runs
    by_label = run_check(store, candidates=cand, baseline_label="main", config=load_config(cfg))
    assert sorted(by_label.baseline_runs) == sorted(base) and by_label.regression


def test_pr_tier_noise_is_not_a_regression(tmp_path: Path, store: Path, given: type[_Given]) -> None:
    paths = distinct_copies(tmp_path, 10)
    base = _ingest_with(store, paths[:5], [100.0, 103.0, 98.0, 101.0, 99.0], given)
    cand = _ingest_with(store, paths[5:], [102.0, 99.5, 104.0, 100.5, 101.5], given)
    analyze_runs(base + cand, store)  # every registered analyzer, the real ones and `given`
    res = run_check(store, candidates=cand, baselines=base, config=load_config(None))
    assert not res.regression
    # the default metrics gate when no config names any: the synthetic ones are not among them
    names = {v.metric for v in res.verdicts}
    assert "e2e_latency_ms" not in names
    assert "decode_step_time_ms" in names
    step = next(v for v in res.verdicts if v.metric == "decode_step_time_ms")
    assert step.verdict == "unchanged" and step.change == 0.0  # same trace: identical values, all tied
    assert step.p_value == 1.0


def test_one_run_per_side_is_not_significant(tmp_path: Path, store: Path, given: type[_Given]) -> None:
    paths = distinct_copies(tmp_path, 2)
    (b,) = _ingest_with(store, paths[:1], [100.0], given)
    (c,) = _ingest_with(store, paths[1:], [130.0], given)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    r = run_cli("check", "--candidate", c, "--baseline", b, "--store", str(store), "--config", str(cfg))
    assert r.returncode == 0
    assert "⚪ not significant" in r.stdout
    assert "too few for a significance test (≥ 5 per side recommended)" in r.stdout
    assert r.stdout.splitlines()[1].startswith("## tracekit check: ⚪ no significant regression")


def test_history_tier_alerts_once_and_names_the_first_run(tmp_path: Path, store: Path,
                                                         given: type[_Given]) -> None:
    """Main-branch CI: a run is added and the workload's history checked, again and again. The
    6 % step at run 25 alerts on exactly one check and is "known" (no alert) on the checks after
    it, which name run 25 as its first run; the outlier run 11 (+40 %) never alerts."""
    import datetime as dt

    rng = np.random.default_rng(4)
    n, step_at = 32, 25
    values = list(100 * np.exp(rng.normal(0, 0.01, n)))
    values[11] *= 1.4  # an outlier run
    values = [v * (1.06 if i >= step_at else 1.0) for i, v in enumerate(values)]
    paths = distinct_copies(tmp_path, n)
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text('[metrics.e2e_latency_ms]\nmin_change = "3%"\n')
    cfg = load_config(cfg_path)
    ids: list[str] = []
    alerts: list[tuple[int, str]] = []
    for i in range(n):
        when = dt.datetime(2026, 10, 1) + dt.timedelta(hours=6 * i)
        ids += _ingest_with(store, paths[i:i + 1], values[i:i + 1], given, workload="decode-bs8", captured=[when])
        if i < 9:
            continue
        res = run_check(store, history="decode-bs8", config=cfg)
        assert res.history is not None and res.history["runs"] == ids  # ordered by captured_at
        alerts += [(i, c.first_run) for c in res.changes if c.alert]
        assert res.regression == any(c.alert for c in res.changes)
    assert len(alerts) == 1
    checked_at, first_run = alerts[0]
    # three runs after its start (the minimum segment); run 24 happened to be 1.5 % slow, so that
    # first check places the start one run early — later checks, with more runs, move it to 25
    assert checked_at == step_at + 1 and first_run == ids[step_at - 1]
    # the last check (run 31): the same change, known, exit 0; JSON carries the numbers
    r = run_cli("check", "--history", "decode-bs8", "--store", str(store), "--config", str(cfg_path), "-f", "json")
    assert r.returncode == 0, r.stderr
    (c,) = [c for c in json.loads(r.stdout)["changes"] if c["verdict"] != "unchanged"]
    assert (c["first_run"], c["index"], c["known"], c["alert"]) == (ids[step_at], step_at, True, False)
    assert c["before_median"] == pytest.approx(float(np.median(values[:step_at])))
    assert c["after_median"] == pytest.approx(float(np.median(values[step_at:])))
    assert c["change"] == pytest.approx(0.06, abs=0.01)
    md = run_cli("check", "--history", "decode-bs8", "--store", str(store), "--config", str(cfg_path))
    assert md.returncode == 0
    assert f"| e2e_latency_ms | `{ids[step_at]}` | 7 |" in md.stdout
    assert "(known: found before the newest run)" in md.stdout


def test_bad_input_is_one_error_line(tmp_path: Path, store: Path, given: type[_Given]) -> None:
    (b,) = _ingest_with(store, distinct_copies(tmp_path, 1), [1.0], given)
    before = store.read_bytes()
    cases: list[tuple[list[str], str]] = [
        (["--candidate", "nope00000000", "--baseline", b], "no run 'nope00000000' in the store"),
        (["--candidate", b], "give --baseline RUN"),
        ([], "give --candidate RUN"),
        (["--history", "w", "--candidate", b], "not both"),
        (["--history", "unknown"], "no runs of workload 'unknown'"),
        (["--candidate", b, "--baseline", b], "is both a candidate and a baseline"),
        (["--candidate", b, "--baseline-label", "main"], "no runs labelled 'main'"),
        (["--candidate", b, "--baseline", b, "--min-change", "lots"], "--min-change: expected a percentage"),
        (["--candidate", b, "--baseline", b, "--test", "ks"], "expected one of mann-whitney, welch"),
        (["--candidate", b, "--baseline", b, "--post", "email"], "--post email: expected github or slack"),
        (["--candidate", b, "--baseline", b, "--format", "xml"], "--format xml: expected markdown or json"),
    ]
    for args, msg in cases:
        r = run_cli("check", *args, "--store", str(store))
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and msg in lines[0], (args, r.stderr)
        assert "Traceback" not in r.stderr
    bad = tmp_path / "bad.toml"
    for text, msg in [("[check\n", "not valid TOML"), ("[check]\nalpha = 2\n", "alpha 2.0: expected 0 < alpha < 1"),
                      ("[check]\nfoo = 1\n", "[check] foo: unknown key"),
                      ("[metrics.x]\nmin_change = '3 furlongs'\n", "[metrics.x] min_change: expected a percentage"),
                      ("[other]\n", "unknown table(s) other")]:
        bad.write_text(text)
        r = run_cli("check", "--candidate", b, "--baseline-label", "x", "--config", str(bad), "--store", str(store))
        assert r.returncode == 2 and r.stderr.startswith(f"error: {bad}: ") and msg in r.stderr, r.stderr
    assert store.read_bytes() == before  # nothing written
    with pytest.raises(TraceInputError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


def test_example_ci_config_loads() -> None:
    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root / "examples" / "ci" / "tracekit-check.toml")
    assert cfg.metrics is not None
    assert [(m.name, str(m.min_change)) for m in cfg.metrics] == [
        ("device_kernel_time_ms", "2%"), ("step_device_time", "3%"), ("output_tokens_per_s", "3%"),
        ("ttft_p95_ms", "5%")]
    workflow = (root / "examples" / "ci" / "perf-check.yml").read_text()
    for option in ("--baseline-label main", "--post github", "--history", "--post-on regression", "--output"):
        assert option in workflow


def test_device_time_metrics_match_the_kernels_view(store: Path) -> None:
    (r,) = ingest([SAMPLES / "amd_synthetic_rocpd"], store)
    with open_store(store) as con:
        res = analyze_run(con, r.run_id, ["device_time"])["device_time"]
        n, total = con.execute("SELECT count(*), sum(dur_ns) FROM kernels WHERE run_id = ?", [r.run_id]).fetchall()[0]
    m = {x.name: x for x in res.metrics}
    assert n > 0
    assert m["device_kernel_time_ms"].value == pytest.approx(total / 1e6)
    assert m["device_kernel_count"].value == n
    assert (m["device_kernel_time_ms"].unit, m["device_kernel_time_ms"].better) == ("ms", "lower")
    (cpu,) = ingest([CPU_TRACE], store)
    with open_store(store) as con:
        cpu_res = analyze_run(con, cpu.run_id, ["device_time"])["device_time"]
    assert all(x.value is None for x in cpu_res.metrics)  # a CPU capture has no device rows


H100_QWEN = KINETO / "tracelens-h100-qwen05b-inference"
FLASH = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
         "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, "
         "true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)")


@needs_shared
def test_real_trace_one_kernel_20_percent_slower_is_named_first(tmp_path: Path, store: Path) -> None:
    src = next(H100_QWEN.glob("*.json.gz"))
    slowed = tmp_path / "slowed.json.gz"
    info = slow_kernel(src, slowed, FLASH, 1.2)
    assert info["instances"] == 34  # every launch of the flash-attention forward kernel
    base = ingest([src], store, label="main")[0].run_id
    cand = ingest([slowed], store, label="pr")[0].run_id
    with open_store(store, read_only=True) as con:  # the copy: that kernel +20 %, every other one as it was
        rows = con.execute(
            """SELECT name, sum(dur_ns) FILTER (WHERE run_id = $a), sum(dur_ns) FILTER (WHERE run_id = $b)
               FROM kernels WHERE run_id IN ($a, $b) GROUP BY name""", {"a": base, "b": cand}).fetchall()
    moved = {n: (a, b) for n, a, b in rows if a != b}
    assert list(moved) == [FLASH] and moved[FLASH][1] == pytest.approx(1.2 * moved[FLASH][0], rel=1e-6)
    # it is 8.4 % of the device time: +1.7 % in total, so a 1 % minimum change
    r = run_cli("check", "--candidate", cand, "--baseline", base, "--store", str(store), "--min-change", "1%",
                "-f", "json")
    assert r.returncode == 0, r.stderr  # one run per side: not significant, but explained
    doc = json.loads(r.stdout)
    v = {x["metric"]: x for x in doc["verdicts"]}
    assert v["device_kernel_time_ms"]["verdict"] == "not significant"
    assert v["device_kernel_time_ms"]["change"] == pytest.approx(0.2 * moved[FLASH][0] / sum(a for _, a, _ in rows),
                                                                 rel=1e-3)
    e = doc["explanations"][0]
    assert e["slower_kernels"][0]["name"] == FLASH
    assert e["slower_kernels"][0]["category"] == "attention"
    assert e["slower_kernels"][0]["delta_ms"] == pytest.approx((moved[FLASH][1] - moved[FLASH][0]) / 1e6, abs=1e-3)
    md = run_cli("check", "--candidate", cand, "--baseline", base, "--store", str(store), "--min-change", "1%")
    table = md.stdout.split("Kernels that got slower")[1]
    first_row = next(ln for ln in table.splitlines() if ln.startswith("| `"))
    assert first_row.startswith("| `flash_fwd_kernel` | attention |")  # the name people say; JSON has it whole


MI300X_DECODE = KINETO / "tracelens-mi300x-vllm-decode-graph"
MATMUL = "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu"


@needs_shared
def test_real_traces_five_runs_per_side(tmp_path: Path, store: Path) -> None:
    """Five noisy copies per side of a real MI300X decode trace (every device row ×(1 + N(0, 1 %))
    per copy), the candidate's swiglu matmul 20 % slower: a regression, and that kernel first."""
    src = next(MI300X_DECODE.glob("*.json.gz"))
    rng = np.random.default_rng(12)
    base, cand = [], []
    for i in range(10):
        p = tmp_path / f"run{i}.json.gz"
        slow_kernel(src, p, MATMUL, 1.2 if i >= 5 else 1.0, scale=float(1 + rng.normal(0, 0.01)))
        (base if i < 5 else cand).append(ingest([p], store, label="main" if i < 5 else "pr")[0].run_id)
    res = run_check(store, candidates=cand, baseline_label="main")
    assert res.regression
    v = {x.metric: x for x in res.verdicts}
    assert v["device_kernel_time_ms"].verdict == "regression"
    assert v["device_kernel_time_ms"].p_value == pytest.approx(1 / 252)
    assert 0.04 < (v["device_kernel_time_ms"].change or 0) < 0.08  # the kernel is ~30 % of device time
    e = res.explanations[0]
    assert e.slower_kernels[0]["name"] == MATMUL
    assert e.baseline_run in base and e.candidate_run in cand
    assert "closest to that side's median" in e.chosen
    md = to_markdown(res)
    assert f"| `{MATMUL}` | moe |" in md.split("Kernels that got slower")[1].splitlines()[4]


def test_runs_on_different_hardware_are_said(tmp_path: Path, given: type[_Given]) -> None:
    """A CPU run against a run on the AMD sample's GPU: the check still compares, but says, in the
    log and at the top of the message, that the hardware differs."""
    store = tmp_path / "hw.duckdb"
    cpu = _ingest_with(store, [CPU_TRACE], [100.0], given)[0]
    amd = _ingest_with(store, [SAMPLES / "amd_synthetic_rocpd"], [90.0], given)[0]
    r = run_cli("check", "--store", str(store), "--candidate", amd, "--baseline", cpu)
    assert r.returncode in (0, 1), r.stderr
    warning = next(x for x in r.stderr.splitlines() if x.startswith("warning: the runs ran on different hardware"))
    assert "baseline: " in warning and "candidate: " in warning
    lines = r.stdout.splitlines()
    top = next(i for i, x in enumerate(lines) if x.startswith("> ⚠️ the runs ran on different hardware"))
    assert top < next(i for i, x in enumerate(lines) if x.startswith("Candidate:"))
    # same hardware: no warning
    cpu2 = _ingest_with(store, distinct_copies(tmp_path, 1), [101.0], given)[0]
    r = run_cli("check", "--store", str(store), "--candidate", cpu2, "--baseline", cpu)
    assert "different hardware" not in r.stderr + r.stdout
