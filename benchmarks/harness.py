"""What the ``bench_*.py`` benchmarks share: whole-process measurement, the tools measured side by
side (tracekit and its anchors), medians of repeats, common flags, markdown tables and the JSON
report header.

The scripts import it as ``harness`` (``python benchmarks/bench_x.py`` puts ``benchmarks/`` first
on the import path). Only the standard library is used.

Whole-process measurement (:func:`run_measured`): each measured command runs as its own child
(interpreter start-up, imports, work, exit: everything). The parent records wall time
(``time.perf_counter`` around spawn .. reap) and the child's ``os.wait4`` rusage (user and system
CPU s). Peak RSS is the child's own ``VmHWM`` (Linux ``/proc/self/status``) when the command is a
Python interpreter or a Python console script and ``vmhwm_dir`` is given: the child then runs
through :data:`VMHWM_WRAPPER`, which writes its ``VmHWM`` as it leaves (interpreter exit or
``os._exit``), as ``tests/helpers.peak_rss_of_python`` does. ``ru_maxrss`` of a child starts
from the RSS of the process that forked it, so it is only the fallback (other commands, no
``/proc``); :attr:`Sample.extra` ``["rss_source"]`` says which one a sample holds. MB = 10**6
bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKDIR = Path("/tmp/tracekit-bench")
MB = 1_000_000

#: Children run with Python's bytecode cache on, as in any normal install: some sandboxes set
#: PYTHONDONTWRITEBYTECODE, which would make every run recompile an editable install's sources
#: while the anchors' site-packages were byte-compiled by pip.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

VERSIONS_SNIPPET = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for n in sys.argv[1:]:\n"
    "    try:\n"
    "        out[n] = m.version(n)\n"
    "    except m.PackageNotFoundError:\n"
    "        out[n] = None\n"
    "print(json.dumps(out))\n"
)

#: ``python -c VMHWM_WRAPPER REPORT (-c CODE | -m MODULE | SCRIPT) ARGS...``: runs the Python
#: command after REPORT as ``python`` would and writes the process's ``VmHWM`` (KiB) to REPORT as
#: it leaves, through interpreter exit or ``os._exit``.
VMHWM_WRAPPER = """\
import atexit, os, runpy, sys

_report = sys.argv[1]


def _write_peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                with open(_report, "w") as out:
                    out.write(line.split()[1])


_real_exit = os._exit


def _exit(code):
    _write_peak()
    _real_exit(code)


