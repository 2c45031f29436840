"""compile_churn on the project's own captures: it names the function, the count and the argument
dimension that changed, computed here independently from the trace files; steady runs get none."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import duckdb
from conftest import SAMPLES
from helpers import run_cli

import tracekit
from tracekit.analysis.compile_churn import buckets, changed_dimensions, parse_shape

JAX = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
TORCH_COMPILE = SAMPLES / "cpu_torch_compile_recompile.pt.trace.json.gz"
STEADY = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"


def _churn(findings: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    return [f for f in findings if f["analyzer"] == "compile_churn"]


def _jax_prefill_lengths() -> list[int]:
    """The padded prompt lengths, in order of first appearance, read with jax's own XSpace reader
    from the ``prefill_len<n>_T<padded>`` annotations the sample writes (independent of tracekit)."""
    from jax.profiler import ProfileData

    pd = ProfileData.from_serialized_xspace(gzip.decompress(JAX.read_bytes()))
    padded: list[int] = []
    for plane in pd.planes:
        for line in plane.lines:
            for e in line.events:
                m = re.match(r"prefill_len(\d+)_T(\d+)$", e.name)
                if m:
                    padded.append(int(m.group(2)))
    seen: list[int] = []
    for t in padded:  # compile order = first appearance of each padded length
        if t not in seen:
            seen.append(t)
    return seen


def test_jax_recompiles_name_function_count_and_dimension(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([JAX], store=store)
    res = run_cli("analyze", run.run_id, "--store", str(store), "-f", "json")
    assert res.returncode == 0, res.stderr
    findings = {f["evidence"]["function"]: f for f in _churn(json.loads(res.stdout)[0]["findings"])}
    prefill = findings["prefill"]
    assert prefill["analyzer"] == "compile_churn" and prefill["severity"] in ("warning", "critical")
    assert prefill["evidence"]["compiles_in_window"] == 5
    dims = {(c["argument"], c["dimension"]): c["sizes"] for c in prefill["evidence"]["changed_dimensions"]}
    # the token argument's length dimension takes exactly the padded prompt lengths, in the order
    # the annotations first show them (each new length compiled once)
    assert _jax_prefill_lengths() in list(dims.values())
    assert "prefill recompiled: 5 compiles" in prefill["title"]
    assert "dimension" in prefill["detail"] and "buckets" in prefill["detail"]
    assert findings["decode_step"]["evidence"]["compiles_in_window"] == 2
    con = duckdb.connect(str(store), read_only=True)
    stored = con.execute("SELECT count(*) FROM findings WHERE analyzer = 'compile_churn'").fetchone()
    compiles, total = con.execute("SELECT count(*), sum(dur_ns) FROM compiles").fetchone()
    metrics = dict(con.execute("SELECT name, value FROM metrics WHERE analyzer = 'compile_churn'").fetchall())
    con.close()
    assert stored == (2,)
    assert metrics["compiles"] == compiles == 7 and metrics["compile_time"] == total / 1e9


def test_jax_changed_dimension_matches_the_module_signatures(tmp_path: Path) -> None:
    """The dimension the finding names is the one that differs between the compiled variants'
    entry signatures (parsed here with a regex, not tracekit's parser)."""
    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([JAX], store=store)
    con = duckdb.connect(str(store))
    sigs = [r[0] for r in con.execute(
        "SELECT entry_signature FROM xla_modules WHERE function = 'prefill' AND compiled_in_window ORDER BY module_id"
    ).fetchall()]
    con.close()
    tokens = [re.findall(r"s32\[(\d+),(\d+)\]", s)[0] for s in sigs]
    lengths = [int(t[1]) for t in tokens]
    res = run_cli("analyze", run.run_id, "--store", str(store), "-f", "json")
    prefill = next(f for f in _churn(json.loads(res.stdout)[0]["findings"]) if f["evidence"]["function"] == "prefill")
    named = [c["sizes"] for c in prefill["evidence"]["changed_dimensions"] if c["dimension"] == 1 and c["sizes"] == lengths]
    assert named, (lengths, prefill["evidence"]["changed_dimensions"])
    assert f"buckets such as {buckets(lengths)}" in prefill["detail"]


def test_torch_compile_recompile_names_the_batch_dimension(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([TORCH_COMPILE], store=store)
    events = json.loads(gzip.decompress(TORCH_COMPILE.read_bytes()))["traceEvents"]
    n_compiles = sum(1 for e in events if e.get("name") == "entire_frame_compile")
    res = run_cli("analyze", run.run_id, "--store", str(store), "-f", "json")
    [finding] = _churn(json.loads(res.stdout)[0]["findings"])
    ev = finding["evidence"]
    assert ev["function"] == "frame 0" and ev["compiles_in_window"] == n_compiles == 2
    # the sample calls the model with batch 8 then 16: the batch dimension is what changed
    assert {"argument": 1, "dimension": 0, "sizes": [8, 16]} in ev["changed_dimensions"]


def test_steady_state_run_gets_no_churn_finding(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([STEADY], store=store)
    res = run_cli("analyze", "--all", "--store", str(store), "-f", "json")
    out = json.loads(res.stdout)
    assert [r["run_id"] for r in out] == [run.run_id] and _churn(out[0]["findings"]) == []
    metrics = {m["name"]: m["value"] for m in out[0]["metrics"] if m["analyzer"] == "compile_churn"}
    assert metrics["compiles"] == 0 and metrics["compile_time"] == 0
    # --all only picks runs not analyzed yet
    assert json.loads(run_cli("analyze", "--all", "--store", str(store), "-f", "json").stdout) == []


def test_analyze_usage_errors(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    tracekit.ingest([STEADY], store=store)
    for args, phrase in [(["nope"], "no run 'nope'"), ([], "give one or more RUN ids"),
                         (["--all", "-f", "xml"], "expected table, json or markdown")]:
        res = run_cli("analyze", *args, "--store", str(store))
        assert res.returncode == 2 and phrase in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_shape_helpers() -> None:
    assert parse_shape("s32[1,12]") == [1, 12] and parse_shape("f32[]") == [] and parse_shape("(f32[2])") is None
    assert changed_dimensions([[[1, 12], [4]], [[1, 20], [4]]]) == [{"argument": 0, "dimension": 1, "sizes": [12, 20]}]
    assert buckets([12, 20, 16, 64, 32]) == [16, 32, 64]
