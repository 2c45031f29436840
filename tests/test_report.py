"""``tracekit report``: the page holds the run, every stored finding, category totals and roofline
points that this test recomputes from the store with its own queries, works offline (plotly.js
inline, no script from the network), and renders in headless Chromium when it is installed."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS, SAMPLES
from helpers import run_cli

import tracekit
from tracekit import formatting as fmt
from tracekit.analysis.categories import category_case_sql
from tracekit.exports import render_report

TPU = CORPUS / "xplane" / "xprof_tpu_v6e_inference" / "tpu_inference_2.xplane.pb"
JAX = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
CHROMIUM = Path("/usr/bin/chromium")

needs_tpu = pytest.mark.skipif(
    not TPU.is_file(), reason=f"TPU v6e corpus capture not found at {TPU} (only in the project's workspace)"
)


class _Tables(HTMLParser):
    """Cells of every ``<table id=...>`` in a page, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._id: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._id = dict(attrs).get("id") or ""
            self.tables[self._id] = []
        elif tag == "tr" and self._id is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._id is not None and self._row is not None:
            self.tables[self._id].append(self._row)
            self._row = None
        elif tag == "table":
            self._id = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _tables(page: str) -> dict[str, list[list[str]]]:
    p = _Tables()
    p.feed(page)
    return p.tables


def _figure_data(page: str) -> list[dict[str, Any]]:
    """The traces passed to ``Plotly.newPlot("roofline", [...], ...)`` in the page."""
    m = re.search(r'Plotly\.newPlot\(\s*"roofline",\s*', page)
    assert m, "no Plotly figure in the page"
    data, _ = json.JSONDecoder().raw_decode(page, m.end())
    return data  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("report")
    store = d / "store.duckdb"
    paths = [JAX] + ([TPU] if TPU.is_file() else [])
    results = tracekit.ingest(paths, store)
    ids = {p: r.run_id for p, r in zip(paths, results)}
    with duckdb.connect(str(store), read_only=True) as con:
        before = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
    out: dict[str, Any] = {"store": store, "dir": d, "ids": ids, "metrics_before": before}
    for p, rid in ids.items():
        out[(p, "html")] = render_report(rid, d / f"{rid}.html", store).read_text()
        out[(p, "md")] = render_report(rid, d / f"{rid}.md", store).read_text()
    return out


def _con(reports: dict[str, Any]) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(reports["store"]), read_only=True)


def _check_findings(reports: dict[str, Any], path: Path) -> list[str]:
    rid = reports["ids"][path]
    with _con(reports) as con:
        titles = [r[0] for r in con.execute("SELECT title FROM finding_rows WHERE run_id = ?", [rid]).fetchall()]
        n_metrics = con.execute("SELECT count(*) FROM metric_rows WHERE run_id = ?", [rid]).fetchall()[0][0]
    assert n_metrics > 0  # the report ran the analyzers (the store had none before)
    page, md = reports[(path, "html")], reports[(path, "md")]
    assert f"run {rid}" in page
    for t in titles:
        assert html.escape(t) in page
        assert t.replace("|", "\\|") in md
    return titles


def _check_categories(reports: dict[str, Any], path: Path) -> None:
    """Category totals recomputed in Python from raw rows (category label from the shared CASE)."""
    rid = reports["ids"][path]
    with _con(reports) as con:
        rows = con.execute(
            f"SELECT {category_case_sql()}, category, device_dur_ns, dur_ns FROM kernels WHERE run_id = ?", [rid]
        ).fetchall()
    sums: dict[str, int] = {}
    for cat, raw, ddur, dur in rows:
        key = f"{cat} (async spans, overlapping)" if raw == "xla_async" else cat
        sums[key] = sums.get(key, 0) + (ddur if ddur is not None else dur)
    got = {r[0]: r[2] for r in _tables(reports[(path, "html")])["categories"][1:]}
    assert got == {k: fmt.duration_ns(v) for k, v in sums.items()}
    assert sums  # both runs have device activity


