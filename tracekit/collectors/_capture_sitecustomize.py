"""Startup hook that `tracekit capture --backend torch|jax -- CMD` injects into CMD's Python processes.

tracekit copies this file as ``sitecustomize.py`` into a private directory and puts that directory
first on ``PYTHONPATH``, so every Python process CMD starts (servers fork or spawn workers) runs it
at start-up without any change to CMD's code. It must not import tracekit: CMD may run another
interpreter. It does nothing unless ``TRACEKIT_CAPTURE`` holds its JSON configuration:

``{"backend": "torch"|"jax", "out_dir": str, "control_dir": str, "warmup_steps": int}``

Protocol with the tracekit process (files in ``control_dir``):

* tracekit creates ``start`` when the capture window opens and ``stop`` when it closes;
* the hook writes ``<pid>.started`` (JSON: Unix ns) when its profiler started, then ``<pid>.done``
  (JSON: trace path) after the trace is exported, or ``<pid>.failed`` (JSON: error text).

torch: the profiler is armed when ``torch`` finishes importing. Kineto must be initialised on the
thread that imported torch, so a short empty CPU profile is started and stopped there; the capture
itself is started and stopped by a controller thread with ``profile_all_threads`` so that ops of
every thread (HTTP handler threads of a server) are recorded. ``warmup_steps`` counts forward
calls of outermost ``nn.Module``s (one engine step each) before the window may open. One trace per
process: ``<out_dir>/<host>.<pid>.pt.trace.json.gz``. A forked child re-arms with its own pid.

jax: armed when ``jax`` finishes importing; ``jax.profiler.start_trace(<out_dir>/pid<pid>)`` /
``stop_trace()`` from the controller thread (an XSpace per process, with XLA op costs).

If the process exits while capturing, an ``atexit`` handler closes the window and exports.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import shutil
import socket
import sys
import threading
import time
from typing import Any

_CONFIG_ENV = "TRACEKIT_CAPTURE"
_POLL_S = 0.02


def _write_json(path: str, obj: object) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


class _Session:
    """One process's capture: waits for the window, profiles, exports, reports by marker files."""

    def __init__(self, cfg: dict[str, Any], module: Any) -> None:
        self.cfg = cfg
        self.module = module
        self.backend = cfg["backend"]
        self.control = cfg["control_dir"]
        self.out_dir = cfg["out_dir"]
        self.warmup_steps = int(cfg.get("warmup_steps") or 0)
        self.steps = 0
        self.prof: Any = None
        self.closed = threading.Event()
        self.finished = threading.Event()
        self.thread: threading.Thread | None = None

    # -- window ------------------------------------------------------------------------------
    def _marker(self, name: str) -> str:
        return os.path.join(self.control, name)

    def _window_open(self) -> bool:
        if not os.path.exists(self._marker("start")) or self.steps < self.warmup_steps:
            return False
        if self.backend == "jax":
            # only a process that uses an XLA backend: starting a trace would initialise one
            # (claiming the GPU/TPU) in launcher or helper processes that merely import jax
            from jax._src import xla_bridge

            return bool(xla_bridge.backends_are_initialized())
        return True

    def _window_closed(self) -> bool:
        return self.closed.is_set() or os.path.exists(self._marker("stop"))

    def run(self) -> None:
        pid = os.getpid()
        try:
            while True:
                if self._window_closed():  # first: a process that gets ready too late stays out
                    return
                if self._window_open():
                    break
                time.sleep(_POLL_S)
            self._start()
            _write_json(self._marker(f"{pid}.started"), {"unix_ns": time.time_ns()})
            while not self._window_closed():
                time.sleep(_POLL_S)
            path = self._stop()
            _write_json(self._marker(f"{pid}.done"), {"path": path, "unix_ns": time.time_ns(),
                                                      "steps": self.steps})
        except BaseException as exc:  # noqa: BLE001 - the workload must keep running whatever the profiler does
            try:
                _write_json(self._marker(f"{pid}.failed"), {"error": f"{type(exc).__name__}: {exc}"})
            except OSError:
                pass
        finally:
            self.finished.set()

    # -- torch ------------------------------------------------------------------------------
    def _torch_activities(self) -> list[Any]:
        torch = self.module
        acts = [torch.profiler.ProfilerActivity.CPU]
        # never initialise CUDA ourselves: only profile it when the workload already uses it
        if getattr(torch, "cuda", None) is not None and torch.cuda.is_initialized():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        return acts

    def _start(self) -> None:
        if self.backend == "torch":
            torch = self.module
            from torch._C._profiler import _ExperimentalConfig

            self.prof = torch.profiler.profile(
                activities=self._torch_activities(), record_shapes=True, with_flops=True,
                experimental_config=_ExperimentalConfig(profile_all_threads=True),
            )
            self.prof.start()
        else:
            import jax.profiler

            jax.profiler.start_trace(os.path.join(self.out_dir, f"pid{os.getpid()}"))

    def _stop(self) -> str:
        pid = os.getpid()
        if self.backend == "torch":
            prof = self.prof
            # metadata must be added while the profiler is still running to reach the trace
            prof.add_metadata_json("tracekit_collector", json.dumps({
                "collector": "tracekit capture --backend torch",
                "torch_version": str(self.module.__version__), "pid": pid,
                "warmup_steps": self.warmup_steps, "steps_at_stop": self.steps,
            }))
            prof.stop()
            path = os.path.join(self.out_dir, f"{socket.gethostname()}.{pid}.pt.trace.json.gz")
            # written outside the output directory, then moved in whole: a process killed while
            # exporting leaves no truncated trace behind for the ingest
            partial = os.path.join(self.control, f"{pid}.partial.pt.trace.json.gz")
            # torch gzips a .gz export line by line at level 9 (3.1 s for a 23 MB trace); the plain
            # JSON export and one level-1 gzip pass take 0.34 s, the file ≈ 1.8× larger
            raw = os.path.join(self.control, f"{pid}.partial.pt.trace.json")
            prof.export_chrome_trace(raw)
            import gzip

            with open(raw, "rb") as fin, gzip.open(partial, "wb", compresslevel=1) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
            os.remove(raw)
            shutil.move(partial, path)
            return path
        import jax.profiler

        jax.profiler.stop_trace()  # type: ignore[no-untyped-call]
        return os.path.join(self.out_dir, f"pid{pid}")

    # -- lifecycle -----------------------------------------------------------------------------
    def launch(self) -> None:
        self.thread = threading.Thread(target=self.run, name="tracekit-capture", daemon=True)
        self.thread.start()

    def at_exit(self) -> None:
        self.closed.set()
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout=600)


