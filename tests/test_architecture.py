"""Layers import downward (docs/architecture.md): every module of the package has a layer, and no
module imports one from a higher layer — at any depth, function-local and type-checking imports
included. A new module fails the first test until docs/architecture.md and :data:`LAYERS` place it."""

from __future__ import annotations

import ast
from pathlib import Path

import tracekit

PACKAGE = Path(tracekit.__file__).parent

#: Layer number → the module groups in it (a group is ``tracekit.<first name>``), lowest first.
#: Kept in the same order and words as the table in docs/architecture.md.
LAYERS: dict[int, tuple[str, ...]] = {
    0: ("errors", "limits", "formatting", "names", "sql_text", "sqldoc", "outputs", "config_toml", "jsonl", "__version__"),
    1: ("schema", "store", "request_rows", "server_metric_rows", "lake"),
    2: ("parsers",),
    3: ("ingest", "ingest_lake", "ingest_jobs", "ingest_ray"),
    4: ("analysis",),
    5: ("queries", "compare", "report_data", "run_analysis", "run_edits", "portfolio"),
    6: ("present",),
    7: ("exports", "check", "collectors", "frames", "xprof"),
    8: ("api", "report", ""),  # "": the package itself (tracekit/__init__.py), a facade
    9: ("cli", "dashboard"),
}
LAYER_OF = {group: n for n, groups in LAYERS.items() for group in groups}
DOC = PACKAGE.parent / "docs" / "architecture.md"


def group_of(module: str) -> str:
    """``tracekit.parsers.kineto`` → ``parsers``; ``tracekit`` → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The ``tracekit`` modules (or package attributes) a file imports, anywhere in it."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "tracekit"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "tracekit":
                out |= {f"tracekit.{a.name}" for a in node.names}
            elif node.module.startswith("tracekit."):
                out.add(node.module)
    return out


def package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "proto" not in p.relative_to(PACKAGE).parts)


def upward_imports(files: list[Path]) -> list[str]:
    wrong = []
    for f in files:
        mine = LAYER_OF[group_of(module_name(f))]
        for target in sorted(imports_of(f)):
            theirs = LAYER_OF.get(group_of(target))
            if theirs is not None and theirs > mine:
                wrong.append(f"{module_name(f)} (layer {mine}) imports {target} (layer {theirs})")
    return wrong


def test_every_module_has_a_layer() -> None:
    groups = {group_of(module_name(f)) for f in package_files()}
    assert groups - set(LAYER_OF) == set(), "place these in LAYERS and docs/architecture.md"


def test_layers_import_downward() -> None:
    assert upward_imports(package_files()) == []


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    """Not vacuous: a parser importing the analysis layer is reported."""
    fake = PACKAGE / "parsers" / "_layer_probe_that_does_not_exist.py"
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from tracekit.analysis import base\n    import tracekit.cli.main\n")
    assert imports_of(bad) == {"tracekit.analysis", "tracekit.cli.main"}
    assert LAYER_OF[group_of(module_name(fake))] == 2
    assert [LAYER_OF[group_of(m)] for m in sorted(imports_of(bad))] == [4, 9]


def test_the_doc_lists_every_group_in_layer_order() -> None:
    """docs/architecture.md's layer table names each group in the layer the test enforces."""
    text = DOC.read_text()
    table = [ln for ln in text.splitlines() if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()]
    doc_layers = {int(ln.split("|")[1]): ln.split("|")[2] for ln in table}
    assert sorted(doc_layers) == sorted(LAYERS)
    for n, groups in LAYERS.items():
        for g in groups:
            shown = f"`tracekit/{g}" if g not in ("", "__version__") else ("`tracekit/__init__.py`" if g == "" else "")
            assert shown in doc_layers[n], (n, g)
