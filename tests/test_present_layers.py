"""The read API apart from presentation (issue 18): :mod:`tracekit.api` is a thin facade whose
names are the functions of the modules that hold them, :mod:`tracekit.report` keeps its old names,
imports point downward (presentation never imports the CLI, the dashboard, the facade or the
file-writing commands; the dashboard never imports those commands), and the one SQL quoting
helper reads back as the text it quoted."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import duckdb
import pytest

import tracekit
from tracekit.sql_text import quote

PACKAGE = Path(tracekit.__file__).parent

#: facade name → the module that holds it
HOMES = {
    "list_runs": "tracekit.queries", "run_query": "tracekit.queries", "top_activity": "tracekit.queries",
    "compare_runs": "tracekit.compare",
    "analyze_runs": "tracekit.run_analysis", "ensure_analyzed": "tracekit.run_analysis",
    "run_summary": "tracekit.run_analysis",
    "update_runs": "tracekit.run_edits", "delete_runs": "tracekit.run_edits", "attach_model": "tracekit.run_edits",
    "store_token_lengths": "tracekit.run_edits",
    "export_perfetto": "tracekit.exports", "render_report": "tracekit.exports",
}

#: old ``tracekit.report`` name → its home
REPORT_HOMES = {
    "render_report": "tracekit.exports", "collect": "tracekit.report_data", "Report": "tracekit.report_data",
    "Table": "tracekit.report_data", "RooflinePoint": "tracekit.report_data",
    "roofline_points": "tracekit.report_data", "request_latency_table": "tracekit.report_data",
    "to_html": "tracekit.present.report_html", "to_markdown": "tracekit.present.report_markdown",
    "class_figure": "tracekit.present.figures", "roofline_figure": "tracekit.present.figures",
}


@pytest.mark.parametrize(("module", "homes"), [("tracekit.api", HOMES), ("tracekit.report", REPORT_HOMES)])
def test_old_import_paths_name_the_functions_of_their_homes(module: str, homes: dict[str, str]) -> None:
    old = importlib.import_module(module)
    for name, home in homes.items():
        assert getattr(old, name) is getattr(importlib.import_module(home), name), (module, name)
        assert getattr(old, name).__module__ == home, name


def test_api_defines_nothing_but_the_facade() -> None:
    """Every public function of the facade lives elsewhere (``store_requests`` in the store
    layer's :mod:`tracekit.request_rows`)."""
    from tracekit import api

    own = {n for n, v in vars(api).items() if callable(v) and getattr(v, "__module__", "") == "tracekit.api"}
    assert own == set(), own
    assert api.store_requests.__module__ == "tracekit.request_rows"
    assert set(HOMES) | {"store_requests"} <= set(api.__all__)


def _imports(path: Path) -> set[str]:
    """The ``tracekit`` modules a file imports (at any depth, type-checking blocks included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("tracekit")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracekit"):
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def _refers_to(imported: set[str], forbidden: tuple[str, ...]) -> set[str]:
    return {m for m in imported for f in forbidden if m == f or m.startswith(f + ".")}


#: layer → (its files, the modules it must not import)
LAYERS = {
    "present": (sorted((PACKAGE / "present").glob("*.py")),
                ("tracekit.api", "tracekit.exports", "tracekit.report", "tracekit.cli", "tracekit.dashboard",
                 "tracekit.outputs", "tracekit.run_edits", "tracekit.run_analysis")),
    "read": ([PACKAGE / f for f in ("queries.py", "compare.py", "report_data.py")],
             ("tracekit.api", "tracekit.exports", "tracekit.report", "tracekit.present", "tracekit.cli",
              "tracekit.dashboard", "tracekit.outputs", "tracekit.run_edits")),
    "dashboard": (sorted((PACKAGE / "dashboard").glob("*.py")),
                  ("tracekit.api", "tracekit.exports", "tracekit.report", "tracekit.cli", "tracekit.outputs",
                   "tracekit.run_edits", "tracekit.run_analysis")),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_import_downward(layer: str) -> None:
    files, forbidden = LAYERS[layer]
    assert files
    wrong = {f.name: sorted(_refers_to(_imports(f), forbidden)) for f in files}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The check above is not vacuous: a file importing a file-writing command is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from tracekit.exports import export_perfetto\n    from tracekit import report\n")
    assert _refers_to(_imports(bad), ("tracekit.exports", "tracekit.report")) == {
        "tracekit.exports", "tracekit.exports.export_perfetto", "tracekit.report"}


@pytest.mark.parametrize("text", ["", "plain", "O'Neil", "''", "'; DROP TABLE runs; --", "a\\'b", "line\nbreak",
                                  "tab\there", "ünïcödé ✓", "\"double\"", "$1 ?"])
def test_quote_reads_back_as_the_text(text: str) -> None:
    con = duckdb.connect()
    assert con.execute(f"SELECT {quote(text)}").fetchall() == [(text,)]
    assert con.execute(f"SELECT count(*) FROM (VALUES ({quote(text)})) v(x) WHERE x = ?", [text]).fetchall() == [(1,)]
