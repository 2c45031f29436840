"""One writer at a time (issue 17, item 9): what readers and writers see while another process
holds the store, and what an interrupted first ingest leaves.

The lock is held for real by a second process that opens the store writable and waits; nothing
here depends on how long anything takes: the tests wait for messages, not for durations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES
from helpers import run_cli

import tracekit

CPU = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
COMPILE = SAMPLES / "cpu_torch_compile_recompile.pt.trace.json.gz"
PY = sys.executable

#: Opens the store writable (as an ingest does), says so, and holds it until stdin closes.
HOLD = ("import sys, tracekit; con = tracekit.connect(sys.argv[1]); print('holding', flush=True); "
        "sys.stdin.read(); con.close()")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRACEKIT_STORE", None)
    env.pop("TRACEKIT_LOCK_TIMEOUT", None)
    return env


@pytest.fixture
def held_store(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A store with one run, held by a writer process until the test closes its stdin."""
    store = tmp_path / "store.duckdb"
    tracekit.ingest([CPU], store=store)
    holder = subprocess.Popen([PY, "-c", HOLD, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=_env())
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    try:
        yield store, holder
    finally:
        if holder.poll() is None:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(timeout=60)


def _release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0


def test_ingest_json_says_on_stderr_what_it_waits_for(held_store: tuple[Path, subprocess.Popen[str]]) -> None:
    store, holder = held_store
    ing = subprocess.Popen([PY, "-c", "from tracekit.cli.main import main; main()", "ingest", "--json",
                            str(COMPILE), "--store", str(store)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    assert ing.stderr is not None
    notice = ing.stderr.readline()  # the first thing it says, while the holder still writes
    assert notice.startswith(f"waiting for the lock on {store}: another tracekit process is writing"), notice
    assert "600 s" in notice and "TRACEKIT_LOCK_TIMEOUT" in notice
    _release(holder)
    out, rest = ing.communicate(timeout=300)
    assert ing.returncode == 0, rest
    assert [r["source"] for r in json.loads(out)] == [str(COMPILE)]  # stdout: the JSON alone


def test_ingest_gives_up_after_the_timeout_in_one_line(held_store: tuple[Path, subprocess.Popen[str]]) -> None:
    store, _holder = held_store
    before = store.read_bytes()
    r = run_cli("ingest", "--json", str(COMPILE), "--store", str(store), env={"TRACEKIT_LOCK_TIMEOUT": "0.5"})
    assert r.returncode == 2 and r.stdout == ""
    notice, error = r.stderr.strip().splitlines()
    assert notice.startswith(f"waiting for the lock on {store}") and "0.5 s" in notice
    assert error.startswith(f"error: {store}: store is locked by another tracekit process")
    assert store.read_bytes() == before


def test_dashboard_page_says_the_store_is_being_written(held_store: tuple[Path, subprocess.Popen[str]]) -> None:
    from tracekit.dashboard.app import BUSY_MESSAGE, render_page

    store, holder = held_store
    busy = render_page(store, "/", "")
    assert [(c.id, c.children) for c in busy] == [("page-busy", BUSY_MESSAGE)]
    assert "being written by an ingest" in BUSY_MESSAGE and "reload" in BUSY_MESSAGE
    _release(holder)
    page = render_page(store, "/", "")
    assert all(getattr(c, "id", None) not in ("page-busy", "page-error") for c in page)
    assert str(tracekit.ingest([CPU], store=store)[0].run_id) in str(page)  # the run is listed


# -- an interrupted first ingest ---------------------------------------------------------------------------


def _blank_file(path: Path, how: str) -> None:
    if how == "zero-bytes":
        path.write_bytes(b"")
    else:  # what DuckDB leaves when the process dies before the schema is committed
        duckdb.connect(str(path)).close()


@pytest.mark.parametrize("how", ["zero-bytes", "duckdb-header-only"])
def test_a_blank_store_reads_as_no_runs_and_takes_the_next_ingest(tmp_path: Path, how: str) -> None:
    store = tmp_path / "store.duckdb"
    _blank_file(store, how)
    r = run_cli("runs", "--store", str(store), "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr
    r = run_cli("query", "SELECT count(*) AS n FROM kernels", "--store", str(store), "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == [{"n": 0}], r.stderr
    r = run_cli("ingest", "--json", str(CPU), "--store", str(store))
    assert r.returncode == 0, r.stderr
    run_id = json.loads(r.stdout)[0]["run_id"]
    r = run_cli("runs", "--store", str(store), "-f", "json")
    assert r.returncode == 0 and [x["run_id"] for x in json.loads(r.stdout)] == [run_id]


def test_a_first_ingest_killed_as_the_store_appears(tmp_path: Path) -> None:
    """kill -9 as soon as the store file exists: it exists with its schema (created under a
    temporary name and linked into place), so readers see no runs, or the whole run."""
    store = tmp_path / "store.duckdb"
    proc = subprocess.Popen([PY, "-c", "from tracekit.cli.main import main; main()", "ingest", "--json",
                             str(CPU), str(COMPILE), "--store", str(store)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    while not store.exists() and proc.poll() is None:
        time.sleep(0.002)
    proc.kill()
    proc.wait(timeout=60)
    assert store.exists()
    r = run_cli("runs", "--store", str(store), "-f", "json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) in (0, 2)  # one transaction: nothing or both
    r = run_cli("ingest", "--json", str(CPU), "--store", str(store))
    assert r.returncode == 0, r.stderr
    # a temporary name the killed creator may have left (a second link to the store) is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.duckdb"]


def test_a_new_store_leaves_no_temporary_file(tmp_path: Path) -> None:
    store = tmp_path / "new.duckdb"
    r = run_cli("ingest", "--json", str(CPU), "--store", str(store))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.duckdb"]


def test_a_store_in_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    store = tmp_path / "no" / "such" / "dir" / "s.duckdb"
    r = run_cli("ingest", str(CPU), "--store", str(store))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"error: {store}: cannot create the store")
    assert not (tmp_path / "no").exists()


def test_a_creators_leftover_name_is_removed_once_it_is_gone(tmp_path: Path) -> None:
    """What a creator killed between linking the new store into place and removing its temporary
    name leaves (a second link to the store) is removed by the next writer, once that process is
    gone; a living creator's is left alone."""
    store = tmp_path / "store.duckdb"
    tracekit.ingest([CPU], store=store)
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f".store.duckdb.{dead.pid}.1.new"
    alive = tmp_path / f".store.duckdb.{os.getpid()}.1.new"
    os.link(store, gone)
    os.link(store, alive)
    r = run_cli("ingest", "--json", str(COMPILE), "--store", str(store))
    assert r.returncode == 0, r.stderr
    assert not gone.exists() and alive.exists()
