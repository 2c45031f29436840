"""Faults during ingest (issue 17): ``kill -9`` of a real CLI ingest at many points, and 2 and 4
concurrent CLI writers on one store.

Kill points are chosen by events the test observes, never by sleeping: the process was just
spawned; the store's WAL appeared; the WAL or the store file grew past a fraction of what a clean
ingest writes (measured first, by the same polling); the WAL disappeared again (checkpoint). After
each kill the store must open and hold either exactly the old runs and rows or exactly the old
plus the complete new run (the row counts of a clean ingest), and take a further ingest. The
phase each kill hit (nothing written yet / WAL being written / store file being written, the
commit and checkpoint) is recorded and printed (``-s``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from conftest import SAMPLES

import tracekit

TABLES = ("run_meta", "rank_meta", "device_meta", "device_activity", "host_events", "counter_values",
          "xla_op_costs", "pc_sample_rows")
TARGET = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"  # the largest bundled Kineto sample
OLD = SAMPLES / "amd_synthetic.rpd"


def counts(store: Path) -> dict[str, int]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}  # type: ignore[index]
    finally:
        con.close()


def per_run(store: Path) -> dict[tuple[str, str], int]:
    """(run_id, table) -> rows."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        out = {}
        for t in TABLES:
            for run_id, n in con.execute(f"SELECT run_id, count(*) FROM {t} GROUP BY run_id").fetchall():
                out[(run_id, t)] = n
        return out
    finally:
        con.close()


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from tracekit.cli.main import main; main()", *args]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRACEKIT_STORE", None)
    return env


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return -1


def _state(store: Path, base_size: int, base_mtime: int) -> str:
    wal = store.with_name(store.name + ".wal")
    try:
        st = store.stat()
        changed = st.st_size != base_size or st.st_mtime_ns != base_mtime
    except OSError:
        changed = False
    if wal.exists():
        return "store file written, WAL present" if changed else "WAL being written"
    return "store file written (checkpoint done)" if changed else "nothing written yet"


