"""A brief, deterministic fuzz run in CI (issue 17): mutated inputs of every format, built from
the bundled samples only (so it passes on a fresh clone), checked by the harness in
``tests/fuzz_common.py`` in process (C and pure-Python paths for Kineto and XPlane) and, for a
sample of them, through the real CLI. The long run is ``benchmarks/bench_fuzz.py``.

A failing test lists each failing input with its reproducer (saved under a temporary folder that
the message names: ``tracekit ingest <reproducer>`` shows the problem)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from fuzz_common import (
    FORMATS,
    Seed,
    StoreFixture,
    Summary,
    bundled_seeds,
    check_in_process,
    describe_failures,
    format_table,
    make_case,
    run_fuzz,
)

#: inputs of the CI run (spread evenly over the six formats) and how often one goes through the CLI
N_INPUTS = 150
CLI_EVERY = 8  # of each task (a chunk of <= 25 cases of one seed): cases 0, 8, 16, 24 -> ~20 CLI runs
MASTER_SEED = 17


@pytest.fixture(scope="module")
def fuzz_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Summary, Path]:
    out = tmp_path_factory.mktemp("fuzz-failures")
    summary = run_fuzz(N_INPUTS, master_seed=MASTER_SEED, jobs=2, out_dir=out, seeds=bundled_seeds(),
                       cli_every=CLI_EVERY, chunk=25, case_timeout_s=600)
    print(format_table(summary))
    return summary, out


def test_every_format_was_fuzzed_in_process_and_through_the_cli(fuzz_run: tuple[Summary, Path]) -> None:
    summary, _ = fuzz_run
    assert set(summary.per_format) == set(FORMATS)
    tot = summary.totals()
    assert tot["inputs"] == N_INPUTS
    assert tot["cli_runs"] >= 20
    assert tot["harness_errors"] == 0  # the mutators themselves never fail
    for fmt in ("kineto", "xplane"):
        assert summary.per_format[fmt]["pure_runs"] == summary.per_format[fmt]["inputs"] - summary.per_format[fmt]["crash"]
    # a fuzz run in which nothing is refused, or nothing accepted, is not exercising the parsers
    assert tot["refused"] > 0 and tot["accepted"] > 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_mutated_inputs_keep_the_promises(fuzz_run: tuple[Summary, Path], fmt: str) -> None:
    """No traceback, exit code 0/2 only, one-line errors, an unchanged store after a refusal,
    exactly one new run after an acceptance, the same verdict on the C and pure paths, no crash."""
    summary, out = fuzz_run
    bad = [f for f in summary.hard_failures() if f["format"] == fmt]
    assert not bad, f"{len(bad)} failures (reproducers under {out}):\n" + describe_failures(bad)


def test_cases_are_reproducible(tmp_path: Path) -> None:
    """A case is a pure function of (seed, index, master seed): a saved failure can be rebuilt."""
    for seed in bundled_seeds():
        digests = []
        for run in ("a", "b"):
            path, desc = make_case(seed, "generic", 3, MASTER_SEED, tmp_path / f"{seed.name}-{run}")
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            h = hashlib.sha256()
            for f in files:
                h.update(f.name.encode() + f.read_bytes())
            digests.append((h.hexdigest(), desc))
        assert digests[0] == digests[1], seed.name


def test_the_oracle_catches_what_it_is_meant_to_catch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness is honest: a planted traceback, a multi-line error and a refusal that touched
    the store are each reported."""
    import tracekit
    from tracekit.errors import TraceInputError

    fx = StoreFixture(tmp_path / "fx")
    sample = bundled_seeds()[0].path

    def boom(*a: Any, **k: Any) -> Any:
        raise KeyError("planted")

    monkeypatch.setattr(tracekit, "ingest", boom)
    assert [k for k, _ in check_in_process(sample, fx, "x").failures] == ["traceback"]

    def two_lines(*a: Any, **k: Any) -> Any:
        raise TraceInputError(sample, "first line\nsecond line")

    monkeypatch.setattr(tracekit, "ingest", two_lines)
    assert [k for k, _ in check_in_process(sample, fx, "x").failures] == ["multi_line"]

    def touches(paths: Any, store: Path, **k: Any) -> Any:
        Path(store).with_suffix(".tmp").write_bytes(b"left behind")
        raise TraceInputError(sample, "refused")

    monkeypatch.setattr(tracekit, "ingest", touches)
    assert [k for k, _ in check_in_process(sample, fx, "x").failures] == ["store_changed"]
    monkeypatch.undo()
    ok = check_in_process(sample, fx, "x")
    assert (ok.verdict, ok.failures) == ("accepted", [])


def test_a_crash_in_a_worker_is_caught_and_its_input_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A segmentation fault in a worker (as a C module's bug would cause) is one failure of kind
    ``crash`` with the input rebuilt as a reproducer; the cases after it still run."""
    seed = next(s for s in bundled_seeds() if s.fmt == "rpd")
    monkeypatch.setenv("TRACEKIT_FUZZ_SELFTEST_CRASH", f"{seed.name}:1")
    summary = run_fuzz(3, master_seed=1, jobs=1, out_dir=tmp_path / "out", seeds=[Seed(seed.name, "rpd", seed.path)],
                       cli_every=0)
    crashes = [f for f in summary.failures if f["kind"] == "crash"]
    assert len(crashes) == 1 and crashes[0]["case"] == 1
    assert Path(crashes[0]["reproducer"]).is_file()
    assert summary.per_format["rpd"]["inputs"] == 3
    lines = [json.loads(x) for x in (tmp_path / "out" / "failures.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines if x["kind"] == "crash"] == ["crash"]


#: Inputs of the 10,000-input run of docs/security.md (master seed 17) that raised a traceback
#: before their fix: a request log nested 5,000 deep, `Infinity` in an agent_info cell, a pid and
#: register counts past 64 bits in rocpd and RPD. Rebuilt from (seed, index, master seed).
FOUND_BY_THE_LONG_RUN = [("kineto-weekly-dir", 74), ("rocprofv3-csv", 64), ("rocprofv3-pc-csv", 132),
                         ("rpd", 269), ("rocpd", 653), ("rocpd", 687)]


@pytest.mark.parametrize(("seed_name", "index"), FOUND_BY_THE_LONG_RUN)
def test_inputs_the_long_run_found_are_refused_or_read(tmp_path: Path, seed_name: str, index: int) -> None:
    from fuzz_common import bundled_seeds, make_case

    import tracekit
    from tracekit.errors import TracekitError

    seed = next(s for s in bundled_seeds() if s.name == seed_name)
    path, _ = make_case(seed, "generic", index, 17, tmp_path / "case")
    try:
        tracekit.ingest([path], store=tmp_path / "s.duckdb")
    except TracekitError as exc:
        assert "\n" not in str(exc)
