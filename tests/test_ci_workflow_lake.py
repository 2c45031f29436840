"""The example CI workflow (examples/ci/perf-check.yml) run as GitHub Actions runs it, against a team
lake on a real PostgreSQL catalog started here (tests/lake_services.py): two main-branch jobs that
overlap keep every run exactly once, a third job's `check --history` sees all of them, and a PR job
running at the same time writes nothing to the lake and checks its runs against main's in it.

What runs: the workflow's own ``run:`` scripts, after GitHub's ``${{ }}`` substitution (the small
explicit table in :func:`_expressions`; any other expression fails the test), under the shell
GitHub uses for ``shell: bash`` (``bash --noprofile --norc -eo pipefail``), in a directory of their
own per job, with the environment a runner sets (``GITHUB_*``), the steps whose ``if:`` holds for
the event (and GitHub's implicit ``success()``).

What does not run: the ``uses:`` steps (checkout: the job's directory holds the one file the
scripts read, the check config; setup-python; upload-artifact) and the install step (.venv-lake
already has ``tracekit[lake]``).

What is stood in, and why: the profiler inside ``tracekit capture``. torch is not in .venv-lake, and
a benchmark's timing is not what is tested. The ``tracekit`` first on PATH is the real CLI with
``tracekit.collectors.capture.capture`` (start the workload, profile a window) replaced by a
function returning a capture directory that holds the next of the job's own byte-distinct copies of
a bundled real capture of the workflow's workload (sample_traces/weekly: the tiny decoder's CPU
trace and its request log, so the runs have the serving metrics the workflow's config gates); the
real ``capture`` command then ingests it into the store with the workflow's
``--workload``/``--label``/``--tag``, analyzes it and prints its JSON, as on a runner. GitHub's API
is a local fake (tests/test_check_post.py's ``FakeGitHub``) that receives the PR comment.

Needs ``tracekit[lake]`` (.venv-lake), PostgreSQL's server binaries, ``psql`` and ``jq`` (the
workflow's capture step uses it, as GitHub's runners have it); skips, saying so, without them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import distinct_copies, run_cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("duckdb_extension_ducklake") is None,
    reason="needs tracekit[lake] (DuckDB 1.5.5 + the DuckLake extension packages); .ci/run runs these in .venv-lake",
)

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "examples" / "ci" / "perf-check.yml"
#: A real `tracekit capture` of the workflow's workload (tiny-decoder-cpu under load): its trace
#: and request log, so the runs have the metrics the workflow's check config gates on.
CAPTURED = REPO / "sample_traces" / "weekly" / "tiny_decoder_bs1_exact"
#: Steps with ``run:`` that are not run, and why.
NOT_RUN = {"Install tracekit": ".venv-lake already has tracekit[lake]; torch's part (capture) is stood in"}
PUSH, PR = "push", "pull_request"
PR_NUMBER = 7
TOKEN = "ghs_workflowTestToken0123456789"

#: The stand-in ``tracekit`` (see the module docstring): the real CLI, the profiler replaced.
STAND_IN = '''#!{python}
"""tests/test_ci_workflow_lake.py's `tracekit`: the real CLI, except that `capture` does not start
the workload and profile it (torch is not in .venv-lake): its capture step returns a directory
holding the next unused capture of $TRACEKIT_TEST_TRACES (a trace and its request log), which the
real command ingests, analyzes and prints as it would a captured one."""
import os
import sys
import tempfile
from pathlib import Path

if sys.argv[1:2] == ["capture"]:
    import tracekit.collectors.capture as capture_module
    from tracekit.collectors.capture_backends.spec import CaptureResult

    def stand_in(spec, *, stop=None, on_status=None, store=None):
        recorded = sorted(Path(os.environ["TRACEKIT_TEST_TRACES"]).iterdir())[0]
        out = Path(tempfile.mkdtemp(prefix="tracekit-capture-", dir=".")).resolve()
        for f in sorted(recorded.iterdir()):
            f.rename(out / f.name)
        recorded.rmdir()
        return CaptureResult(out_dir=out, window_start_ns=None, window_end_ns=None,
                             trace_files=sorted(out.glob("*.pt.trace.json.gz")))

    capture_module.capture = stand_in

from tracekit.cli.main import main

main()
'''


def _expressions(secrets: dict[str, str]) -> dict[str, dict[str, str]]:
    """What GitHub substitutes for each ``${{ }}`` expression of the workflow's env and scripts,
    per event (``a && b || c`` is ``b`` when ``a`` holds and ``b`` is not empty, else ``c``)."""
    def pick(on_push: str, on_pr: str) -> dict[str, str]:
        return {PUSH: on_push or on_pr, PR: on_pr}

    both = {PUSH: "", PR: ""}
    return {
        "github.event_name == 'push' && 'main' || format('pr-{0}', github.event.pull_request.number)":
            pick("main", f"pr-{PR_NUMBER}"),
        "github.event_name == 'push' && secrets.TRACEKIT_LAKE_URL || secrets.TRACEKIT_LAKE_READER_URL":
            pick(secrets["TRACEKIT_LAKE_URL"], secrets["TRACEKIT_LAKE_READER_URL"]),
        "github.event_name == 'push' && secrets.TRACEKIT_LAKE_PASSWORD || secrets.TRACEKIT_LAKE_READER_PASSWORD":
            pick(secrets["TRACEKIT_LAKE_PASSWORD"], secrets["TRACEKIT_LAKE_READER_PASSWORD"]),
        "github.event_name == 'push' && secrets.TRACEKIT_LAKE_URL || 'pr.duckdb'":
            pick(secrets["TRACEKIT_LAKE_URL"], "pr.duckdb"),
        "secrets.GITHUB_TOKEN": {PUSH: TOKEN, PR: TOKEN},
        "secrets.TRACEKIT_SLACK_WEBHOOK_URL": both,
    }


#: Each ``if:`` of the workflow's steps, per event.
CONDITIONS = {"github.event_name == 'pull_request'": {PUSH: False, PR: True},
              "github.event_name == 'push'": {PUSH: True, PR: False},
              "always()": {PUSH: True, PR: True}}


def _substitute(text: str, event: str, table: dict[str, dict[str, str]]) -> str:
    def one(m: re.Match[str]) -> str:
        assert m.group(1) in table, f"the workflow has an expression the test does not know: {m.group(0)}"
        return table[m.group(1)][event]

    return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", one, text)


class Job:
    """One simulated workflow run: its directory (the checkout), event and environment."""

    def __init__(self, root: Path, name: str, event: str, traces: list[Path], table: dict[str, dict[str, str]],
                 github_url: str, run_id: int) -> None:
        self.name, self.event, self.table = name, event, table
        self.dir = root / name
        (self.dir / "examples" / "ci").mkdir(parents=True)
        shutil.copy(REPO / "examples" / "ci" / "tracekit-check.toml", self.dir / "examples" / "ci")
        pool = root / f"{name}-traces"  # what its captures "record": a trace and its request log each
        for i, trace in enumerate(traces):
            (pool / f"{i:03d}").mkdir(parents=True)
            shutil.copy(trace, pool / f"{i:03d}" / trace.name)
            shutil.copy(CAPTURED / "tracekit-requests.jsonl", pool / f"{i:03d}")
        event_file = self.dir.parent / f"{name}-event.json"
        event_file.write_text(json.dumps({"pull_request": {"number": PR_NUMBER}} if event == PR else {}))
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "TRACEKIT_", "PG"))}
        self.env = {
            **keep, "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}", "CI": "true", "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": event, "GITHUB_EVENT_PATH": str(event_file), "GITHUB_SHA": f"{run_id:040x}",
            "GITHUB_REF": "refs/heads/main" if event == PUSH else f"refs/pull/{PR_NUMBER}/merge",
            "GITHUB_REPOSITORY": "octo/infer", "GITHUB_RUN_ID": str(run_id), "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_WORKSPACE": str(self.dir), "GITHUB_STEP_SUMMARY": str(root / f"{name}-summary.md"),
            "GITHUB_API_URL": github_url, "RUNNER_TEMP": str(root / f"{name}-tmp"),
            "TRACEKIT_TEST_TRACES": str(pool),  # the stand-in capture's traces (not a runner variable)
        }
        (root / f"{name}-tmp").mkdir()
        self.results: list[tuple[str, subprocess.CompletedProcess[str]]] = []

    def run(self, workflow: dict[str, Any], only: set[str] | None = None) -> None:
        """Run the job's steps in order (``only``: just these), as the runner would."""
        assert workflow["defaults"]["run"]["shell"] == "bash"
        job = workflow["jobs"]["perf"]
        env = {**self.env, **{k: _substitute(str(v), self.event, self.table)
                              for k, v in {**workflow.get("env", {}), **job.get("env", {})}.items()}}
        failed = False
        for step in job["steps"]:
            if "run" not in step or step.get("name") in NOT_RUN or (only is not None and step["name"] not in only):
                continue
            cond = step.get("if")
            if (cond is not None and not CONDITIONS[cond][self.event]) or (failed and cond != "always()"):
                continue
            script = self.dir.parent / f"{self.name}-step-{len(self.results)}.sh"
            script.write_text(_substitute(step["run"], self.event, self.table))
            step_env = {**env, **{k: _substitute(str(v), self.event, self.table) for k, v in step.get("env", {}).items()}}
            res = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=self.dir,
                                 env=step_env, capture_output=True, text=True, timeout=1800, check=False)
            self.results.append((step["name"], res))
            failed = failed or res.returncode != 0

    def assert_ok(self, steps: int) -> None:
        for name, res in self.results:
            assert res.returncode == 0, f"{self.name}: step {name!r} exited {res.returncode}:\n{res.stderr[-3000:]}"
        assert len(self.results) == steps, [n for n, _ in self.results]

    def candidates(self) -> list[str]:
        return (self.dir / "candidates.txt").read_text().split()


