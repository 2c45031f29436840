"""Runs you can get hold of (issue 16, first part): every command that takes a run accepts a unique
prefix of its id (≥ 4 characters) and names the runs an ambiguous prefix matches; `tracekit runs`
prints ids whole at any width and in logs; `tracekit query` refuses more than one statement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import SAMPLES
from helpers import run_cli

import tracekit
from tracekit.api import analyze_runs
from tracekit.errors import TraceInputError
from tracekit.store import match_run_id

CPU = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
ROCPD = SAMPLES / "amd_synthetic_rocpd"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("ids") / "s.duckdb"
    return path, [r.run_id for r in tracekit.ingest([CPU, ROCPD], store=path)]


def test_match_run_id_rules() -> None:
    known = ["7c4a4b817b79", "7c4a99990000", "0a6a7dfe1f0b"]
    assert match_run_id(known, "0a6a", "s") == "0a6a7dfe1f0b"
    assert match_run_id(known, "7c4a4", "s") == "7c4a4b817b79"
    assert match_run_id(known, "7c4a4b817b79", "s") == "7c4a4b817b79"
    with pytest.raises(TraceInputError, match=r"run id prefix '7c4a' is ambiguous: it matches 7c4a4b817b79, "
                                              r"7c4a99990000$"):
        match_run_id(known, "7c4a", "s")
    with pytest.raises(TraceInputError, match=r"no run '0a6' in the store \(a prefix needs at least 4 characters\)"):
        match_run_id(known, "0a6", "s")
    with pytest.raises(TraceInputError, match=r"no run 'ffff' in the store \(see `tracekit runs`\)"):
        match_run_id(known, "ffff", "s")


def test_commands_accept_a_prefix(store: tuple[Path, list[str]], tmp_path: Path) -> None:
    path, (cpu, amd) = store
    r = run_cli("analyze", cpu[:5], "--store", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [x["run_id"] for x in json.loads(r.stdout)] == [cpu]
    r = run_cli("compare", cpu[:4], amd[:6], "--store", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "r.md"
    r = run_cli("report", amd[:4], "-o", str(out), "--store", str(path))
    assert r.returncode == 0, r.stderr
    assert amd in out.read_text()
    trace = tmp_path / "p.json"
    r = run_cli("export", cpu[:4], "--perfetto", str(trace), "--store", str(path))
    assert r.returncode == 0, r.stderr
    r = run_cli("analyze", "zzzz", "--store", str(path))
    assert r.returncode == 2 and r.stderr.strip() == f"error: {path}: no run 'zzzz' in the store (see `tracekit runs`)"


def test_runs_prints_whole_ids_at_any_width(store: tuple[Path, list[str]]) -> None:
    path, ids = store
    for cols in ("40", "80", "120"):  # run_cli's stdout is a pipe: the log case
        r = run_cli("runs", "--store", str(path), env={"COLUMNS": cols})
        assert r.returncode == 0, r.stderr
        for rid in ids:
            assert re.search(rf"\b{rid}\b", r.stdout), (cols, r.stdout)


def test_query_refuses_more_than_one_statement(store: tuple[Path, list[str]]) -> None:
    path, _ = store
    r = run_cli("query", "SELECT 1; SELECT 2", "--store", str(path))
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {path}: query: give exactly one SQL statement, got 2"
    r = run_cli("query", "SELECT 42 AS answer;", "--store", str(path), "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"answer": 42}]


def test_query_says_the_store_is_read_only(store: tuple[Path, list[str]]) -> None:
    path, ids = store
    before = path.read_bytes()
    for sql, kind in ((f"DELETE FROM run_meta WHERE run_id = '{ids[0]}'", "DELETE"),
                      ("UPDATE run_meta SET label = 'x'", "UPDATE"), ("CREATE TABLE t (a INT)", "CREATE"),
                      ("DROP VIEW runs", "DROP")):
        r = run_cli("query", sql, "--store", str(path))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"the store is read-only here ({kind} is refused)" in r.stderr and "Binder" not in r.stderr
    assert path.read_bytes() == before


def test_query_table_is_plain_text_in_logs(store: tuple[Path, list[str]]) -> None:
    """A pipe gets aligned plain text: no box drawing, long values cut in the middle (whole with
    --full), NULL shown as — and floats to six significant digits."""
    path, _ = store
    long_name = "k" * 50 + "_middle_" + "z" * 50
    sql = f"SELECT '{long_name}' AS name, NULL AS nothing, 2/3 AS third"
    r = run_cli("query", sql, "--store", str(path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["name", "nothing", "third"] and set(lines[1].replace(" ", "")) == {"-"}
    assert not set("┏━┃│└") & set(r.stdout)
    name, nothing, third = lines[2].split()
    assert len(name) == 60 and name.startswith("kkk") and name.endswith("zzz") and "…" in name
    assert (nothing, third) == ("—", "0.666667")
    r = run_cli("query", sql, "--store", str(path), "--full")
    assert long_name in r.stdout
    # the short names of summary/report, as a SQL function
    r = run_cli("query", "SELECT short_kernel_name('void at::native::vectorized_elementwise_kernel<4, "
                "at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)') AS k",
                "--store", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"k": "vectorized_elementwise_kernel<add>"}]


def test_update_delete_and_relabel_on_reingest(tmp_path: Path) -> None:
    path = tmp_path / "u.duckdb"
    [cpu, amd] = [r.run_id for r in tracekit.ingest([CPU, ROCPD], store=path, label="old", tags={"a": "1"})]
    r = run_cli("update", cpu[:6], "--store", str(path), "--workload", "tiny-decode", "--tag", "gpu=none")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{cpu}: workload, tags updated"
    r = run_cli("query", f"SELECT label, workload, tags FROM runs WHERE run_id = '{cpu}'", "--store", str(path),
                "--format", "json")
    assert json.loads(r.stdout) == [{"label": "old", "workload": "tiny-decode", "tags": {"a": "1", "gpu": "none"}}]
    assert run_cli("update", cpu, "--store", str(path)).returncode == 2  # nothing to change: one-line error
    # re-ingesting stored content with a new label updates it and says so
    r = run_cli("ingest", str(CPU), "--store", str(path), "--label", "new", "--json")
    assert r.returncode == 0, r.stderr
    [res] = json.loads(r.stdout)
    assert (res["run_id"], res["created"], res["updated"]) == (cpu, False, ["label"])
    r = run_cli("ingest", str(CPU), "--store", str(path), "--label", "new")
    assert "already in store" in r.stderr and "updated" not in r.stderr  # same label: nothing changed
    # delete: every row of the run goes, in one transaction; the other run stays whole
    analyze_runs([cpu, amd], path)
    r = run_cli("delete", cpu[:5], "--store", str(path))
    assert r.returncode == 0 and r.stdout.strip() == f"{cpu}: deleted"
    r = run_cli("query", """SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM metrics WHERE run_id = '"""
                + cpu + """'), (SELECT count(*) FROM ops WHERE run_id = '""" + cpu + "')", "--store", str(path),
                "--format", "csv")
    assert r.stdout.splitlines()[1] == "1,0,0"
    r = run_cli("delete", cpu, "--store", str(path))
    assert r.returncode == 2 and "no run" in r.stderr