def test_jax_sample_report(reports: dict[str, Any]) -> None:
    assert reports["metrics_before"] == 0
    titles = _check_findings(reports, JAX)
    assert any("recompil" in t.lower() or "compil" in t.lower() for t in titles)
    _check_categories(reports, JAX)
    page = reports[(JAX, "html")]
    # CPU capture: no op carries XLA costs, so the page says so instead of drawing an empty chart.
    assert 'id="roofline-none"' in page
    assert not re.search(r'Plotly\.newPlot\(\s*"roofline"', page)
    assert "Not drawn in Markdown" in reports[(JAX, "md")]


@needs_tpu
def test_tpu_v6e_report(reports: dict[str, Any]) -> None:
    rid = reports["ids"][TPU]
    titles = _check_findings(reports, TPU)
    assert titles
    _check_categories(reports, TPU)
    page = reports[(TPU, "html")]
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?(https?:)?//", page, re.IGNORECASE)  # self-contained
    assert "plotly.js v" in page or "plotly.js" in page  # the library itself is inline

    # Costable ops, computed row by row in Python: XLA cost flops > 0, bytes (HBM, else all) > 0,
    # time (device clock, else trace span) > 0, compute rows only.
    with _con(reports) as con:
        rows = con.execute(
            "SELECT name, category, flops, hbm_bytes, bytes_accessed, device_dur_ns, dur_ns FROM kernels "
            "WHERE run_id = ?",
            [rid],
        ).fetchall()
    agg: dict[str, list[float]] = {}
    for name, cat, flops, hbm, acc, ddur, dur in rows:
        b = hbm if hbm is not None else acc
        t = ddur if ddur is not None else dur
        if cat == "kernel" and flops and flops > 0 and b and b > 0 and t and t > 0:
            a = agg.setdefault(name, [0.0, 0.0, 0.0])
            a[0] += flops
            a[1] += b
            a[2] += t
    data = _figure_data(page)
    ops = [tr for tr in data if tr.get("name") == "ops"]
    assert len(ops) == 1
    assert len(ops[0]["x"]) == len(agg) == 4
    for name, x, y in zip(ops[0]["text"], ops[0]["x"], ops[0]["y"]):
        f, b, t = agg[name]
        assert x == pytest.approx(f / b, rel=1e-12)
        assert y == pytest.approx(f / (t * 1e-9) / 1e12, rel=1e-12)  # TFLOP/s, not "10B" FLOP/s
    # The roof: the v6e plane states 918 TFLOP/s and 1637.99 GB/s; the ridge is where they meet.
    with _con(reports) as con:
        peak_t, peak_g = con.execute(
            "SELECT max(peak_tflops), max(peak_hbm_gbps) FROM devices WHERE run_id = ?", [rid]
        ).fetchall()[0]
    roof = [tr for tr in data if str(tr.get("name", "")).startswith("roof")]
    assert len(roof) == 1
    assert roof[0]["x"][1] == pytest.approx(peak_t * 1e12 / (peak_g * 1e9))
    assert roof[0]["y"][1] == pytest.approx(peak_t)


