"""The parser protocol and registry.

A parser is a class that registers itself by format name (``class P(Parser, format_name="x")``),
says whether it recognizes a file (:meth:`Parser.sniff`) and writes one run's rows through an
:class:`IngestContext`. Built-in parsers use exactly this hook; so can a plugin.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # annotations only: parsers import without DuckDB (the CLI reads ahead first)
    import duckdb

REGISTRY: dict[str, type[Parser]] = {}


class Parser:
    """Base class of the format parsers. Subclasses register under ``format_name``."""

    format_name: ClassVar[str]
    #: What ``runs.format`` says for runs this parser makes (defaults to ``format_name``; the
    #: rocprofv3 CSV and JSON parsers both write ``rocprofv3``).
    run_format: ClassVar[str] = ""
    #: File name endings this format uses (for directory scans and error messages).
    suffixes: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, format_name: str | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if format_name is not None:
            cls.format_name = format_name
            cls.run_format = cls.__dict__.get("run_format") or format_name
            REGISTRY[format_name] = cls

    def sniff(self, path: Path) -> bool:
        """True if ``path`` looks like this format (reads at most a few KiB)."""
        raise NotImplementedError

    def explain(self, path: Path) -> str:
        """Why ``path``, whose name suggests this format, is not readable as it (one line)."""
        return f"not a recognized {self.format_name} trace"

    def prepare(self, files: list[Path], *, python_events: bool = False, started: Any = None) -> None:
        """Called once the inputs are resolved, before the store is opened: a parser may start
        slow work that needs no store (imports, decoding the first file) in a background thread,
        for :meth:`parse` to pick up (``python_events`` is what the context of :meth:`parse`
        will say; ``started`` is work the CLI began before start-up, e.g. the Kineto parser's
        read-ahead, for the parser that can use it). Errors must surface in :meth:`parse`.
        Default: nothing."""

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        """Write the rows of one run, made of ``files``, through ``ctx``."""
        raise NotImplementedError


@dataclass
class RankInfo:
    """What one rank's (one file's) trace says about itself."""

    rank: int
    rank_source: str
    path: Path
    world_size: int | None = None
    dist_backend: str | None = None
    schema_version: int | None = None
    trace_id: str | None = None
    base_time_ns: int | None = None
    display_time_unit: str | None = None
    runtime: str | None = None
    runtime_version: str | None = None
    metadata: dict[str, Any] | None = None
    n_trace_events: int = 0
    n_python_events: int = 0
    n_flow_events: int = 0
    n_other_skipped: int = 0
    #: events read but not stored because physics forbids them (a negative duration, a
    #: truncated or duplicated record, a time far outside the capture): counted by the parser for
    #: what it drops itself, plus what ingest's validation drops (tracekit.ingest)
    n_invalid_events: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    captured_at_unix_s: float | None = None
    file_sha256: str = ""
    host: str | None = None


@dataclass
class DeviceInfo:
    """Device properties as the trace states them; units: bytes, counts."""

    rank: int
    device: int
    name: str | None
    vendor: str | None
    arch: str | None
    compute_units: int | None
    warp_size: int | None
    memory_bytes: int | None
    compute_major: int | None
    compute_minor: int | None
    max_threads_per_block: int | None
    max_threads_per_cu: int | None
    regs_per_block: int | None
    regs_per_cu: int | None
    shared_mem_per_block_bytes: int | None
    shared_mem_per_cu_bytes: int | None
    shared_mem_per_block_optin_bytes: int | None
    properties: dict[str, Any]
    device_type: str | None = None
    clock_mhz: float | None = None
    peak_tflops: float | None = None
    peak_hbm_gbps: float | None = None
    memory_bandwidth_gbps: float | None = None
    xcc_count: int | None = None
    simd_per_cu: int | None = None
    max_waves_per_cu: int | None = None

    #: Columns of ``device_meta`` filled from this object, in ``row()`` order.
    COLUMNS = (
        "run_id", "rank", "device", "name", "vendor", "arch", "compute_units", "warp_size",
        "memory_bytes", "compute_major", "compute_minor", "max_threads_per_block",
        "max_threads_per_cu", "regs_per_block", "regs_per_cu", "shared_mem_per_block_bytes",
        "shared_mem_per_cu_bytes", "shared_mem_per_block_optin_bytes", "device_type", "clock_mhz",
        "peak_tflops", "peak_hbm_gbps", "memory_bandwidth_gbps", "xcc_count", "simd_per_cu",
        "max_waves_per_cu", "properties",
    )

    def row(self, run_id: str) -> tuple[Any, ...]:
        return (
            run_id, self.rank, self.device, self.name, self.vendor, self.arch, self.compute_units,
            self.warp_size, self.memory_bytes, self.compute_major, self.compute_minor,
            self.max_threads_per_block, self.max_threads_per_cu, self.regs_per_block,
            self.regs_per_cu, self.shared_mem_per_block_bytes, self.shared_mem_per_cu_bytes,
            self.shared_mem_per_block_optin_bytes, self.device_type, self.clock_mhz,
            self.peak_tflops, self.peak_hbm_gbps, self.memory_bandwidth_gbps, self.xcc_count,
            self.simd_per_cu, self.max_waves_per_cu, json.dumps(self.properties, default=str),
        )


def vendor_of_device(name: str | None, runtime: str | None) -> str | None:
    """nvidia | amd | google | other, from a device name or the runtime that ran it."""
    n = (name or "").lower()
    if "tpu" in n:
        return "google"
    if any(t in n for t in ("nvidia", "tesla", "geforce", "quadro", "rtx", "a100", "h100", "h200", "b200")):
        return "nvidia"
    if any(t in n for t in ("amd", "instinct", "radeon", "mi300", "mi250", "mi210", "mi355")):
        return "amd"
    if runtime == "cuda":
        return "nvidia"
    if runtime == "hip":
        return "amd"
    return "other" if n else None


class IngestContext:
    """Handed to a parser: the open transaction, the run id, and collectors of per-run facts."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        run_id: str,
        progress: Callable[[int, int], None] | None = None,
        *,
        python_events: bool = False,
    ) -> None:
        self.con = con
        self.run_id = run_id
        #: Store Python-stack events (Kineto ``python_function``, the XLA Python tracer) as host
        #: events of category ``python`` instead of only counting them.
        self.python_events = python_events
        self.ranks: list[RankInfo] = []
        self.devices: list[DeviceInfo] = []
        #: what the user should know about the new run that the parser found (one line each)
        self.warnings: list[str] = []
        self._progress = progress

    def progress(self, n_events: int, n_bytes: int) -> None:
        """Report that ``n_events`` more trace events and ``n_bytes`` more input bytes were read."""
        if self._progress is not None:
            self._progress(n_events, n_bytes)

    def add_rank(self, info: RankInfo) -> None:
        self.ranks.append(info)

    def add_device_info(self, info: DeviceInfo) -> None:
        self.devices.append(info)

    def add_device(self, rank: int, props: dict[str, Any], runtime: str | None) -> None:
        """Record a Kineto-style ``deviceProperties`` entry (keys as PyTorch writes them)."""

        def i(key: str) -> int | None:
            v = props.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                return None  # absent, of another type, NaN or infinite
            return int(v) if -(1 << 63) <= v < (1 << 63) else None  # stored as BIGINT

        name = (str(props["name"]).strip() or None) if props.get("name") is not None else None
        vendor = vendor_of_device(name, runtime)
        major, minor = i("computeMajor"), i("computeMinor")
        # NVIDIA's compute capability names the SM architecture; HIP's major/minor do not name
        # a gfx target exactly (MI250 reports 9.0 for gfx90a), so AMD arch stays unknown here.
        arch = f"sm_{major}{minor or 0}" if major is not None and vendor == "nvidia" else None
        device = i("id")
        if device is None:  # position among this rank's devices
            device = sum(1 for d in self.devices if d.rank == rank)
        self.devices.append(
            DeviceInfo(
                rank=rank,
                device=device,
                name=name,
                vendor=vendor,
                arch=arch,
                compute_units=i("numSms"),
                warp_size=i("warpSize"),
                memory_bytes=i("totalGlobalMem"),
                compute_major=major,
                compute_minor=minor,
                max_threads_per_block=i("maxThreadsPerBlock"),
                max_threads_per_cu=i("maxThreadsPerMultiprocessor"),
                regs_per_block=i("regsPerBlock"),
                regs_per_cu=i("regsPerMultiprocessor"),
                shared_mem_per_block_bytes=i("sharedMemPerBlock"),
                shared_mem_per_cu_bytes=i("sharedMemPerMultiprocessor")
                if i("sharedMemPerMultiprocessor") is not None
                else i("maxSharedMemoryPerMultiProcessor"),
                shared_mem_per_block_optin_bytes=i("sharedMemPerBlockOptin"),
                properties=props,
            )
        )

    def device_rows(self) -> list[tuple[Any, ...]]:
        return [d.row(self.run_id) for d in self.devices]
