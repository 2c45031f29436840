"""``tracekit capture``'s backends: one object per way of capturing, found by name.

Each backend implements :class:`CaptureBackend` and lives in its own module, imported on first
use (the way sqlglot finds a dialect by name): :data:`REGISTRY` maps a name to
``"module:object"``. A new backend is one module and one line here; a backend that runs a
command (``--backend NAME -- CMD``) is also named in :data:`COMMAND_BACKENDS`.

Which backend a :class:`~tracekit.collectors.capture_backends.spec.CaptureSpec` selects
(:func:`backend_for`): ``attach`` when it has ``attach``, ``server`` when it has ``server``,
else its ``backend`` (torch, jax, rocprof, nsys).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tracekit.collectors.capture_backends.spec import CaptureResult, CaptureSpec, StatusFn

__all__ = ["COMMAND_BACKENDS", "REGISTRY", "BackendDefaults", "CaptureBackend", "backend_for", "get_backend"]


@runtime_checkable
class CaptureBackend(Protocol):
    """One way of capturing a window of a workload into ``out_dir``.

    ``options`` names the :class:`CaptureSpec` fields only this backend reads beyond the common
    ones (``warmup_steps``, ``counters``); a spec setting one for another backend is refused.
    """

    @property
    def name(self) -> str:
        """The registry name (``torch``, ``rocprof``, ``attach``, …)."""
        ...

    @property
    def options(self) -> frozenset[str]:
        """The backend-specific :class:`CaptureSpec` fields it accepts."""
        ...

    def check(self, spec: CaptureSpec) -> None:
        """Refuse a spec this backend cannot run (raise
        :class:`~tracekit.errors.CaptureError`), before anything is created."""
        ...

    def preflight(self, spec: CaptureSpec) -> None:
        """Last checks on the spec as it will run (after ``python`` became the running
        interpreter), still before the output directory is created."""
        ...

    def run(self, spec: CaptureSpec, out_dir: Path, stop: threading.Event,
            on_status: StatusFn | None) -> CaptureResult:
        """Capture into ``out_dir`` (which exists); ``stop`` closes the window early. Raise
        :class:`~tracekit.errors.CaptureError` when nothing was captured."""
        ...


@dataclass(frozen=True)
class BackendDefaults:
    """What a backend does unless it says otherwise: no options of its own, no checks beyond the
    common ones. Backends subclass it and define ``run`` (and ``check``/``preflight`` as needed)."""

    name: str
    options: frozenset[str] = frozenset()

    def check(self, spec: CaptureSpec) -> None:
        """Nothing beyond the common checks."""

    def preflight(self, spec: CaptureSpec) -> None:
        """Nothing before the output directory is created."""


#: Backend name → ``"module:object"``, the object implementing :class:`CaptureBackend`.
REGISTRY: dict[str, str] = {
    "torch": "tracekit.collectors.capture_backends.hooked:TORCH",
    "jax": "tracekit.collectors.capture_backends.hooked:JAX",
    "rocprof": "tracekit.collectors.capture_backends.rocprof:ROCPROF",
    "nsys": "tracekit.collectors.capture_backends.nsys:NSYS",
    "attach": "tracekit.collectors.capture_backends.attach:ATTACH",
    "server": "tracekit.collectors.capture_backends.server:SERVER",
}

#: The backends that profile a command (``tracekit capture --backend NAME -- CMD``).
COMMAND_BACKENDS: tuple[str, ...] = ("torch", "jax", "rocprof", "nsys")


def get_backend(name: str) -> CaptureBackend:
    """The backend registered as ``name`` (KeyError for an unknown name)."""
    module, _, attr = REGISTRY[name].partition(":")
    backend: CaptureBackend = getattr(importlib.import_module(module), attr)
    return backend


def backend_for(spec: CaptureSpec) -> CaptureBackend:
    """The backend that runs ``spec`` (see the module docstring)."""
    if spec.attach is not None:
        return get_backend("attach")
    if spec.server is not None:
        return get_backend("server")
    assert spec.backend is not None
    return get_backend(spec.backend)