@needs_tpu
@pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason=f"{CHROMIUM} is not installed (Debian's chromium; .ci/run installs it, so CI never skips this)",
)
def test_tpu_report_renders_offline_in_chromium(reports: dict[str, Any], tmp_path: Path) -> None:
    page = reports["dir"] / f"{reports['ids'][TPU]}.html"
    shot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    subprocess.run([str(CHROMIUM), *flags, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert shot.is_file() and shot.stat().st_size > 10_000
    dom = subprocess.run([str(CHROMIUM), *flags, "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=False).stdout
    assert "main-svg" in dom  # plotly.js ran, from the page alone, and drew the chart
    keep = Path("/tmp/tracekit_report_screenshot.png")
    shutil.copyfile(shot, keep)


def test_cli_errors(reports: dict[str, Any], tmp_path: Path) -> None:
    store = str(reports["store"])
    r = run_cli("report", "nosuchrun", "-o", str(tmp_path / "r.html"), "--store", store)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    rid = reports["ids"][JAX]
    r = run_cli("report", rid, "-o", str(tmp_path / "r.pdf"), "--store", store)
    assert r.returncode == 2 and "must end in .html" in r.stderr
    r = run_cli("report", rid, "-o", str(tmp_path / "r.md"), "--store", store)
    assert r.returncode == 0 and (tmp_path / "r.md").read_text().startswith(f"# tracekit report: run {rid}")


H100_QWEN = CORPUS / "kineto" / "tracelens-h100-qwen05b-inference" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.mark.skipif(not H100_QWEN.is_file(), reason=f"corpus trace not found at {H100_QWEN} (workspace and CI only)")
def test_kineto_run_with_shapes_gets_a_roofline(tmp_path: Path) -> None:
    """A Kineto run has no XLA costs but records op shapes: the page draws one point per costed
    PyTorch op. The aten::mm point is recomputed here from the raw ops' shapes (2·M·N·K FLOPs, bf16
    A + B + C bytes) and their kernels' device time, independently of the analyzer's code."""
    store = tmp_path / "s.duckdb"
    rid = tracekit.ingest([H100_QWEN], store)[0].run_id
    page = render_report(rid, tmp_path / "r.html", store).read_text()
    data = _figure_data(page)
    ops = next(tr for tr in data if tr.get("name") == "ops")
    point = dict(zip(ops["text"], zip(ops["x"], ops["y"])))
    with duckdb.connect(str(store), read_only=True) as con:
        rows = con.execute(
            """SELECT o.input_dims, o.input_types, sum(k.dur_ns) FROM kernel_ops k
               JOIN ops o ON o.run_id = k.run_id AND o.external_id = k.external_id AND o.name = k.op_name
               WHERE k.run_id = ? AND k.op_name = 'aten::mm' AND k.category = 'kernel'
               GROUP BY o.external_id, o.input_dims, o.input_types""", [rid]).fetchall()
    flops = nbytes = t = 0.0
    for dims, types, d in rows:
        (m, k), (_, n) = json.loads(dims)[:2]
        assert json.loads(types)[:2] == ["c10::BFloat16", "c10::BFloat16"]
        flops += 2 * m * n * k
        nbytes += 2 * (m * k + k * n + m * n)
        t += d
    assert rows and "aten::mm" in point
    x, y = point["aten::mm"]
    assert x == pytest.approx(flops / nbytes, rel=1e-9)
    assert y == pytest.approx(flops / (t / 1e9) / 1e12, rel=1e-9)  # TFLOP/s
    roof = [tr for tr in data if str(tr.get("name", "")).startswith("roof")]
    assert len(roof) == 1  # H100 is in the catalog


def test_gpu_report_leads_with_its_numbers(tmp_path: Path) -> None:
    """The bundled AMD sample (a GPU run): KPI cards first with the stored metrics formatted, a
    chart of device time by kernel class, top kernels with their class (not ``kernel`` on every
    row), short names with the full name on hover, captions in words (no SQL), no raw floats."""
    store = tmp_path / "s.duckdb"
    rid = tracekit.ingest([SAMPLES / "amd_synthetic_rocpd"], store)[0].run_id
    page = render_report(rid, tmp_path / "r.html", store).read_text()
    with duckdb.connect(str(store), read_only=True) as con:
        busy = con.execute("SELECT value FROM metrics WHERE run_id = ? AND name = 'device_busy_fraction'",
                           [rid]).fetchall()[0][0]
    kpis = page.index('id="kpis"')
    assert kpis < page.index('id="findings"') < page.index('id="top"')
    assert f'data-metric="device_busy_fraction"><div class="v">{fmt.percent(busy)}</div>' in page
    assert re.search(r'Plotly\.newPlot\(\s*"classes"', page)  # a chart on a GPU report
    top = _tables(page)["top"]
    assert top[0] == ["kernel", "class", "calls", "time", "mean", "share"]
    classes = {r[1] for r in top[1:]}
    assert classes - {"kernel"} and classes <= {"gemm", "attention", "moe", "norm", "elementwise", "reduction",
                                                "communication", "memcpy", "other"}
    assert "coalesce(" not in page and "dur_ns" not in page
    assert not re.search(r"<td[^>]*>\s*-?[\d,]+\.\d{5,}", page)  # no 16-digit floats in any cell