def _lake_state(url: str) -> tuple[int | None, dict[str, int], list[str]]:
    """The lake's snapshot, row count per base table, and run ids (one per row of run_meta)."""
    from tracekit.lake.catalog import snapshot_id
    from tracekit.store import RUN_TABLES, close, connect

    con = connect(url, read_only=True)
    try:
        counts = {t: int(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]) for t in RUN_TABLES}
        return snapshot_id(con), counts, [r[0] for r in con.execute("SELECT run_id FROM run_meta").fetchall()]
    finally:
        close(con)


def _psql(host: str, port: int, sql: str) -> None:
    psql = shutil.which("psql") or next((str(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/psql"))), None)
    if psql is None:
        pytest.skip("psql is not installed (Debian: postgresql-client)")
    subprocess.run([psql, "-h", host, "-p", str(port), "-U", "postgres", "-d", "lake", "-v", "ON_ERROR_STOP=1",
                    "-q", "-c", sql], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pg() -> Iterator[tuple[str, int]]:
    from lake_services import postgres

    with postgres() as server:
        yield server


def _baselines_named(markdown: str) -> list[str]:
    line = next(x for x in markdown.splitlines() if x.startswith("Candidate: "))
    return re.findall(r"`([0-9a-f]{8,})`", line.split(" · Baseline: ", 1)[1])


def _first_capture_done(*jobs: Job) -> bool:
    """Whether a job's first capture has printed its JSON (its run is committed and analyzed)."""
    for job in jobs:
        try:
            json.loads((job.dir / "capture-1.json").read_text())
            return True
        except (OSError, ValueError):
            pass
    return False


def test_overlapping_main_jobs_keep_every_run_and_a_pr_writes_nothing(pg: tuple[str, int], tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the workflow (tracekit[lake-test] brings it)")
    from test_check_post import FakeGitHub

    from tracekit.check.message import md_text
    from tracekit.store import close, connect

    if shutil.which("jq") is None:
        pytest.skip("jq is not installed (the workflow's capture step uses it, as GitHub's runners have it)")
    workflow = yaml.safe_load(WORKFLOW.read_text())
    host, port = pg
    writer = f"lake:postgresql://postgres@{host}:{port}/lake?data={tmp_path}/lake-data"
    init = run_cli("lake", "init", writer)
    assert init.returncode == 0, init.stderr
    # what the workflow asks for PRs: a role that may only read the catalog
    _psql(host, port, "CREATE ROLE pr_reader LOGIN; GRANT USAGE ON SCHEMA public TO pr_reader; "
                      "GRANT SELECT ON ALL TABLES IN SCHEMA public TO pr_reader;")
    reader = writer.replace("postgres@", "pr_reader@")
    secrets = {"TRACEKIT_LAKE_URL": writer, "TRACEKIT_LAKE_PASSWORD": "",  # trust authentication here
               "TRACEKIT_LAKE_READER_URL": reader, "TRACEKIT_LAKE_READER_PASSWORD": ""}
    (tmp_path / "bin").mkdir()
    stand_in = tmp_path / "bin" / "tracekit"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    # byte-distinct copies of the captured trace: each capture is a run of its own
    traces = distinct_copies(tmp_path, 15, source=next(CAPTURED.glob("*.pt.trace.json.gz")))
    github = FakeGitHub()
    try:
        table = _expressions(secrets)
        a, b, pr = (Job(tmp_path, name, event, traces[5 * i:5 * i + 5], table, github.url, 100 + i)
                    for i, (name, event) in enumerate([("main-a", PUSH), ("main-b", PUSH), ("pr", PR)]))
        c = Job(tmp_path, "main-c", PUSH, [], table, github.url, 103)
        # two main runs started together; a PR run starts while they run, once main has a run
        # in the lake to check against (its own captures go to a local file: it would be quicker)
        start = threading.Barrier(2)

        def main_job(job: Job) -> None:
            start.wait()
            job.run(workflow)

        with ThreadPoolExecutor(3) as pool:
            mains = [pool.submit(main_job, job) for job in (a, b)]
            while not _first_capture_done(a, b):  # a bounded poll: the jobs end within their timeouts
                assert not all(f.done() for f in mains), "the main jobs ended without a capture"
                time.sleep(0.2)
            assert not all(f.done() for f in mains)  # the PR overlaps them
            pr_job = pool.submit(pr.run, workflow)
            for f in [*mains, pr_job]:
                f.result()
        for job in (a, b, pr):
            job.assert_ok(steps=3)
        # a third main run's history check sees every run of both
        c.run(workflow, only={"Check the main-branch history in the lake"})
        c.assert_ok(steps=1)

        main_runs = a.candidates() + b.candidates()
        assert len(set(main_runs)) == 10
        snapshot, counts, lake_runs = _lake_state(writer)
        assert sorted(lake_runs) == sorted(main_runs)  # every run of both main jobs, each exactly once
        history = (c.dir / "check.md").read_text()
        assert f"History: {len(main_runs)} run(s) by capture time" in history, history
        for job in (a, b):  # each saw at least its own runs
            seen = re.search(r"History: (\d+) run\(s\)", (job.dir / "check.md").read_text())
            assert seen is not None and 5 <= int(seen.group(1)) <= 10, job.name

        # the PR: its runs are in its own file, not in the lake; its baselines are main's runs
        pr_runs = pr.candidates()
        assert len(set(pr_runs)) == 5 and not set(pr_runs) & set(lake_runs)
        con = connect(pr.dir / "pr.duckdb", read_only=True)
        try:
            assert sorted(r[0] for r in con.execute("SELECT run_id FROM run_meta").fetchall()) == sorted(pr_runs)
        finally:
            close(con)
        (posted,) = [r["body"]["body"] for r in github.requests if r["method"] == "POST"]
        assert posted == (pr.dir / "check.md").read_text()
        assert md_text(f"baseline runs read from {reader} (read-only); candidate runs from pr.duckdb") in posted
        read_at = re.search(r"read lake snapshot (\d+)", posted)
        assert read_at is not None, posted
        baselines = _baselines_named(posted)
        assert baselines and set(baselines) <= set(main_runs), posted
        # the gated serving metrics: the candidates' 5 values against one per baseline run
        ttft = next(line for line in posted.splitlines() if line.startswith("| ttft_p95_ms |")).split("|")
        assert f"(n={len(baselines)})" in ttft[3] and "(n=5)" in ttft[4], ttft

        # the PR's check again, now with the writer's role (a team without a reader role): the
        # lake's snapshot and every table's rows stay as they were
        (pr.dir / "check.md").unlink()
        pr.table = _expressions({**secrets, "TRACEKIT_LAKE_READER_URL": writer})
        pr.results = []
        pr.run(workflow, only={"Check against main's runs in the lake (PR)"})
        pr.assert_ok(steps=1)
        assert _lake_state(writer) == (snapshot, counts, lake_runs)
        again = (pr.dir / "check.md").read_text()
        assert snapshot is not None and snapshot >= int(read_at.group(1))
        assert f"read lake snapshot {snapshot} " in again, again
        assert [r["method"] for r in github.requests][-2:] == ["GET", "PATCH"]  # the PR's comment, updated
    finally:
        github.close()


@pytest.mark.parametrize("name", ["perf-check.yml", "perf-check-no-lake.yml"])
def test_no_store_in_the_cache_and_every_script_parses(name: str) -> None:
    """Both example workflows (with and without a lake): no Actions cache of a store, scripts that
    take values from the environment (no ``${{ }}`` pasted into shell), each a valid bash script."""
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the workflow (tracekit[lake-test] brings it)")
    steps = yaml.safe_load((WORKFLOW.parent / name).read_text())["jobs"]["perf"]["steps"]
    assert not [s for s in steps if str(s.get("uses", "")).startswith("actions/cache")]
    scripts = [s["run"] for s in steps if "run" in s]
    assert len(scripts) >= 4
    for script in scripts:
        assert "${{" not in script, script
        res = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
        assert res.returncode == 0, (script, res.stderr)