def _wait_for(proc: subprocess.Popen[bytes], cond: Callable[[], bool]) -> bool:
    """Poll until ``cond()`` or the process exits; True when the condition came first."""
    while proc.poll() is None:
        if cond():
            return True
        time.sleep(0.0005)
    return False


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A store holding one run (the old state), the counts after a clean ingest of TARGET, and
    the largest WAL and store sizes seen while a clean CLI ingest runs."""
    d = tmp_path_factory.mktemp("faults")
    base = d / "base.duckdb"
    tracekit.ingest([OLD], store=base)
    clean = d / "clean.duckdb"
    shutil.copy(base, clean)
    base_size, base_mtime = base.stat().st_size, base.stat().st_mtime_ns
    proc = subprocess.Popen(cli("ingest", str(TARGET), "--store", str(clean)), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wal = clean.with_name(clean.name + ".wal")
    max_wal, max_store = 0, base_size
    while proc.poll() is None:
        max_wal = max(max_wal, _size(wal))
        max_store = max(max_store, _size(clean))
        time.sleep(0.0005)
    assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
    return {"base": base, "old": counts(base), "new": counts(clean), "max_wal": max_wal,
            "max_store": max_store, "base_size": base_size, "base_mtime": base_mtime}


def _kill_points(s: dict[str, object]) -> list[tuple[str, Callable[[Path], bool]]]:
    max_wal = int(s["max_wal"])  # type: ignore[call-overload]
    base_size = int(s["base_size"])  # type: ignore[call-overload]
    grow = int(s["max_store"]) - base_size  # type: ignore[call-overload]
    wal = lambda st: st.with_name(st.name + ".wal")
    pts: list[tuple[str, Callable[[Path], bool]]] = [("at spawn", lambda st: True)]
    pts.append(("WAL appears", lambda st: wal(st).exists()))
    for frac in (0.1, 0.3, 0.5, 0.7, 0.9):
        if max_wal > 0:
            pts.append((f"WAL at {frac:.0%} of its largest", lambda st, n=int(max_wal * frac): _size(wal(st)) >= max(1, n)))
    for frac in (0.25, 0.5, 0.75, 1.0):
        if grow > 0:
            pts.append((f"store grew {frac:.0%}", lambda st, n=base_size + int(grow * frac): _size(st) >= n))
    seen = {"wal": False}

    def wal_gone(st: Path) -> bool:
        if wal(st).exists():
            seen["wal"] = True
            return False
        return seen["wal"]

    pts.append(("WAL removed (after checkpoint)", wal_gone))
    return pts


def test_kill_9_during_ingest_never_leaves_a_partial_run(stores: dict[str, object], tmp_path: Path) -> None:
    old, new = stores["old"], stores["new"]
    assert new["run_meta"] == old["run_meta"] + 1 and new["host_events"] > old["host_events"]  # type: ignore[index]
    outcomes: list[tuple[str, str, str]] = []
    for i, (label, cond) in enumerate(_kill_points(stores)):
        store = tmp_path / f"k{i}" / "store.duckdb"
        store.parent.mkdir()
        shutil.copy(stores["base"], store)  # type: ignore[arg-type]
        base_size, base_mtime = store.stat().st_size, store.stat().st_mtime_ns
        proc = subprocess.Popen(cli("ingest", str(TARGET), "--store", str(store)), env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        hit = _wait_for(proc, lambda c=cond, st=store: c(st))
        phase = _state(store, base_size, base_mtime)
        if hit:
            os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
        killed = rc == -signal.SIGKILL
        after = counts(store)
        state = "old" if after == old else "new" if after == new else f"PARTIAL {after}"
        outcomes.append((label, phase if killed else "finished first", state))
        assert after in (old, new), f"kill at '{label}' ({phase}): {after}; old {old}; new {new}"
        # the store takes the next ingest (no stale lock, no damage)
        tracekit.ingest([TARGET], store=store)
        assert counts(store) == new, label
        leftovers = sorted(p.name for p in store.parent.iterdir() if p.name not in ("store.duckdb", "store.duckdb.wal"))
        assert not leftovers, f"kill at '{label}' left {leftovers}"
    print("\nkill -9 outcomes (point, phase when killed, store after):")
    for row in outcomes:
        print("  " + " | ".join(row))
    n_killed = sum(1 for _, ph, _ in outcomes if ph != "finished first")
    print(f"  {n_killed} kills of {len(outcomes)} points; "
          f"{sum(1 for _, ph, _ in outcomes if 'store file written' in ph)} while the store file was being written")
    # events, not luck: most points must have caught the process alive
    assert n_killed >= len(outcomes) - 2


def test_kill_9_of_a_first_ingest_leaves_no_unusable_store(tmp_path: Path) -> None:
    """Killed while creating the store: afterwards there is no store, or one that ``runs`` reads
    (empty or holding the complete run), and the next ingest works."""
    results = []
    for i, label in enumerate(("store file appears", "WAL appears", "at spawn")):
        store = tmp_path / f"f{i}" / "new.duckdb"
        store.parent.mkdir()
        wal = store.with_name(store.name + ".wal")
        cond = {"store file appears": store.exists, "WAL appears": wal.exists, "at spawn": lambda: True}[label]
        proc = subprocess.Popen(cli("ingest", str(TARGET), "--store", str(store)), env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        if _wait_for(proc, cond):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if store.exists():
            r = subprocess.run(cli("runs", "--store", str(store)), env=_env(), capture_output=True, text=True, check=False)
            assert r.returncode == 0, f"kill at '{label}': runs says {r.stderr.strip()}"
            n = counts(store)["run_meta"]
            assert n in (0, 1)
            results.append((label, f"store with {n} run(s)"))
        else:
            results.append((label, "no store"))
        tracekit.ingest([TARGET], store=store)
        assert counts(store)["run_meta"] == 1
        stray = sorted(p.name for p in store.parent.iterdir() if p.name not in ("new.duckdb", "new.duckdb.wal"))
        assert not stray, f"kill at '{label}' left {stray}"
    print("\nfirst-ingest kills:", results)


CONCURRENT = {
    2: [SAMPLES / "cpu_torch_compile_recompile.pt.trace.json.gz", SAMPLES / "amd_synthetic_csv"],
    4: [SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz", SAMPLES / "amd_synthetic_results.json",
        SAMPLES / "amd_synthetic_rocpd", SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"],
}


@pytest.mark.parametrize("writers", sorted(CONCURRENT))
def test_concurrent_writers_all_land_exactly_once(writers: int, tmp_path: Path) -> None:
    """N CLI ingests started together on one store (which already holds a run) all succeed, one
    after another behind the lock, and the store ends with every run exactly once, with the rows
    of sequential ingests."""
    paths = CONCURRENT[writers]
    store = tmp_path / "shared.duckdb"
    tracekit.ingest([OLD], store=store)
    ref = tmp_path / "sequential.duckdb"
    tracekit.ingest([OLD], store=ref)
    for p in paths:
        tracekit.ingest([p], store=ref)
    procs = [subprocess.Popen(cli("ingest", str(p), "--store", str(store)), env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for p in paths]
    results = [(*p.communicate(), p.returncode) for p in procs]
    for (_out, err, rc), path in zip(results, paths):
        assert rc == 0, f"{path.name}: exit {rc}: {err}"
        assert "Traceback" not in err
    assert per_run(store) == per_run(ref)
    assert counts(store)["run_meta"] == len(paths) + 1
