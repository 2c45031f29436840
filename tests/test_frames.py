"""The notebook API (tracekit.Store / Run / Comparison): DataFrames of the documented views, checked
against numbers computed here straight from the bundled nsys sample's SQLite tables, and the example
notebook executed end to end (nbclient, a real IPython kernel)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import tracekit
from tracekit.compare import compare_runs

pd = pytest.importorskip("pandas", reason="the notebook API needs pandas (pip install 'tracekit[notebook]')")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
NSYS = SAMPLES / "nsys_synthetic_tp2_graphs.sqlite"


def sq(sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{NSYS}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[tracekit.Store, list[str]]:
    path = tmp_path_factory.mktemp("frames") / "s.duckdb"
    results = tracekit.ingest([NSYS, SAMPLES / "amd_synthetic_rocpd", SAMPLES / "amd_synthetic.rpd"], store=path)
    return tracekit.Store(path), [r.run_id for r in results]


def test_kernels_and_classes_add_up_to_the_exports_device_time(store: tuple[tracekit.Store, list[str]]) -> None:
    st, (nsys, _rocpd, _rpd) = store
    run = st.run(nsys[:6])
    assert run.id == nsys
    kernels = run.kernels()
    want = sum(sq(f'SELECT coalesce(sum("end" - start), 0) FROM {t}')[0][0]
               for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"))
    assert int(kernels["time_ns"].sum()) == want
    top_name, top_ns = sq("""SELECT s.value, sum(k."end" - k.start) t FROM CUPTI_ACTIVITY_KIND_KERNEL k
                             JOIN StringIds s ON s.id = k.demangledName GROUP BY 1 ORDER BY t DESC LIMIT 1""")[0]
    assert (kernels.iloc[0]["name"], int(kernels.iloc[0]["time_ns"])) == (top_name, top_ns)
    assert len(run.kernels(top=3)) == 3
    classes = run.kernel_time_by_class()
    assert int(classes["time_ns"].sum()) == want and classes["share"].sum() == pytest.approx(1.0)
    assert set(classes["kernel_class"]) >= {"gemm", "attention", "communication", "memcpy"}


def test_steps_idle_gaps_findings_and_metrics(store: tuple[tracekit.Store, list[str]]) -> None:
    st, (nsys, _rocpd, _rpd) = store
    run = st.run(nsys)
    steps = run.steps()
    assert steps.groupby("phase").size().to_dict() == {"decode": 12, "prefill": 2}
    gaps = run.idle_gaps()
    assert len(gaps) > 0 and (gaps["dur_ns"] > 0).all() and set(gaps["cause"]) - {None}
    assert run.findings(analyze=False).empty and run.metrics(analyze=False).empty  # nothing stored yet
    findings = run.findings()
    assert len(findings) > 0 and set(findings["severity"]) <= {"critical", "warning", "info"}
    metrics = run.metrics(analyze=False)  # stored by the analysis findings() ran
    assert "device_busy_fraction" in set(metrics["name"])


def test_compare_and_query_are_the_api_s_rows(store: tuple[tracekit.Store, list[str]]) -> None:
    st, (_nsys, rocpd, rpd) = store
    cmp = st.compare(rocpd, st.run(rpd))
    cols, rows = compare_runs(rocpd, rpd, st.path)["categories"]
    assert list(cmp.categories.columns) == cols and len(cmp.categories) == len(rows)
    assert cmp.categories["a_kernels"].tolist() == [r[cols.index("a_kernels")] for r in rows]
    assert st.query("SELECT count(*) AS n FROM runs")["n"].tolist() == [3]
    assert set(st.runs()["format"]) == {"nsys", "rocpd", "rpd"}


def test_html_summaries(store: tuple[tracekit.Store, list[str]]) -> None:
    st, (nsys, rocpd, rpd) = store
    html = st.run(nsys)._repr_html_()
    assert nsys in html and "NVIDIA H100 80GB HBM3" in html and "nvjet_tst_128x128" in html
    assert "<table" in st._repr_html_() and rpd in st._repr_html_()
    assert rocpd in st.compare(rocpd, rpd)._repr_html_()


def test_the_example_notebook_runs(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat", reason="needs nbformat (in tracekit[test])")
    nbclient = pytest.importorskip("nbclient", reason="needs nbclient (in tracekit[test])")
    pytest.importorskip("ipykernel", reason="needs ipykernel (in tracekit[test])")
    nb = nbformat.read(ROOT / "examples" / "tracekit_notebook.ipynb", as_version=4)
    os.environ["TRACEKIT_NOTEBOOK_STORE"] = str(tmp_path / "nb.duckdb")
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    finally:
        del os.environ["TRACEKIT_NOTEBOOK_STORE"]
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", "")) for o in outputs)
    assert "gemm" in text and "decode" in text and "launch_idle" in text
    assert (tmp_path / "nb.duckdb").is_file()