_SESSION: _Session | None = None


def _count_step(module: object, args: object) -> None:
    """Global forward pre-hook: count forwards of outermost modules (one engine step each)."""
    session = _SESSION
    if session is None:
        return
    depth = getattr(_DEPTH, "n", 0)
    _DEPTH.n = depth + 1
    if depth == 0:
        session.steps += 1


def _leave_step(module: object, args: object, output: object) -> None:
    _DEPTH.n = max(0, getattr(_DEPTH, "n", 1) - 1)


_DEPTH = threading.local()


def _arm(cfg: dict[str, Any], module: Any) -> None:
    global _SESSION
    if cfg["backend"] == "torch":
        torch = module
        # Kineto's client must be initialised on the importing thread (see the module docstring)
        warm = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        warm.start()
        warm.stop()
        if int(cfg.get("warmup_steps") or 0) > 0:
            from torch.nn.modules import module as nn_module

            nn_module.register_module_forward_pre_hook(_count_step)
            nn_module.register_module_forward_hook(_leave_step, always_call=True)
    _SESSION = _Session(cfg, module)
    _SESSION.launch()


def _rearm_in_child() -> None:
    global _SESSION
    old = _SESSION
    if old is None:
        return
    _SESSION = _Session(old.cfg, old.module)
    _SESSION.launch()


def _at_exit() -> None:
    if _SESSION is not None:
        _SESSION.at_exit()


class _ArmAfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of the backend's top-level package to arm the profiler once it is imported."""

    def __init__(self, target: str, cfg: dict[str, Any]) -> None:
        self.target = target
        self.cfg = cfg
        self.busy = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:  # importlib protocol
        if name != self.target or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        cfg = self.cfg
        finder = self

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                module.__spec__.loader = loader
                if finder in sys.meta_path:
                    sys.meta_path.remove(finder)
                try:
                    _arm(cfg, module)
                except Exception as exc:  # noqa: BLE001 - never break the workload's import
                    try:
                        _write_json(os.path.join(cfg["control_dir"], f"{os.getpid()}.failed"),
                                    {"error": f"arming the profiler failed: {type(exc).__name__}: {exc}"})
                    except OSError:
                        pass

        spec.loader = _Loader()
        return spec


def _install() -> None:
    raw = os.environ.get(_CONFIG_ENV)
    if not raw:
        return
    try:
        cfg = json.loads(raw)
        target = {"torch": "torch", "jax": "jax"}[cfg["backend"]]
    except (ValueError, KeyError, TypeError):
        return
    if target in sys.modules:
        _arm(cfg, sys.modules[target])
    else:
        sys.meta_path.insert(0, _ArmAfterImport(target, cfg))
    os.register_at_fork(after_in_child=_rearm_in_child)
    atexit.register(_at_exit)
    # forked workers (multiprocessing's fork start method) leave through os._exit, which skips
    # atexit: close the window and export first
    real_exit = os._exit

    def _exit_after_export(code: int) -> None:
        _at_exit()
        real_exit(code)

    os._exit = _exit_after_export  # type: ignore[assignment]


def _chain_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this file shadows (e.g. Debian's), as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        d = os.path.abspath(entry or os.curdir)
        cand = os.path.join(d, "sitecustomize.py")
        if d == here or not os.path.isfile(cand):
            continue
        spec = importlib.util.spec_from_file_location("_tracekit_next_sitecustomize", cand)
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        return


_install()
_chain_next_sitecustomize()