os._exit = _exit
atexit.register(_write_peak)
_mode, _rest = sys.argv[2], sys.argv[3:]
if _mode == "-c":
    sys.argv = ["-c", *_rest[1:]]
    exec(compile(_rest[0], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
elif _mode == "-m":
    sys.argv = [_rest[0], *_rest[1:]]
    runpy.run_module(_rest[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = [_mode, *_rest]
    runpy.run_path(_mode, run_name="__main__")
"""

_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?$")


# --------------------------------------------------------------------------- #
# Measurement
# --------------------------------------------------------------------------- #


@dataclasses.dataclass
class Sample:
    """One measured whole-process run: wall and CPU seconds, peak RSS in KiB, exit code."""

    wall_s: float
    maxrss_kb: int
    user_s: float
    sys_s: float
    returncode: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def rss_mb(self) -> float:
        """Peak RSS in MB (10**6 bytes)."""
        return self.maxrss_kb * 1024 / MB


def resolve_executable(token: str) -> str | None:
    """The path of an executable named or given by ``token``, or None."""
    if os.sep in token:
        return token if os.path.isfile(token) and os.access(token, os.X_OK) else None
    return shutil.which(token)


def _python_of(exe: str) -> tuple[str, bool] | None:
    """(interpreter, is_script) for a Python interpreter or a script with a Python shebang."""
    if _PYTHON_NAME.match(Path(exe).name):
        return exe, False
    try:
        with open(exe, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode(errors="replace").split()
    if not parts:
        return None
    interp = parts[1] if Path(parts[0]).name == "env" and len(parts) > 1 else parts[0]
    if Path(interp).name == interp:
        interp = shutil.which(interp) or interp
    return (interp, True) if _PYTHON_NAME.match(Path(interp).name) else None


def vmhwm_command(cmd: Sequence[str], report: Path) -> list[str] | None:
    """``cmd`` run through :data:`VMHWM_WRAPPER` writing to ``report``, or None where that is not
    possible (not a Python command, no ``/proc``)."""
    exe = resolve_executable(cmd[0]) if cmd else None
    if exe is None or not Path("/proc/self/status").exists():
        return None
    found = _python_of(exe)
    if found is None:
        return None
    interp, is_script = found
    rest = [exe, *cmd[1:]] if is_script else list(cmd[1:])
    if not rest or (rest[0] in ("-c", "-m") and len(rest) < 2):
        return None  # interactive
    if rest[0].startswith("-") and rest[0] not in ("-c", "-m"):
        return None  # interpreter options the wrapper does not pass on
    return [interp, "-c", VMHWM_WRAPPER, str(report), *rest]


def rss_kib(pid: int) -> int:
    """The current RSS (``VmRSS``, KiB) of process ``pid``; 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _kill_past_caps(proc: subprocess.Popen[bytes], timeout_s: float, rss_cap_mb: float | None,
                    stop: threading.Event, killed: list[str]) -> None:
    """Kill ``proc`` after ``timeout_s`` s or, with ``rss_cap_mb``, once its RSS is above it
    (sampled every 20 ms); say why in ``killed``. Ends when ``stop`` is set."""
    t0 = time.monotonic()
    step = 0.02 if rss_cap_mb is not None else timeout_s
    while not stop.wait(min(step, max(0.0, timeout_s - (time.monotonic() - t0)))):
        if time.monotonic() - t0 >= timeout_s:
            killed.append(f"still running after {timeout_s:.0f} s")
        elif rss_cap_mb is not None and rss_kib(proc.pid) * 1024 > rss_cap_mb * MB:
            killed.append(f"RSS above {rss_cap_mb:.0f} MB")
        if killed:
            proc.kill()
            return


def run_measured(cmd: Sequence[str], log: IO[bytes], timeout_s: float, *, vmhwm_dir: Path | None = None,
                 rss_cap_mb: float | None = None, stdout: IO[bytes] | int | None = None) -> Sample:
    """Run ``cmd`` as a child (stdout and stderr to ``log``, killed after ``timeout_s`` s), reap it
    with ``wait4`` and return its wall time, CPU times and peak RSS.

    With ``vmhwm_dir`` (a directory for the report file) a Python command's peak RSS is its own
    ``VmHWM``; otherwise, and for other commands, it is the child's ``ru_maxrss``. With
    ``rss_cap_mb`` the child is also killed once its RSS passes that many MB. With ``stdout`` (a
    file or ``subprocess.DEVNULL``) the child's stdout goes there and only stderr to ``log``. A
    killed child's sample says why in ``extra["killed"]``."""
    report = vmhwm_dir / "vmhwm_kib" if vmhwm_dir is not None else None
    wrapped = vmhwm_command(cmd, report) if report is not None else None
    if report is not None:
        report.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        wrapped or list(cmd), stdin=subprocess.DEVNULL, stdout=log if stdout is None else stdout,
        stderr=subprocess.STDOUT if stdout is None else log, env=CHILD_ENV,
    )
    stop = threading.Event()
    killed: list[str] = []
    watcher = threading.Thread(target=_kill_past_caps, args=(proc, timeout_s, rss_cap_mb, stop, killed), daemon=True)
    watcher.start()
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    finally:
        stop.set()
        watcher.join()
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc  # already reaped; keep Popen from waiting again
    sample = Sample(wall_s=wall, maxrss_kb=int(ru.ru_maxrss), user_s=ru.ru_utime, sys_s=ru.ru_stime, returncode=rc)
    if killed:
        sample.extra["killed"] = killed[0]
    if wrapped is not None and report is not None and report.exists():
        sample.extra["ru_maxrss_kb"] = sample.maxrss_kb
        sample.maxrss_kb = int(report.read_text())
        sample.extra["rss_source"] = "VmHWM"
    else:
        sample.extra["rss_source"] = "ru_maxrss"
    return sample


def median(xs: Iterable[float]) -> float:
    """The median, NaN for no values."""
    values = list(xs)
    return float(statistics.median(values)) if values else float("nan")


def timed_repeats(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` calls of ``fn`` (``time.perf_counter``)."""
    times: list[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def tail(path: Path, n: int = 15) -> str:
    """The last ``n`` lines of a log file ("" when it cannot be read)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def cache_key(path: Path) -> str:
    """A key that changes when ``path`` is replaced or rewritten (resolved path, size, mtime)."""
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def python_versions(python: str, packages: Iterable[str]) -> dict[str, Any]:
    """``{package: version or None}`` as installed for the interpreter ``python`` ({} on failure)."""
    try:
        out = subprocess.run(
            [python, "-c", VERSIONS_SNIPPET, *packages],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
        return dict(json.loads(out))
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def package_versions(*names: str) -> dict[str, str]:
    """Versions of the named packages in this interpreter."""
    import importlib.metadata as md

    return {n: md.version(n) for n in names}


# --------------------------------------------------------------------------- #
# Tools measured side by side
# --------------------------------------------------------------------------- #


class Tool:
    """A command measured on an input: tracekit or one of its anchors (HTA, XProf, a floor)."""

    name: str = ""

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        raise NotImplementedError

    def after_run(self, run_dir: Path, sample: Sample) -> None:
        """Hook to collect per-run extras (before ``run_dir`` is deleted)."""

    def parse_log(self, log_path: Path, sample: Sample) -> None:
        """Hook to read what the run printed into ``sample.extra``."""

    def versions(self) -> dict[str, Any]:
        return {}


class TracekitTool(Tool):
    """``tracekit ingest FILE --store <run dir>/store.duckdb`` (a fresh store per run)."""

    name = "tracekit"

    def __init__(self, cmd: str | None) -> None:
        if cmd is None:
            candidates = [
                str(Path(sys.executable).parent / "tracekit"),
                str(REPO_ROOT / ".venv" / "bin" / "tracekit"),
                "tracekit",
            ]
            found = next((c for c in candidates if resolve_executable(c)), candidates[1])
            self.prefix = [found]
        else:
            self.prefix = shlex.split(cmd)

    def available(self) -> tuple[bool, str]:
        if not self.prefix or resolve_executable(self.prefix[0]) is None:
            return False, f"tracekit command not found: {shlex.join(self.prefix)!r} (use --tracekit CMD)"
        return True, shlex.join(self.prefix)

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        return [*self.prefix, "ingest", str(trace), "--store", str(run_dir / "store.duckdb")]

    def after_run(self, run_dir: Path, sample: Sample) -> None:
        size = sum(p.stat().st_size for p in run_dir.glob("store.duckdb*") if p.is_file())
        sample.extra["store_mb"] = size / MB

    def versions(self) -> dict[str, Any]:
        exe = resolve_executable(self.prefix[0]) if self.prefix else None
        if exe is None:
            return {}
        python = Path(exe).parent / "python"
        return python_versions(str(python), ["tracekit", "duckdb"]) if python.exists() else {}


def select_tools(candidates: dict[str, Tool], wanted: list[str]) -> tuple[list[Tool], dict[str, str]]:
    """The wanted tools that are available, and why the others were skipped (printed as it goes)."""
    tools: list[Tool] = []
    skipped: dict[str, str] = {}
    for name in wanted:
        ok, why = candidates[name].available()
        if ok:
            tools.append(candidates[name])
            print(f"[{name}] {why}")
        else:
            skipped[name] = why
            print(f"[{name}] SKIPPED: {why}", flush=True)
    return tools, skipped


def parse_tools(spec: str, known: Sequence[str]) -> list[str]:
    """The comma list of ``--tools``; exits with status 2 naming any unknown tool."""
    wanted = [t.strip() for t in spec.split(",") if t.strip()]
    unknown = set(wanted) - set(known)
    if unknown:
        print(f"unknown tools: {sorted(unknown)}", file=sys.stderr)
        raise SystemExit(2)
    return wanted


@dataclasses.dataclass
class SideBySide:
    """The samples of each tool on one input, and the tools that failed (name -> why)."""

    samples: dict[str, list[Sample]]
    errors: dict[str, dict[str, str]]


def measure_side_by_side(trace: Path, tools: Sequence[Tool], repeat: int, workdir: Path, timeout_s: float,
                         log_stem: str, failure: Callable[[Path], str] | None = None) -> SideBySide:
    """Run every tool on ``trace`` ``repeat`` times, interleaved (tool A, tool B, …, tool A, …) so
    drift hits all tools alike; each run in a fresh temp dir under ``workdir`` (deleted after),
    its output in ``workdir/logs/<log_stem>-<tool>-<i>.log``, its peak RSS the child's ``VmHWM``
    for Python commands. A tool that fails once is not run again; ``failure(log)`` says why
    (default: the log's first line of the tail)."""
    samples: dict[str, list[Sample]] = {t.name: [] for t in tools}
    errors: dict[str, dict[str, str]] = {}
    log_dir = workdir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for i in range(repeat):
        for tool in tools:
            if tool.name in errors:
                continue
            log_path = log_dir / f"{log_stem}-{tool.name}-{i}.log"
            with tempfile.TemporaryDirectory(prefix=f"{tool.name}-", dir=workdir) as d:
                run_dir = Path(d)
                cmd = tool.command(trace, run_dir)
                with open(log_path, "wb") as log:
                    sample = run_measured(cmd, log, timeout_s, vmhwm_dir=run_dir)
                tool.after_run(run_dir, sample)
            if sample.returncode != 0:
                why = failure(log_path) if failure is not None else (tail(log_path).splitlines() or [""])[0]
                errors[tool.name] = {"error": f"exit {sample.returncode}: {why}", "command": shlex.join(cmd),
                                     "log": str(log_path), "log_tail": tail(log_path)}
                print(f"  [{tool.name}] FAILED (exit {sample.returncode}): {why}  [log: {log_path}]", flush=True)
                continue
            tool.parse_log(log_path, sample)
            samples[tool.name].append(sample)
            print(f"  [{tool.name}] run {i + 1}/{repeat}: {sample.wall_s:.2f} s, "
                  f"{sample.rss_mb:.0f} MB peak RSS ({sample.extra['rss_source']}), "
                  f"{sample.user_s + sample.sys_s:.2f} CPU s", flush=True)
    return SideBySide(samples, errors)


def summarize(samples: Sequence[Sample]) -> dict[str, Any]:
    """Medians of wall s, peak RSS MB, CPU s (and store MB where recorded) and every run."""
    r: dict[str, Any] = {
        "wall_s": median(s.wall_s for s in samples),
        "peak_rss_mb": median(s.rss_mb for s in samples),
        "cpu_s": median(s.user_s + s.sys_s for s in samples),
        "runs": [dataclasses.asdict(s) | {"rss_mb": s.rss_mb} for s in samples],
    }
    if any("store_mb" in s.extra for s in samples):
        r["store_mb"] = median(s.extra["store_mb"] for s in samples)
    return r


# --------------------------------------------------------------------------- #
# Flags, tables, report
# --------------------------------------------------------------------------- #


def new_parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose description is the first paragraph of the benchmark's docstring,
    shown as written."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def add_load_args(p: argparse.ArgumentParser, *, duration: float) -> None:
    """The serving benchmarks' load settings: ``--duration`` (the measured window, s; default
    ``duration``), ``--warmup``, ``--concurrency``, ``--max-tokens`` and ``--prompt-tokens``."""
    p.add_argument("--duration", type=float, default=duration, help="measured window (s)")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up load before the window (s)")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--prompt-tokens", default="uniform:16:128")


def add_common_args(p: argparse.ArgumentParser, *, repeat: int = 3, tracekit: bool = True, workdir: bool = True,
                    timeout: bool = True) -> None:
    """The flags the benchmarks share: ``--repeat``, ``--out`` and, as asked, ``--tracekit``,
    ``--workdir``, ``--timeout``."""
    if tracekit:
        p.add_argument("--tracekit", default=None, help="tracekit command (default: .venv/bin/tracekit)")
    p.add_argument("--repeat", type=int, default=repeat, help="runs; median reported (default %(default)s)")
    if workdir:
        p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                       help="cache/scratch dir for generated inputs, stores, logs (default %(default)s)")
    if timeout:
        p.add_argument("--timeout", type=float, default=3600.0, help="per-run timeout in seconds")
    p.add_argument("--out", type=Path, default=None, help="write JSON results here")


def fmt(v: Any, spec: str) -> str:
    """``format(v, spec)``, or an em dash for None/NaN."""
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[bool]) -> list[str]:
    """The lines of a markdown table; ``numeric`` columns are right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def report_header() -> dict[str, Any]:
    """The date (UTC) and host every JSON report starts with."""
    return {"date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]}}


def write_report(path: Path | None, report: dict[str, Any]) -> None:
    """Write ``report_header() | report`` as JSON to ``path`` (nothing when None)."""
    if path is None:
        return
    path.write_text(json.dumps(report_header() | report, indent=1, default=str))
    print(f"\nwrote {path}")


def tests_module(name: str) -> Any:
    """A helper module of ``tests/`` (e.g. the synthetic-input writers), imported by name."""
    import importlib

    folder = str(REPO_ROOT / "tests")
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(name)
