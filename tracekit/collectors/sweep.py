"""``tracekit capture --sweep``: one capture per load setting against the same server, each point
stored as a run tagged with its sweep.

A sweep (:class:`Sweep`, parsed by :func:`parse_sweep` from ``concurrency=1,2,4`` or
``rate=0.5,1,2``) runs :func:`tracekit.collectors.capture.capture_and_ingest` once per value, in the
given order, with the load's concurrency (closed-loop clients, or agentic sessions) or request rate
(requests/s) set to it. Every point:

* captures into ``<out>/<NN>-<param>-<value>/`` under the sweep's directory (``<out>`` holds
  :data:`SWEEP_FILE`, which says what the sweep was and lists its points' runs);
* warms up ``warmup_s`` and then waits for the load's steady state before its window opens (every
  request sent during the warm-up has completed:
  :class:`~tracekit.collectors.capture_backends.window.LoadRunner`), so each window measures the
  server at that load, not its ramp-up from the previous point;
* draws its own prompts (generated: the load's seed + 7919 × (point + 1); from a prompts file: the
  file's next prompts, where the previous point stopped): prompts a previous point sent would be
  served from the server's prefix cache;
* is tagged ``sweep_id`` (shared by the sweep's runs), ``sweep_param``, ``sweep_value``,
  ``sweep_point`` (0, 1, …) and ``load_profile`` (``independent`` or ``agentic``).

With a server or ``--attach`` capture the server keeps running between points; with a command
backend the command (the server) is started again for each point (a cold start each time, which the
warm-up and the steady-state wait absorb). A stop (Ctrl-C) ends the current point's window, stores
it, and ends the sweep. All times in seconds.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tracekit.collectors.capture import capture_and_ingest
from tracekit.collectors.capture_backends.spec import CaptureResult, CaptureSpec
from tracekit.errors import CaptureError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.ingest import IngestResult

__all__ = ["SWEEP_FILE", "SWEEP_PARAMS", "Sweep", "SweepPoint", "parse_sweep", "run_sweep"]

#: What a sweep directory says about itself (the sweep, its points' runs), JSON.
SWEEP_FILE = "tracekit-sweep.json"
#: What a sweep may vary: closed-loop clients (agentic: sessions) or Poisson request rate (req/s).
SWEEP_PARAMS = ("concurrency", "rate")
#: Most points one sweep may have.
MAX_POINTS = 64


@dataclass(frozen=True)
class Sweep:
    """The load settings to capture at: ``param`` (``concurrency`` or ``rate``) and its values."""

    param: Literal["concurrency", "rate"]
    values: tuple[float, ...]

    def label(self, value: float) -> str:
        """A value as written in tags and directory names (``4``, ``0.5``)."""
        return f"{value:g}"


def parse_sweep(text: str) -> Sweep:
    """``concurrency=1,2,4,…`` (positive integers) or ``rate=0.5,1,2`` (positive requests/s), values
    distinct, at most :data:`MAX_POINTS`. Raises :class:`CaptureError` naming ``--sweep``."""
    name, sep, rest = text.partition("=")
    name = name.strip().lower()
    if not sep or name not in SWEEP_PARAMS:
        raise CaptureError("--sweep", f"expected concurrency=N,N,… or rate=R,R,…, got {text!r}")
    values: list[float] = []
    for part in rest.split(","):
        try:
            v = float(part)
        except ValueError:
            raise CaptureError("--sweep", f"not a number: {part.strip()!r}") from None
        if not (v > 0 and math.isfinite(v)) or (name == "concurrency" and v != int(v)):
            raise CaptureError("--sweep", f"{name} values must be positive{' integers' if name == 'concurrency' else ''}, "
                                          f"got {part.strip()}")
        values.append(v)
    if len(set(values)) != len(values):
        raise CaptureError("--sweep", "a value is given twice")
    if not 1 <= len(values) <= MAX_POINTS:
        raise CaptureError("--sweep", f"give 1 to {MAX_POINTS} values")
    return Sweep(name, tuple(values))  # type: ignore[arg-type]


@dataclass
class SweepPoint:
    """One point of a sweep: its value, the capture and the stored run."""

    index: int
    value: float
    result: CaptureResult
    run: IngestResult


def new_sweep_id() -> str:
    """A sweep id: ``sweep-<UTC time>-<6 hex>``, sortable by start time."""
    return f"sweep-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"


def _point_spec(spec: CaptureSpec, sweep: Sweep, value: float, out_dir: Path, offset: int = 0) -> CaptureSpec:
    assert spec.load is not None
    # each point draws its own prompts (generated: its own seed; from a file: where the previous point
    # stopped): a point that re-sent the previous points' prompts would find them in the server's
    # prefix cache and measure a hit rate the workload does not have
    seed = spec.load.seed + 7919 * (sweep.values.index(value) + 1)
    if sweep.param == "concurrency":
        load = replace(spec.load, concurrency=int(value), seed=seed, prompt_offset=offset)
    else:
        load = replace(spec.load, rate_rps=value, seed=seed, prompt_offset=offset)
    return replace(spec, load=load, out_dir=out_dir, force=False, steady_state=True)


def run_sweep(spec: CaptureSpec, sweep: Sweep, store: str | Path | None = None, *, tags: dict[str, str] | None = None,
              stop: threading.Event | None = None, on_point: Callable[[SweepPoint], None] | None = None,
              **options: Any) -> tuple[str, Path, list[SweepPoint]]:
    """Capture and store one run per value of ``sweep`` (module docstring); return the sweep id, its
    directory and the points done. ``spec`` needs a load; its ``out_dir`` (default
    ``./tracekit-sweep-<UTC time>``) must be new or empty (with ``force``: a previous sweep's).
    ``tags`` are added to each point's sweep tags; ``options`` go to each point's
    :func:`~tracekit.collectors.capture.capture_and_ingest` (``label``, ``workload``,
    ``on_status``). ``on_point`` is called after each point is stored (e.g. to analyze it)."""
    from tracekit.collectors.capture import _check_spec
    from tracekit.outputs import prepare_output_dir

    if spec.load is None:
        raise CaptureError("--sweep", "a sweep varies the load: give --load URL")
    if sweep.param == "rate" and spec.load.profile == "agentic":
        raise CaptureError("--sweep", "the agentic profile is closed-loop: sweep its concurrency (sessions)")
    for v in sweep.values:  # every point's spec is checked before the first one runs
        _check_spec(_point_spec(spec, sweep, v, Path(".")))
    base = spec.out_dir or Path.cwd() / time.strftime("tracekit-sweep-%Y%m%d-%H%M%S", time.gmtime())
    prepare_output_dir(base, store=store, force=spec.force, marker=SWEEP_FILE)
    base = base.resolve()
    stop = stop or threading.Event()
    sweep_id = new_sweep_id()
    doc: dict[str, object] = {"sweep_id": sweep_id, "param": sweep.param, "values": list(sweep.values),
                              "profile": spec.load.profile, "url": spec.load.url, "points": []}
    (base / SWEEP_FILE).write_text(json.dumps(doc, indent=1) + "\n")
    points: list[SweepPoint] = []
    offset = spec.load.prompt_offset
    for i, value in enumerate(sweep.values):
        if stop.is_set():
            break
        point_dir = base / f"{i:02d}-{sweep.param}-{sweep.label(value)}"
        point_tags = {**(tags or {}), "sweep_id": sweep_id, "sweep_param": sweep.param,
                      "sweep_value": sweep.label(value), "sweep_point": str(i), "load_profile": spec.load.profile}
        result, run = capture_and_ingest(_point_spec(spec, sweep, value, point_dir, offset), store, tags=point_tags,
                                         stop=stop, **options)
        if result.load is not None:
            offset += len(result.load.records) + result.load.cancelled
        point = SweepPoint(i, value, result, run)
        points.append(point)
        doc["points"] = [{"point": p.index, "value": p.value, "run_id": p.run.run_id,
                          "dir": p.result.out_dir.name} for p in points]
        (base / SWEEP_FILE).write_text(json.dumps(doc, indent=1) + "\n")
        if on_point is not None:
            on_point(point)
    return sweep_id, base, points
