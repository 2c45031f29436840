"""``tracekit ingest --jobs N`` against one process: whole-command wall time, CPU time and the speed-up,
into a store file and (in the lake environment) into a SQLite-catalog lake (issue 19).

Inputs: the ``../shared`` corpus runs (``tests/corpus_runs.py``) whose input is at most
``--max-mb`` MB on disk, or, without the corpus, ``--copies`` byte-distinct copies of the bundled
CPU trace. Each repeat runs every configuration once, in alternating order, on a new store or lake
(a fresh ingest of every run); the median wall time is reported with the machine's load average,
since a speed-up on 2 cores is only meaningful when the other core is free.

    .venv/bin/python benchmarks/bench_ingest_jobs.py --jobs 1,2 --repeat 3 --out jobs.json
    .venv/bin/python benchmarks/bench_ingest_jobs.py --jobs 1,2 --repeat 3 --analyze --out jobs-analyze.json
    .venv-lake/bin/python benchmarks/bench_ingest_jobs.py --jobs 1,2 --lake --out jobs-lake.json
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import harness


def inputs(work: Path, max_mb: float, copies: int) -> list[Path]:
    try:
        corpus = harness.tests_module("corpus_runs")
        runs = corpus.CORPUS_RUNS if all(p.exists() for p in corpus.CORPUS_RUNS.values()) else {}
    except Exception:  # noqa: BLE001 - no ../shared
        runs = {}
    if runs:
        paths = [corpus.run_path(label, work) for label in runs]
        return [p for p in paths if _size(p) <= max_mb * 1e6]
    return list(harness.tests_module("helpers").distinct_copies(work, copies))


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def _target(kind: str, work: Path, i: int) -> tuple[str, list[str]]:
    """A new, empty store of ``kind`` and the command that creates it first (a lake), or none."""
    if kind == "lake":
        d = work / f"lake{i}"
        d.mkdir()
        return f"lake:sqlite:///{d}/catalog.sqlite?data={d}/data", ["lake", "init"]
    return str(work / f"store{i}.duckdb"), []


def main() -> None:
    p = harness.new_parser(__doc__)
    harness.add_common_args(p, repeat=3)
    p.add_argument("--jobs", default="1,2", help="--jobs values to compare (default %(default)s)")
    p.add_argument("--lake", action="store_true", help="also into a SQLite-catalog lake (needs tracekit[lake])")
    p.add_argument("--max-mb", type=float, default=20.0, help="largest corpus input, MB (default %(default)s)")
    p.add_argument("--copies", type=int, default=24, help="CPU-trace copies without the corpus (default %(default)s)")
    p.add_argument("--analyze", action="store_true", help="time `ingest --analyze` (runs and their findings)")
    args = p.parse_args()
    exe = args.tracekit or str(Path(sys.executable).parent / "tracekit")
    jobs = [int(j) for j in args.jobs.split(",")]
    kinds = ["file", *(["lake"] if args.lake else [])]
    samples: dict[str, list[harness.Sample]] = {}
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-jobs-") as tmp:
        work = Path(tmp)
        paths = inputs(work, args.max_mb, args.copies)
        total_mb = sum(_size(x) for x in paths) / 1e6
        print(f"{len(paths)} runs, {total_mb:.1f} MB on disk; load {os.getloadavg()[0]:.1f}", flush=True)
        n = 0
        log = (work / "log").open("wb")
        for rep in range(args.repeat):
            configs = [(k, j) for k in kinds for j in jobs]
            for kind, j in configs if rep % 2 == 0 else configs[::-1]:
                n += 1
                store, init = _target(kind, work, n)
                if init:
                    harness.run_measured([exe, *init, store], log, args.timeout)
                s = harness.run_measured([exe, "ingest", *map(str, paths), "--store", store, "--jobs", str(j),
                                          "--json", "--one-run", *(["--analyze"] if args.analyze else [])],
                                         log, args.timeout, stdout=subprocess.DEVNULL)
                if s.returncode != 0:
                    log.flush()
                    raise SystemExit(f"{kind} --jobs {j} failed:\n{harness.tail(work / 'log')}")
                s.extra["load"] = os.getloadavg()[0]
                samples.setdefault(f"{kind} --jobs {j}", []).append(s)
                shutil.rmtree(work / f"lake{n}", ignore_errors=True)
                (work / f"store{n}.duckdb").unlink(missing_ok=True)
        log.close()
    rows, report = [], {}
    for kind in kinds:
        base = harness.median(s.wall_s for s in samples[f"{kind} --jobs {jobs[0]}"])
        for j in jobs:
            ss = samples[f"{kind} --jobs {j}"]
            wall = harness.median(s.wall_s for s in ss)
            cpu = harness.median(s.user_s + s.sys_s for s in ss)
            load = harness.median(s.extra["load"] for s in ss)
            report[f"{kind} --jobs {j}"] = {"wall_s": wall, "cpu_s": cpu, "speedup": base / wall, "load": load,
                                           "walls": [s.wall_s for s in ss]}
            rows.append([kind, str(j), f"{wall:.1f}", f"{cpu:.1f}", f"{base / wall:.2f}×", f"{load:.1f}"])
    print("\n".join(harness.markdown_table(["target", "--jobs", "wall s", "CPU s", "speed-up", "load"], rows,
                                           [False, True, True, True, True, True])))
    harness.write_report(args.out, {"benchmark": "ingest-jobs", "analyze": args.analyze, "runs": len(paths), "mb": total_mb,
                                    "results": report})


if __name__ == "__main__":
    main()
