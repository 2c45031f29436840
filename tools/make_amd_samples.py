#!/usr/bin/env python
"""Write the SYNTHETIC AMD samples: one made-up MI300X decode workload in four profiler formats.

Run from the repository root (Python standard library only, nothing is downloaded)::

    python tools/make_amd_samples.py                 # -> sample_traces/
    python tools/make_amd_samples.py --outdir /tmp/x

**Nothing here was measured.** The script invents one small inference-like workload and writes the
same records (same timestamps, correlation ids, dispatch ids, counter values) in four formats,
each laid out exactly as the real tool writes it:

=============================================  ===============================================
``amd_synthetic_rocpd/<pid>_results.db``       rocprofv3 ``--output-format rocpd`` (rocpd SQLite,
                                               schema 3, ROCm 7.0 / rocprofiler-sdk 1.0)
``amd_synthetic_csv/<pid>_*.csv``              rocprofv3 ``--output-format csv`` (kernel, memory
                                               copy, HIP API, marker, counter, agent files)
``amd_synthetic_results.json``                 rocprofv3 ``--output-format json``
``amd_synthetic.rpd``                          rocmProfileData ``rpd_tracer`` (RPD SQLite, schema 2)
``amd_synthetic_expected.json``                the totals every reader must reproduce
=============================================  ===============================================

The workload: one process (pid :data:`PID`, one thread) on a two-socket host with one
AMD Instinct MI300X (gfx942, 304 CUs, 8 XCCs, 2100 MHz). KFD nodes 0 and 1 are the CPUs, node 2 is
the GPU, which HIP calls device 0. The process runs :data:`N_STEPS` decode steps of a one-layer
Llama-3.1-8B-shaped FP8 model at batch 4 (hidden 4096, 32 q / 8 kv heads, FFN 14336, vocab
128256), eagerly (no HIP graph), 14 kernel dispatches per step (:data:`STEP_KERNELS`, 13
distinct kernels): embedding lookup, RMSNorm, QKV GEMM, rotary, KV-cache write, paged attention
+ reduce, O GEMM, fused add+RMSNorm, gate/up GEMM, SiLU-and-mul, down GEMM, final norm, lm_head
GEMV. Kernel symbols, launch shapes and typical durations follow vLLM on MI300X (names and code
object properties are those of the rocpd-v3 corpus sample); start times, durations, API timings and
counter values come from :class:`random.Random` seeded with :data:`SEED`, so every run writes the
same records.

Per step there is one roctx range (``roctxThreadRangeA``, message ``decode_step_<i>``), one HIP
launch call per dispatch (``hipLaunchKernel`` for HIP kernels, ``hipModuleLaunchKernel`` for the
hipBLASLt/Tensile GEMMs) and one ``hipStreamSynchronize``; steps 0 and 2 start with a
``hipMemcpyAsync`` host-to-device copy (32 B of token ids, 8 KiB of block tables). Every dispatch
has two hardware counters: ``SQ_WAVES`` as 8 per-XCC instances (workgroups dealt round-robin to the
XCCs, waves = workgroups x ceil(workgroup size / 64)) and ``GRBM_GUI_ACTIVE`` as one instance
(~ duration x 2.1 cycles/ns).

Size: each file stays under 200 KB. That is why there is one layer (not 32), why the API calls
carry no argument records (``rocpd_arg`` is empty, JSON ``hip_api`` records have no ``args``) and
why the rocpd file uses 1 KiB SQLite pages; the schema-3 DDL alone takes ~45 KB.

Format details reproduced on purpose (each is a reader gotcha):

* rocpd: the DDL is the SDK's own (``rocpd_tables.sql``, ``rocpd_views.sql``, ``data_views.sql``,
  ``marker_views.sql``, ``summary_views.sql`` from ROCm/rocm-systems, rocprofiler-sdk 1.0, MIT
  licence), read from ``tools/rocpd_schema/rocpd_schema3.sql`` with the run's UUID substituted; physical tables are
  ``rocpd_<name>_<uuid>`` behind unsuffixed views; ``rocpd_string`` row 1 is ``""`` and ids follow
  the sorted strings; ``rocpd_info_agent.id`` is the KFD node id (GPU = 2) while HIP calls it
  device 0; ``rocpd_event.correlation_id`` is the external id (0) and the internal correlation id
  is ``stack_id`` (= ``rocpd_region.id``); roctx messages are in ``rocpd_event.extdata``;
  ``rocpd_pmc_event`` holds one row per counter instance (sum them per dispatch and counter).
* CSV: headers, column order and quoting as rocprofv3 1.0 writes them (strings quoted, numbers
  bare, counter values ``%.6f``); ``Agent_Id`` is ``"Agent <logical node id>"`` (``"Agent 2"``);
  ``Grid_Size_*`` are work-items, not workgroups; ``LDS_Block_Size`` is the group segment rounded up
  to 512 B; the memory-copy CSV has no byte count.
* JSON: ``kind``/``operation`` are enum integers resolved through ``strings.buffer_records``;
  agents are named by handles (offset + node id); counter records are per instance; the
  placeholder element at index 0 of ``code_objects``/``kernel_symbols``/``host_functions`` is kept.
  Operation-name lists are filled for the kinds that occur and left empty for the others.
* RPD: the DDL is rocmProfileData's (MIT licence), read from ``tools/rpd_schema/rpd_schema2.sql``; ``rocpd_op.gpuId`` is the HIP
  device index (0); kernel names are in ``rocpd_kernelapi``/``rocpd_op.description``; copies are
  ``rocpd_op`` rows of opType ``CopyHostToDevice`` whose size is in ``rocpd_copyapi``; roctx
  ranges are ``rocpd_api`` rows named ``UserMarker`` with the message as args; RPD has no counters
  and no agent properties; ``gridX`` is in workgroups (blocks) as the HIP launch call gives it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seed of every random choice; change it and every timestamp and counter value changes.
#: Where the samples go by default: the repository's ``sample_traces/`` (this script is in ``tools/``).
SAMPLES_DIR = Path(__file__).resolve().parents[1] / "sample_traces"

SEED = 42025
#: Process and thread id of the profiled process (one thread).
PID = 27182
PPID = 27150
HOSTNAME = "mi300x-synth-01"
#: Number of decode steps.
N_STEPS = 4
#: First timestamp (CLOCK_BOOTTIME ns, ~17.6 days after boot) of the first decode step.
T0_NS = 1_523_806_113_250_000
#: Process start/end relative to the first/last record (ns).
INIT_BEFORE_NS = 2_614_000_000
FINI_AFTER_NS = 431_000_000
#: First internal correlation id and first dispatch id (earlier ones went to warm-up work).
FIRST_CORRELATION_ID = 4101
FIRST_DISPATCH_ID = 1877
#: JSON agent handles are this offset + the agent's node id.
AGENT_HANDLE_OFFSET = 52870
#: KFD node ids: two CPU sockets, then the GPU. HIP numbers the GPU as device 0.
CPU_NODES = (0, 1)
GPU_NODE = 2
HIP_DEVICE = 0
#: The queue and stream every dispatch uses (rocprofv3 ids; the stream is the null stream).
QUEUE_ID = 1
STREAM_ID = 0
GPU_CLOCK_MHZ = 2100
N_XCC = 8
#: Counter ids of gfx942 in rocprofiler-sdk 1.0 (as in the rocpd-v3 corpus sample).
COUNTERS: dict[str, int] = {"GRBM_GUI_ACTIVE": 1856, "SQ_WAVES": 3210}
#: Hardware instances per counter: SQ_WAVES one per XCC, GRBM_GUI_ACTIVE one.
COUNTER_INSTANCES: dict[str, int] = {"GRBM_GUI_ACTIVE": 1, "SQ_WAVES": N_XCC}
COUNTER_BLOCK: dict[str, str] = {"GRBM_GUI_ACTIVE": "GRBM", "SQ_WAVES": "SQ"}
COUNTER_DESCRIPTION: dict[str, str] = {
    "GRBM_GUI_ACTIVE": "The GUI is Active",
    "SQ_WAVES": (
        "Count number of waves sent to distributed sequencers (SQs). This value represents the "
        "number of waves that are sent to each SQ. This only counts new waves sent since the start "
        "of collection (for dispatch profiling this is the timeframe of kernel execution, for agent "
        "profiling it is the timeframe between start_context and read counter data). A sum of all "
        "SQ_WAVES values will give the total number of waves started by the application during the "
        "collection timeframe. Returns one value per-SE (aggregates of SIMD values)."
    ),
}
#: rocprofiler-sdk dimension ids used by the two counters.
DIMENSIONS: dict[str, tuple[int, int]] = {"DIMENSION_XCC": (1, N_XCC), "DIMENSION_INSTANCE": (7, 1)}
COUNTER_DIMENSION: dict[str, str] = {"GRBM_GUI_ACTIVE": "DIMENSION_INSTANCE", "SQ_WAVES": "DIMENSION_XCC"}
#: Bit position of each dimension's index inside a rocprofiler counter instance id.
DIMENSION_SHIFT: dict[str, int] = {"DIMENSION_XCC": 0, "DIMENSION_INSTANCE": 24}
#: Copies: decode step -> (bytes, what).
COPIES: dict[int, tuple[int, str]] = {0: (32, "input token ids"), 2: (8192, "block tables")}
LDS_GRANULE = 512  # CSV LDS_Block_Size rounds the group segment up to this (gfx9)
#: SQLite page size of the rocpd file. The tool leaves SQLite's default (4096); 1 KiB pages hold the
#: same rows in ~30 % less space (25 tables and indexes, most nearly empty). Readers cannot tell.
ROCPD_PAGE_SIZE = 1024

#: HIP_RUNTIME_API_EXT operation ids (positions in :data:`HIP_RUNTIME_OPS`).
HIP_FUNCTIONS = ("hipLaunchKernel", "hipModuleLaunchKernel", "hipMemcpyAsync", "hipStreamSynchronize")
#: rocprofiler-sdk 1.0 enum values used by the JSON records.
KIND_OPS: dict[str, tuple[str, ...]] = {
    "KERNEL_DISPATCH": ("KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"),
    "MEMORY_COPY": (
        "MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE",
        "MEMORY_COPY_DEVICE_TO_HOST", "MEMORY_COPY_DEVICE_TO_DEVICE",
    ),
    "MARKER_CORE_RANGE_API": ("roctxMarkA", "roctxThreadRangeA", "roctxProcessRangeA", "roctxGetThreadId"),
}


@dataclass(frozen=True)
class KernelSymbol:
    """A device kernel as the code object describes it (sizes in bytes, register counts)."""

    alias: str
    code_object: int
    kernarg: int
    static_lds: int
    private: int
    sgpr: int
    vgpr: int
    agpr: int
    entry_offset: int
    symbol: str  # mangled, with the ``.kd`` suffix of the kernel descriptor
    formatted: str  # demangled (what every format shows as the kernel name)
    truncated: str

    @property
    def demangled(self) -> str:
        """rocprofiler's ``demangled_kernel_name``: the formatted name + `` [clone .kd]``, or the
        symbol itself where the demangler gave up (names with ``DF16_``/``TnPFT_``)."""
        if self.symbol.endswith(".kd") and self.formatted != self.symbol[:-3]:
            return self.formatted + " [clone .kd]"
        return self.symbol

    @property
    def launch_api(self) -> str:
        """hipBLASLt's Tensile GEMMs go through the module API, everything else through the runtime."""
        return "hipModuleLaunchKernel" if self.formatted.startswith("Cijk_") else "hipLaunchKernel"


#: One decode step: (kernel alias, grid in work-items, workgroup size, typical duration in ns).
STEP_KERNELS: tuple[tuple[str, tuple[int, int, int], tuple[int, int, int], int], ...] = (
    ("embedding", (4096, 1, 1), (512, 1, 1), 5400),
    # the decoder layer
    ("rms_norm", (4096, 1, 1), (1024, 1, 1), 6300),
    ("gemm_32x16x1024", (24576, 1, 1), (128, 1, 1), 9800),  # QKV projection, 6144 outputs
    ("rotary", (2048, 1, 1), (512, 1, 1), 5100),
    ("reshape_and_cache", (2048, 1, 1), (512, 1, 1), 5100),
    ("paged_attention", (1024, 1, 8), (256, 1, 1), 22100),
    ("paged_attention_reduce", (4096, 4, 1), (128, 1, 1), 5500),
    ("gemm_32x16x1024", (16384, 1, 1), (128, 1, 1), 8700),  # O projection, 4096 outputs
    ("fused_add_rms_norm_fp8", (4096, 1, 1), (1024, 1, 1), 5400),
    ("gemm_64x32x256", (114688, 1, 1), (256, 1, 1), 38500),  # gate/up, 28672 outputs
    ("silu_and_mul", (4096, 1, 1), (1024, 1, 1), 8500),
    ("gemm_64x16x512", (65536, 1, 1), (256, 1, 1), 22200),  # down, split-K 4
    # final norm (fp16 out) and lm_head (skinny GEMM, one workgroup per CU)
    ("fused_add_rms_norm", (4096, 1, 1), (1024, 1, 1), 4300),
    ("lm_head", (19456, 16, 1), (64, 16, 1), 283000),
)

#: Code objects: (id, URI, load size). Ids are the rocprofiler code-object ids.
CODE_OBJECTS: tuple[tuple[int, str, int], ...] = (
    (1, ("file:///opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_hip.so"
         "#offset=412639232&size=1843200"), 786432),
    (2, "file:///opt/venv/lib/python3.12/site-packages/vllm/_C.abi3.so#offset=9338880&size=6823936",
     7340032),
    (3, ("file:///opt/venv/lib/python3.12/site-packages/vllm/_rocm_C.abi3.so"
         "#offset=1048576&size=5419008"), 5767168),
    (4, ("file:///opt/rocm-7.0.0/lib/hipblaslt/library/TensileLibrary_F8H_HS_Bias_AS_SAB_SAV_UA_Type_"
         "F8H_HS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx942.co"), 3145728),
)
CODE_OBJECT_BASE = 0x7F2C_4A00_0000
CODE_OBJECT_STRIDE = 0x0100_0000


# --------------------------------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------------------------------


@dataclass
class ApiCall:
    """A HIP runtime call on the host thread."""

    corr: int
    function: str
    start: int
    end: int


@dataclass
class Marker:
    """A roctx thread range."""

    corr: int
    message: str
    start: int
    end: int


@dataclass
class Dispatch:
    """One kernel dispatch on the GPU; grid in work-items as rocprofiler reports it."""

    dispatch_id: int
    corr: int
    kernel: KernelSymbol
    kernel_id: int
    start: int
    end: int
    grid: tuple[int, int, int]
    workgroup: tuple[int, int, int]
    counters: dict[str, list[float]] = field(default_factory=dict)  # name -> per-instance values

    @property
    def workgroups(self) -> tuple[int, int, int]:
        g, w = self.grid, self.workgroup
        return (-(-g[0] // w[0]), -(-g[1] // w[1]), -(-g[2] // w[2]))

    @property
    def grid_items(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def workgroup_items(self) -> int:
        return self.workgroup[0] * self.workgroup[1] * self.workgroup[2]

    @property
    def lds_block(self) -> int:
        return -(-self.kernel.static_lds // LDS_GRANULE) * LDS_GRANULE


@dataclass
class Copy:
    """One host-to-device memory copy."""

    copy_id: int
    corr: int
    start: int
    end: int
    size: int
    dst: int
    src: int


@dataclass
class Workload:
    """Everything the four files describe."""

    kernels: list[KernelSymbol]  # index + 1 = kernel id
    calls: list[ApiCall]
    markers: list[Marker]
    dispatches: list[Dispatch]
    copies: list[Copy]
    init_ns: int
    fini_ns: int

    def kernel_id(self, k: KernelSymbol) -> int:
        return self.kernels.index(k) + 1


def _hex(v: int) -> str:
    return f"0x{v:x}"


def make_workload(seed: int = SEED) -> Workload:
    """Lay out :data:`N_STEPS` decode steps on the host and GPU timelines (deterministic)."""
    rng = random.Random(seed)
    symbols = {k.alias: k for k in KERNEL_SYMBOLS}
    kernels: list[KernelSymbol] = []
    calls: list[ApiCall] = []
    markers: list[Marker] = []
    dispatches: list[Dispatch] = []
    copies: list[Copy] = []
    corr = FIRST_CORRELATION_ID
    dispatch_id = FIRST_DISPATCH_ID
    t = T0_NS
    gpu_free = T0_NS
    host_buf = 0x7F4E_1A20_0000
    dev_buf = 0x7F51_C124_0000

    for step in range(N_STEPS):
        marker = Marker(corr, f"decode_step_{step}", t, 0)
        corr += 1
        markers.append(marker)
        t += rng.randint(1500, 3200)
        if step in COPIES:
            size = COPIES[step][0]
            start = t
            end = start + rng.randint(6500, 9500)
            dst, src = dev_buf + 0x4000 * step, host_buf + 0x1000 * step
            calls.append(ApiCall(corr, "hipMemcpyAsync", start, end))
            c_start = max(end + rng.randint(2500, 4500), gpu_free + rng.randint(800, 1500))
            c_end = c_start + 5200 + size // 8 + rng.randint(0, 900)
            copies.append(Copy(len(copies) + 1, corr, c_start, c_end, size, dst, src))
            gpu_free = c_end
            corr += 1
            t = end
        for alias, grid, wg, typical in STEP_KERNELS:
            k = symbols[alias]
            if k not in kernels:
                kernels.append(k)
            t += rng.randint(9000, 26000)  # Python/framework time between launches
            api = k.launch_api
            start = t
            end = start + (rng.randint(5200,
                                       9800) if api == "hipModuleLaunchKernel" else rng.randint(4200, 7800))
            calls.append(ApiCall(corr, api, start, end))
            k_start = max(end + rng.randint(2500, 5500), gpu_free + rng.randint(600, 1400))
            k_end = k_start + round(typical * (1 + rng.uniform(-0.06, 0.06)))
            d = Dispatch(dispatch_id, corr, k, 0, k_start, k_end, grid, wg)
            dispatches.append(d)
            gpu_free = k_end
            dispatch_id += 1
            corr += 1
            t = end
        t += rng.randint(3000, 9000)
        sync_start = t
        sync_end = max(t + rng.randint(1500, 2500), gpu_free + rng.randint(3000, 6000))
        calls.append(ApiCall(corr, "hipStreamSynchronize", sync_start, sync_end))
        corr += 1
        t = sync_end + rng.randint(1500, 3000)
        marker.end = t
        t += rng.randint(35000, 60000)

    for d in dispatches:
        d.kernel_id = kernels.index(d.kernel) + 1
        d.counters = _counters(d, rng)
    first = min(min(c.start for c in calls), min(m.start for m in markers))
    last = max(max(c.end for c in calls), max(m.end for m in markers), max(d.end for d in dispatches))
    return Workload(kernels, calls, markers, dispatches, copies, first - INIT_BEFORE_NS, last + FINI_AFTER_NS)


def _counters(d: Dispatch, rng: random.Random) -> dict[str, list[float]]:
    """SQ_WAVES per XCC (workgroups dealt round-robin) and GRBM_GUI_ACTIVE (busy cycles)."""
    gx, gy, gz = d.workgroups
    n_wg = gx * gy * gz
    waves_per_wg = math.ceil(d.workgroup_items / 64)
    sq = [float((n_wg // N_XCC + (1 if x < n_wg % N_XCC else 0)) * waves_per_wg) for x in range(N_XCC)]
    cycles = (d.end - d.start) * GPU_CLOCK_MHZ // 1000 + rng.randint(180, 900)
    return {"GRBM_GUI_ACTIVE": [float(cycles)], "SQ_WAVES": sq}


# --------------------------------------------------------------------------------------------------
# Agents (KFD nodes) as rocprofiler-sdk reports them
# --------------------------------------------------------------------------------------------------

_CAP_NAMES = (
    "HotPluggable", "HSAMMUPresent", "SharedWithGraphics", "QueueSizePowerOfTwo", "QueueSize32bit",
    "QueueIdleEvent", "VALimit", "WatchPointsSupported", "WatchPointsTotalBits", "DoorbellType",
    "AQLQueueDoubleMap", "DebugTrapSupported", "WaveLaunchTrapOverrideSupported",
    "WaveLaunchModeSupported", "PreciseMemoryOperationsSupported", "DEPRECATED_SRAM_EDCSupport",
    "Mem_EDCSupport", "RASEventNotify", "ASICRevision", "SRAM_EDCSupport", "SVMAPISupported",
    "CoherentHostAccess", "DebugSupportedFirmware",
)
#: MI300X capability flags (KFD ``capability`` 746037888) by name.
_GPU_CAPS = {
    "WatchPointsSupported": 1, "WatchPointsTotalBits": 2, "DoorbellType": 2, "DebugTrapSupported": 1,
    "WaveLaunchTrapOverrideSupported": 1, "WaveLaunchModeSupported": 1,
    "PreciseMemoryOperationsSupported": 1, "Mem_EDCSupport": 1, "RASEventNotify": 1, "ASICRevision": 1,
    "SRAM_EDCSupport": 1, "SVMAPISupported": 1, "DebugSupportedFirmware": 1,
}
_GPU_CAPABILITY_BITS = 746037888
CPU_NAME = "AMD EPYC 9654 96-Core Processor"
GPU_PRODUCT = "AMD Instinct MI300X"
GPU_ARCH = "gfx942"


def _io_link(src: int, dst: int, link_type: int, weight: int, bw: tuple[int, int]) -> dict[str, Any]:
    return {
        "type": link_type, "version_major": 0, "version_minor": 0, "node_from": src, "node_to": dst,
        "weight": weight, "min_latency": 0, "max_latency": 0, "min_bandwidth": bw[0],
        "max_bandwidth": bw[1], "recommended_transfer_size": 0,
        "flags": {"Override": 0, "NonCoherent": 0, "NoAtomics32bit": 0, "NoAtomics64bit": 0,
                  "NoPeerToPeerDMA": 0},
    }


def agents() -> list[dict[str, Any]]:
    """The three agents (two CPU sockets, one MI300X) in rocprofiler's ``rocprofiler_agent_t`` form.

    The MI300X's cache list is cut to one L2 and one Infinity-Cache entry (a real one lists 626
    caches) to keep the files small; ``caches_count`` says 2 accordingly.
    """
    out: list[dict[str, Any]] = []
    zero_dim = {"x": 0, "y": 0, "z": 0}
    for node in CPU_NODES:
        out.append({
            "size": 448, "id": {"handle": AGENT_HANDLE_OFFSET + node}, "type": 1,
            "cpu_cores_count": 96, "simd_count": 0, "mem_banks_count": 1, "caches_count": 0,
            "io_links_count": 2, "cpu_core_id_base": 96 * node, "simd_id_base": 0,
            "max_waves_per_simd": 0, "lds_size_in_kb": 0, "gds_size_in_kb": 0, "num_gws": 0,
            "wave_front_size": 0, "num_xcc": 1, "cu_count": 96, "array_count": 0, "num_shader_banks": 0,
            "simd_arrays_per_engine": 0, "cu_per_simd_array": 0, "simd_per_cu": 0,
            "max_slots_scratch_cu": 0, "gfx_target_version": 0, "vendor_id": 0, "device_id": 0,
            "location_id": 0, "domain": 0, "drm_render_minor": 0, "num_sdma_engines": 0,
            "num_sdma_xgmi_engines": 0, "num_sdma_queues_per_engine": 0, "num_cp_queues": 0,
            "max_engine_clk_ccompute": 2400, "max_engine_clk_fcompute": 0,
            "sdma_fw_version": {"uCodeSDMA": 0, "uCodeRes": 0},
            "fw_version": {"uCode": 0, "Major": 0, "Minor": 0, "Stepping": 0},
            "capability": {n: 0 for n in _CAP_NAMES},
            "cu_per_engine": 0, "max_waves_per_cu": 0, "family_id": 25, "workgroup_max_size": 0,
            "grid_max_size": 0, "local_mem_size": 0, "hive_id": 0, "gpu_id": 0,
            "workgroup_max_dim": dict(zero_dim), "grid_max_dim": dict(zero_dim),
            "name": CPU_NAME, "vendor_name": "CPU", "product_name": CPU_NAME, "model_name": "",
            "node_id": node, "logical_node_id": node, "logical_node_type_id": node,
            "runtime_visibility": {"hsa": 1, "hip": 0, "rccl": 0, "rocdecode": 0},
            "uuid": {"bytes": [0] * 16},
            "mem_banks": [{"heap_type": 0, "flags": {"HotPluggable": 0, "NonVolatile": 0}, "width": 64,
                           "mem_clk_max": 4800, "size_in_bytes": 811159019520}],
            "caches": [],
            "io_links": [
                _io_link(node, 1 - node, 11, 20, (0, 0)),
                *([_io_link(node, GPU_NODE, 2, 20, (312, 64000))] if node == 0 else []),
            ],
            "gpu_index": -1,
        })
    out[1]["io_links_count"] = 1
    simd_base = 2147487744
    caches = [
        {"processor_id_low": simd_base, "size": 4096, "level": 2, "cache_line_size": 128,
         "cache_lines_per_tag": 1, "association": 16, "latency": 1,
         "type": {"Data": 1, "Instruction": 0, "CPU": 0, "HSACU": 1}},
        {"processor_id_low": simd_base, "size": 131072, "level": 3, "cache_line_size": 64,
         "cache_lines_per_tag": 1, "association": 16, "latency": 1,
         "type": {"Data": 1, "Instruction": 0, "CPU": 0, "HSACU": 1}},
    ]
    out.append({
        "size": 448, "id": {"handle": AGENT_HANDLE_OFFSET + GPU_NODE}, "type": 2,
        "cpu_cores_count": 0, "simd_count": 1216, "mem_banks_count": 1, "caches_count": len(caches),
        "io_links_count": 1, "cpu_core_id_base": 0, "simd_id_base": simd_base, "max_waves_per_simd": 8,
        "lds_size_in_kb": 64, "gds_size_in_kb": 0, "num_gws": 64, "wave_front_size": 64, "num_xcc": N_XCC,
        "cu_count": 304, "array_count": 32, "num_shader_banks": 32, "simd_arrays_per_engine": 1,
        "cu_per_simd_array": 10, "simd_per_cu": 4, "max_slots_scratch_cu": 32,
        "gfx_target_version": 90402, "vendor_id": 4098, "device_id": 29857, "location_id": 3072,
        "domain": 0, "drm_render_minor": 128, "num_sdma_engines": 2, "num_sdma_xgmi_engines": 14,
        "num_sdma_queues_per_engine": 8, "num_cp_queues": 24, "max_engine_clk_ccompute": 2400,
        "max_engine_clk_fcompute": GPU_CLOCK_MHZ,
        "sdma_fw_version": {"uCodeSDMA": 22, "uCodeRes": 0},
        "fw_version": {"uCode": 166, "Major": 0, "Minor": 0, "Stepping": 0},
        "capability": {n: _GPU_CAPS.get(n, 0) for n in _CAP_NAMES},
        "cu_per_engine": 9, "max_waves_per_cu": 32, "family_id": 141, "workgroup_max_size": 1024,
        "grid_max_size": 4294967295, "local_mem_size": 0, "hive_id": 0, "gpu_id": 41877,
        "workgroup_max_dim": {"x": 1024, "y": 1024, "z": 1024},
        "grid_max_dim": {"x": 2147483647, "y": 65535, "z": 65535},
        "name": GPU_ARCH, "vendor_name": "AMD", "product_name": GPU_PRODUCT, "model_name": "ip discovery",
        "node_id": GPU_NODE, "logical_node_id": GPU_NODE, "logical_node_type_id": HIP_DEVICE,
        "runtime_visibility": {"hsa": 1, "hip": 1, "rccl": 1, "rocdecode": 1},
        "uuid": {"bytes": [83, 43, 17, 200, 9, 145, 62, 7, 0, 0, 0, 0, 0, 0, 0, 0]},
        "mem_banks": [{"heap_type": 1, "flags": {"HotPluggable": 0, "NonVolatile": 0}, "width": 8192,
                       "mem_clk_max": 1300, "size_in_bytes": 206141652992}],
        "caches": caches,
        "io_links": [_io_link(GPU_NODE, 0, 2, 20, (312, 64000))],
        "gpu_index": HIP_DEVICE,
    })
    return out


def _agent_json(agent: dict[str, Any]) -> dict[str, Any]:
    """The JSON writer's form: ``capability`` gains the ``Reserved`` field the schema requires."""
    a: dict[str, Any] = json.loads(json.dumps(agent))
    a["capability"]["Reserved"] = 0
    return a


def _dumps(obj: Any) -> str:
    """JSON as rocprofiler-sdk puts it in rocpd ``extdata`` columns (``,`` then ``: ``)."""
    return json.dumps(obj, separators=(",", ": "))


def run_uuid(init_ns: int, seed: int = SEED) -> str:
    """A UUIDv7 from the process start (ms of the boot clock) and seeded random bits, as the SDK's
    ``uuid_v7.cpp`` makes it."""
    rng = random.Random(seed ^ 0x5EED)
    ms = init_ns // 1_000_000
    rand_a = rng.getrandbits(12)
    rand_b = rng.getrandbits(62)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def machine_id() -> str:
    return hashlib.sha256(f"tracekit-amd-synthetic-{HOSTNAME}".encode()).hexdigest()[:32]


COMMAND = ("python3", "decode_bench.py", "--model", "llama-3.1-8b-fp8-2layer-synthetic", "--batch-size", "4",
           "--decode-steps", str(N_STEPS))
ENVIRONMENT = {
    "HOME": "/root", "HOSTNAME": HOSTNAME, "PATH": "/opt/venv/bin:/opt/rocm-7.0.0/bin:/usr/bin:/bin",
    "PWD": "/workspace", "ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0",
}


def tool_config() -> dict[str, Any]:
    """rocprofv3's configuration record (``metadata.config`` in JSON, process extdata in rocpd)."""
    cfg: dict[str, Any] = {
        "benchmark_mode": "", "kernel_trace": True, "hsa_core_api_trace": False,
        "hsa_amd_ext_api_trace": False, "hsa_image_ext_api_trace": False,
        "hsa_finalizer_ext_api_trace": False, "marker_api_trace": True, "memory_copy_trace": True,
        "memory_allocation_trace": True, "scratch_memory_trace": True, "counter_collection": True,
        "hip_runtime_api_trace": True, "hip_compiler_api_trace": False, "rccl_api_trace": True,
        "rocdecode_api_trace": False, "rocjpeg_api_trace": False, "mpi_rank": -1, "mpi_size": -1,
        "collection_periods": [], "counters": [sorted(COUNTERS)], "extra_counters_contents": "",
        "kernel_filter_include": ".*", "kernel_filter_exclude": "", "kernel_filter_range": [],
        "demangle": True, "truncate": False, "minimum_output_bytes": 0, "enable_signal_handlers": True,
        "selected_regions": False, "counter_groups_random_seed": 0, "counter_groups_interval": 1,
        "pc_sampling_host_trap": False, "pc_sampling_stochastic": False, "pc_sampling_method": "none",
        "pc_sampling_unit": "none", "pc_sampling_interval": 1, "pc_sampling_method_value": 0,
        "pc_sampling_unit_value": 0, "advanced_thread_trace": False, "att_serialize_all": False,
        "att_param_shader_engine_mask": 1, "att_param_buffer_size": 268435456,
        "att_param_simd_select": 15, "att_param_target_cu": 1, "att_library_path": "",
        "att_param_perfcounters": [], "att_param_perf_ctrl": 0, "output_path": "/workspace/prof",
        "output_file": str(PID), "tmp_directory": "/workspace/prof", "raw_output_path": "/workspace/prof",
        "raw_output_file": "%pid%", "raw_tmp_directory": "%cwd%", "perfetto_shmem_size_hint": 64,
        "perfetto_buffer_size": 1048576, "perfetto_buffer_fill_policy": "discard",
        "perfetto_backend": "inprocess", "summary": False, "summary_per_domain": False,
        "summary_groups": [], "summary_unit": "nsec", "summary_file": "stderr", "csv_output": True,
        "json_output": True, "pftrace_output": False, "otf2_output": False, "summary_output": False,
        "rocpd_output": True, "kernel_rename": False, "group_by_queue": False,
    }
    return cfg


def _code_object_base(co_id: int) -> int:
    return CODE_OBJECT_BASE + CODE_OBJECT_STRIDE * co_id


def _kernel_object(w: Workload, k: KernelSymbol) -> int:
    return _code_object_base(k.code_object) + 0x4_0000 + 0x1000 * w.kernel_id(k)


def _instance_id(counter: str, index: int) -> int:
    return COUNTERS[counter] << 48 | index << DIMENSION_SHIFT[COUNTER_DIMENSION[counter]]


# --------------------------------------------------------------------------------------------------
# 1. rocpd SQLite (schema 3)
# --------------------------------------------------------------------------------------------------


def write_rocpd(w: Workload, path: Path) -> None:
    """``<pid>_results.db`` as rocprofv3 ``--output-format rocpd`` writes it (generateRocpd.cpp)."""
    guid = run_uuid(w.init_ns)
    uuid = "_" + guid.replace("-", "_")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {ROCPD_PAGE_SIZE}")
    con.execute("PRAGMA foreign_keys = ON")  # as the SDK's rocpd_tables.sql does
    for ddl in ROCPD_DDL:
        con.execute(ddl.replace("{{uuid}}", uuid).replace("{{guid}}", guid))

    def table(name: str) -> str:
        return f'"rocpd_{name}{uuid}"'

    def insert(name: str, cols: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        all_cols = ["guid", *cols]
        quoted = ", ".join(f'"{c}"' for c in all_cols)
        sql = f"INSERT INTO {table(name)} ({quoted}) VALUES ({', '.join('?' * len(all_cols))})"
        con.executemany(sql, [(guid, *r) for r in rows])

    ag = agents()
    node_digest = hashlib.sha256(machine_id().encode()).digest()
    nid = int.from_bytes(node_digest[:4], "little")
    node_hash = int.from_bytes(node_digest[4:12], "little") & ((1 << 63) - 1)

    strings = {"", "HIP_RUNTIME_API_EXT", "KERNEL_DISPATCH", "MARKER_CORE_RANGE_API", "MEMORY_COPY",
               "KERNEL_DISPATCH_COMPLETE", "MEMORY_COPY_HOST_TO_DEVICE", "roctxThreadRangeA",
               CPU_NAME, GPU_PRODUCT, GPU_ARCH, "AMD", "CPU", "ip discovery", *COUNTERS, *DIMENSIONS}
    strings.update(c.function for c in w.calls)
    strings.update(m.message for m in w.markers)
    for k in w.kernels:
        strings.update((k.symbol, k.formatted, k.truncated))
    sid = {s: i for i, s in enumerate(sorted(strings), start=1)}  # row 1 is ""

    con.executemany(f"INSERT INTO {table('metadata')} (tag, value) VALUES (?, ?)",
                    [("schema_version", "3"), ("uuid", uuid), ("guid", guid)])
    insert("string", ["id", "string"], [(i, s) for s, i in sid.items()])
    insert("info_node", ["id", "hash", "machine_id", "system_name", "hostname", "release", "version",
                         "hardware_name", "domain_name"],
           [(nid, node_hash, machine_id(), "Linux", HOSTNAME, "6.8.0-60-generic",
             "#63~22.04.1-Ubuntu SMP PREEMPT_DYNAMIC Tue Apr 22 19:00:15 UTC 2", "x86_64", "(none)")])
    insert("info_process", ["id", "nid", "ppid", "pid", "init", "fini", "start", "end", "command",
                            "environment", "extdata"],
           [(PID, nid, PPID, PID, w.init_ns, w.fini_ns, w.init_ns, w.fini_ns, " ".join(COMMAND),
             _dumps(ENVIRONMENT), _dumps(tool_config()))])
    insert("info_thread", ["id", "nid", "ppid", "pid", "tid", "name", "start", "end", "extdata"],
           [(PID, nid, PPID, PID, PID, None, None, None, "{}")])
    insert("info_agent", ["id", "nid", "pid", "type", "absolute_index", "logical_index", "type_index",
                          "uuid", "name", "model_name", "vendor_name", "product_name", "user_name",
                          "extdata"],
           [(a["node_id"], nid, PID, "GPU" if a["type"] == 2 else "CPU", a["node_id"], a["logical_node_id"],
             a["logical_node_type_id"], a["device_id"], a["name"], a["model_name"], a["vendor_name"],
             a["product_name"], a["product_name"], _dumps(a)) for a in ag])
    insert("info_queue", ["id", "nid", "pid", "name", "extdata"],
           [(0, nid, PID, "Default Queue", "{}"), (QUEUE_ID, nid, PID, "Queue 0", "{}")])
    insert("info_stream", ["id", "nid", "pid", "name", "extdata"], [(STREAM_ID, nid, PID,
                                                                     "Default Stream", "{}")])
    insert("info_pmc", ["id", "nid", "pid", "agent_id", "target_arch", "event_code", "instance_id", "name",
                        "symbol", "description", "long_description", "component", "units", "value_type",
                        "block", "expression", "is_constant", "is_derived", "extdata"],
           [(cid, nid, PID, GPU_NODE, "GPU", None, None, name, name, COUNTER_DESCRIPTION[name], "",
             "rocm", "",
             "ABS", COUNTER_BLOCK[name], "", 0, 0, "{}") for name, cid in sorted(COUNTERS.items())])
    insert("info_code_object", ["id", "nid", "pid", "agent_id", "uri", "load_base", "load_size", "load_delta",
                                "storage_type", "extdata"],
           [(co, nid, PID, GPU_NODE, uri, _code_object_base(co), size, _code_object_base(co), None,
             _dumps(_code_object_record(co, uri, size)))
            for co, uri, size in CODE_OBJECTS])
    insert("info_kernel_symbol", ["id", "nid", "pid", "code_object_id", "kernel_name", "display_name",
                                  "kernel_object", "kernarg_segment_size", "kernarg_segment_alignment",
                                  "group_segment_size", "private_segment_size", "sgpr_count",
                                  "arch_vgpr_count", "accum_vgpr_count", "extdata"],
           [(w.kernel_id(k), nid, PID, k.code_object, k.symbol, k.formatted, _kernel_object(w, k),
             k.kernarg, 8,
             k.static_lds, k.private, k.sgpr, k.vgpr, k.agpr, _dumps(_kernel_symbol_record(w, k)))
            for k in w.kernels])

    event_cols = ["id", "category_id", "stack_id", "parent_stack_id", "correlation_id", "call_stack",
                  "line_info", "extdata"]
    region_cols = ["id", "nid", "pid", "tid", "start", "end", "name_id", "event_id", "extdata"]
    event_id = 0
    events: list[tuple[Any, ...]] = []
    regions: list[tuple[Any, ...]] = []
    for c in sorted(w.calls, key=lambda c: c.corr):  # HIP API first, then markers (writer order)
        event_id += 1
        events.append((event_id, sid["HIP_RUNTIME_API_EXT"], c.corr, 0, 0, "{}", "{}", "{}"))
        regions.append((c.corr, nid, PID, PID, c.start, c.end, sid[c.function], event_id, "{}"))
    for m in sorted(w.markers, key=lambda m: m.corr):
        event_id += 1
        events.append((event_id, sid["MARKER_CORE_RANGE_API"], m.corr, 0, 0, "{}", "{}",
                       _dumps({"message": m.message})))
        regions.append((m.corr, nid, PID, PID, m.start, m.end, sid["roctxThreadRangeA"], event_id, "{}"))
    dispatch_rows: list[tuple[Any, ...]] = []
    pmc_rows: list[tuple[Any, ...]] = []
    for d in w.dispatches:
        event_id += 1
        events.append((event_id, sid["KERNEL_DISPATCH"], d.corr, d.corr, 0, "{}", "{}", "{}"))
        dispatch_rows.append((d.dispatch_id, nid, PID, PID, GPU_NODE, d.kernel_id, d.dispatch_id, QUEUE_ID,
                              STREAM_ID, d.start, d.end, d.kernel.private, d.kernel.static_lds, *d.workgroup,
                              *d.grid, sid[""], event_id, "{}"))
        for name in COUNTER_RECORD_ORDER:
            pmc_rows.extend((event_id, COUNTERS[name], v, "{}") for v in d.counters[name])
    copy_rows: list[tuple[Any, ...]] = []
    for cp in w.copies:
        event_id += 1
        events.append((event_id, sid["MEMORY_COPY"], cp.corr, cp.corr, 0, "{}", "{}", "{}"))
        copy_rows.append((cp.copy_id, nid, PID, PID, cp.start, cp.end, sid["MEMORY_COPY_HOST_TO_DEVICE"],
                          GPU_NODE, cp.dst, CPU_NODES[0], cp.src, cp.size, None, STREAM_ID, None, event_id,
                          "{}"))
    insert("event", event_cols, events)
    insert("region", region_cols, regions)
    insert("kernel_dispatch", ["id", "nid", "pid", "tid", "agent_id", "kernel_id", "dispatch_id", "queue_id",
                               "stream_id", "start", "end", "private_segment_size", "group_segment_size",
                               "workgroup_size_x", "workgroup_size_y", "workgroup_size_z", "grid_size_x",
                               "grid_size_y", "grid_size_z", "region_name_id", "event_id", "extdata"],
           dispatch_rows)
    insert("pmc_event", ["event_id", "pmc_id", "value", "extdata"], pmc_rows)
    insert("memory_copy", ["id", "nid", "pid", "tid", "start", "end", "name_id", "dst_agent_id",
                           "dst_address", "src_agent_id", "src_address", "size", "queue_id", "stream_id",
                           "region_name_id", "event_id", "extdata"], copy_rows)
    con.commit()
    con.execute("VACUUM")
    con.close()


#: Order of the counters inside one dispatch's records (JSON ``records``, rocpd ``pmc_event`` rows).
COUNTER_RECORD_ORDER = ("SQ_WAVES", "GRBM_GUI_ACTIVE")


def _code_object_record(co: int, uri: str, size: int) -> dict[str, Any]:
    return {
        "size": 88, "code_object_id": co, "agent_id": {"handle": AGENT_HANDLE_OFFSET + GPU_NODE}, "uri": uri,
        "load_base": _code_object_base(co), "load_size": size, "load_delta": _code_object_base(co),
        "storage_type": 1, "storage_file": 36 + co,
    }


def _kernel_symbol_record(w: Workload, k: KernelSymbol) -> dict[str, Any]:
    obj = _kernel_object(w, k)
    return {
        "size": 88, "kernel_id": w.kernel_id(k), "code_object_id": k.code_object, "kernel_name": k.symbol,
        "kernel_object": obj, "kernarg_segment_size": k.kernarg, "kernarg_segment_alignment": 8,
        "group_segment_size": k.static_lds, "private_segment_size": k.private, "sgpr_count": k.sgpr,
        "arch_vgpr_count": k.vgpr, "accum_vgpr_count": k.agpr,
        "kernel_code_entry_byte_offset": k.entry_offset,
        "kernel_address": {"handle": obj + k.entry_offset}, "formatted_kernel_name": k.formatted,
        "demangled_kernel_name": k.demangled, "truncated_kernel_name": k.truncated,
    }


# --------------------------------------------------------------------------------------------------
# 2. rocprofv3 CSV
# --------------------------------------------------------------------------------------------------

#: Header lines exactly as rocprofv3 1.0 (ROCm 7.0) writes them (copied from the corpus CSV folder).
CSV_HEADERS: dict[str, str] = {
    "kernel_trace": '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id",'
                    '"Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size",'
                    '"Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X",'
                    '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"',
    "memory_copy_trace": '"Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id",'
                         '"Correlation_Id","Start_Timestamp","End_Timestamp"',
    "hip_api_trace": '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp",'
                     '"End_Timestamp"',
    "marker_api_trace": '"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp",'
                        '"End_Timestamp"',
    "counter_collection": '"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id",'
                          '"Grid_Size","Kernel_Id","Kernel_Name","Workgroup_Size","LDS_Block_Size",'
                          '"Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count","Counter_Name",'
                          '"Counter_Value","Start_Timestamp","End_Timestamp"',
    "agent_info": '"Node_Id","Logical_Node_Id","Agent_Type","Cpu_Cores_Count","Simd_Count",'
                  '"Cpu_Core_Id_Base","Simd_Id_Base","Max_Waves_Per_Simd","Lds_Size_In_Kb","Gds_Size_In_Kb",'
                  '"Num_Gws","Wave_Front_Size","Num_Xcc","Cu_Count","Array_Count","Num_Shader_Banks",'
                  '"Simd_Arrays_Per_Engine","Cu_Per_Simd_Array","Simd_Per_Cu","Max_Slots_Scratch_Cu",'
                  '"Gfx_Target_Version","Vendor_Id","Device_Id","Location_Id","Domain","Drm_Render_Minor",'
                  '"Num_Sdma_Engines","Num_Sdma_Xgmi_Engines","Num_Sdma_Queues_Per_Engine","Num_Cp_Queues",'
                  '"Max_Engine_Clk_Ccompute","Max_Engine_Clk_Fcompute","Sdma_Fw_Version","Fw_Version",'
                  '"Capability","Cu_Per_Engine","Max_Waves_Per_Cu","Family_Id","Workgroup_Max_Size",'
                  '"Grid_Max_Size","Local_Mem_Size","Hive_Id","Gpu_Id","Workgroup_Max_Dim_X",'
                  '"Workgroup_Max_Dim_Y","Workgroup_Max_Dim_Z","Grid_Max_Dim_X","Grid_Max_Dim_Y",'
                  '"Grid_Max_Dim_Z","Name","Vendor_Name","Product_Name","Model_Name"',
}


def _csv_field(v: object) -> str:
    """rocprofv3's CSV quoting: strings double-quoted, integers bare, floats ``%.6f`` (``%.8e`` < 1)."""
    if isinstance(v, str):
        return '"' + v.replace('"', '""') + '"'
    if isinstance(v, float):
        return f"{v:.6f}" if abs(v) >= 1 else f"{v:.8e}"
    return str(v)


def _agent_label(node: int) -> str:
    return f"Agent {node}"


def _agent_info_row(a: dict[str, Any]) -> list[object]:
    special: dict[str, object] = {
        "Agent_Type": "GPU" if a["type"] == 2 else "CPU",
        "Sdma_Fw_Version": a["sdma_fw_version"]["uCodeSDMA"],
        "Fw_Version": a["fw_version"]["uCode"],
        "Capability": _GPU_CAPABILITY_BITS if a["type"] == 2 else 0,
        "Workgroup_Max_Dim_X": a["workgroup_max_dim"]["x"],
        "Workgroup_Max_Dim_Y": a["workgroup_max_dim"]["y"],
        "Workgroup_Max_Dim_Z": a["workgroup_max_dim"]["z"], "Grid_Max_Dim_X": a["grid_max_dim"]["x"],
        "Grid_Max_Dim_Y": a["grid_max_dim"]["y"], "Grid_Max_Dim_Z": a["grid_max_dim"]["z"],
    }
    row: list[object] = []
    for col in CSV_HEADERS["agent_info"].replace('"', "").split(","):
        row.append(special[col] if col in special else a[col.lower()])
    return row


def write_csv(w: Workload, outdir: Path) -> list[Path]:
    """The six ``<pid>_*.csv`` files of ``rocprofv3 --output-format csv``."""
    outdir.mkdir(parents=True, exist_ok=True)
    gpu = _agent_label(GPU_NODE)
    tables: dict[str, list[list[object]]] = {
        "kernel_trace": [
            ["KERNEL_DISPATCH", gpu, QUEUE_ID, STREAM_ID, PID, d.dispatch_id, d.kernel_id, d.kernel.formatted,
             d.corr, d.start, d.end, d.lds_block, d.kernel.private, d.kernel.vgpr, d.kernel.agpr,
             d.kernel.sgpr,
             *d.workgroup, *d.grid]
            for d in sorted(w.dispatches, key=lambda d: d.end)
        ],
        "memory_copy_trace": [
            ["MEMORY_COPY", "MEMORY_COPY_HOST_TO_DEVICE", STREAM_ID, _agent_label(CPU_NODES[0]), gpu, c.corr,
             c.start, c.end]
            for c in sorted(w.copies, key=lambda c: c.end)
        ],
        "hip_api_trace": [
            ["HIP_RUNTIME_API_EXT", c.function, PID, PID, c.corr, c.start, c.end]
            for c in sorted(w.calls, key=lambda c: c.end)
        ],
        "marker_api_trace": [
            ["MARKER_CORE_RANGE_API", m.message, PID, PID, m.corr, m.start, m.end]
            for m in sorted(w.markers, key=lambda m: m.end)
        ],
        "counter_collection": [
            [d.corr, d.dispatch_id, gpu, QUEUE_ID, PID, PID, d.grid_items, d.kernel_id, d.kernel.formatted,
             d.workgroup_items, d.lds_block, d.kernel.private, d.kernel.vgpr, d.kernel.agpr, d.kernel.sgpr,
             name, float(sum(d.counters[name])), d.start, d.end]
            for d in sorted(w.dispatches, key=lambda d: d.end)
            for name in sorted(COUNTERS)
        ],
        "agent_info": [_agent_info_row(a) for a in agents()],
    }
    paths = []
    for name, rows in tables.items():
        p = outdir / f"{PID}_{name}.csv"
        lines = [CSV_HEADERS[name]] + [",".join(_csv_field(v) for v in r) for r in rows]
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(p)
    return paths


# --------------------------------------------------------------------------------------------------
# 3. rocprofv3 JSON
# --------------------------------------------------------------------------------------------------


def _kind(name: str) -> int:
    return BUFFER_KINDS.index(name)


def _dispatch_info(d: Dispatch) -> dict[str, Any]:
    return {
        "size": 72, "agent_id": {"handle": AGENT_HANDLE_OFFSET + GPU_NODE}, "queue_id": {"handle": QUEUE_ID},
        "kernel_id": d.kernel_id, "dispatch_id": d.dispatch_id, "private_segment_size": d.kernel.private,
        "group_segment_size": d.kernel.static_lds,
        "workgroup_size": dict(zip("xyz", d.workgroup)), "grid_size": dict(zip("xyz", d.grid)),
    }


def json_document(w: Workload) -> dict[str, Any]:
    """The ``<pid>_results.json`` document (key order as generateJSON.cpp writes it)."""
    gpu_handle = AGENT_HANDLE_OFFSET + GPU_NODE
    ops_by_kind: dict[str, Sequence[str]] = {"HIP_RUNTIME_API_EXT": HIP_RUNTIME_OPS, **KIND_OPS}
    counters = []
    for name in sorted(COUNTERS):
        dim = COUNTER_DIMENSION[name]
        dim_id, size = DIMENSIONS[dim]
        counters.append({
            "agent_id": {"handle": gpu_handle}, "id": {"handle": COUNTERS[name]}, "is_constant": 0,
            "is_derived": 0, "name": name, "description": COUNTER_DESCRIPTION[name],
            "block": COUNTER_BLOCK[name],
            "expression": "", "dimensions": [{"id": dim_id, "instance_size": size, "name": dim}],
            "instances": [{"instance_id": _instance_id(name, i), "counter_id": COUNTERS[name],
                           "dimensions": [{"dimension_name": dim, "index": i}]} for i in range(size)],
            "dimension_ids": [dim_id],
        })
    code_objects: list[dict[str, Any]] = [{
        "size": 0, "code_object_id": 0, "agent_id": {"handle": 0}, "uri": "", "load_base": 0, "load_size": 0,
        "load_delta": 0, "storage_type": 0, "rocp_agent": {"handle": 0}, "hsa_agent": {"handle": 0},
        "memory_base": 0, "memory_size": 0,
    }]
    for co, uri, size in CODE_OBJECTS:
        rec = _code_object_record(co, uri, size)
        rec.update({"rocp_agent": {"handle": gpu_handle},
                    "hsa_agent": {"handle": 0x55E1_C7B0_0000 + GPU_NODE},
                    "memory_base": 0, "memory_size": 0})
        code_objects.append(rec)
    kernel_symbols: list[dict[str, Any]] = [{
        "size": 0, "kernel_id": 0, "code_object_id": 0, "kernel_name": "", "kernel_object": 0,
        "kernarg_segment_size": 0, "kernarg_segment_alignment": 0, "group_segment_size": 0,
        "private_segment_size": 0, "sgpr_count": 0, "arch_vgpr_count": 0, "accum_vgpr_count": 0,
        "kernel_code_entry_byte_offset": 0, "kernel_address": {"handle": 0}, "formatted_kernel_name": "0",
        "demangled_kernel_name": "0", "truncated_kernel_name": "0",
    }] + [_kernel_symbol_record(w, k) for k in w.kernels]
    zero3 = {"x": 0, "y": 0, "z": 0}
    host_functions = [{
        "size": 0, "host_function_id": 0, "kernel_id": 0, "code_object_id": 0, "host_function": {"handle": 0},
        "modules": {"handle": 0}, "device_function": "", "thread_limit": 0, "thread_ids": dict(zero3),
        "block_ids": dict(zero3), "block_dims": dict(zero3), "grid_dims": dict(zero3),
        "workgroup_size": dict(zero3), "formatted_host_function_name": "", "demangled_host_function_name": "",
        "truncated_host_function_name": "", "host_function_address": 0, "modules_address": 0,
        "thread_id_address": 0, "block_id_address": "0x0", "block_dim_address": "0x0",
        "grid_dim_address": "0x0", "workgroup_size_address": "0x0",
    }]
    by_end = sorted(w.dispatches, key=lambda d: d.end)
    tool = {
        "metadata": {
            "node": {"id": 0, "hash": 0, "machine_id": machine_id(), "system_name": "Linux",
                     "hostname": HOSTNAME, "release": "6.8.0-60-generic",
                     "version": "#63~22.04.1-Ubuntu SMP PREEMPT_DYNAMIC Tue Apr 22 19:00:15 UTC 2",
                     "hardware_name": "x86_64", "domain_name": "(none)"},
            "pid": PID, "init_time": w.init_ns, "fini_time": w.fini_ns, "command": list(COMMAND),
            "config": tool_config(),
        },
        "agents": [_agent_json(a) for a in agents()],
        "counters": counters,
        "strings": {
            "callback_records": [{"kind": k, "operations": []} for k in CALLBACK_KINDS],
            "buffer_records": [{"kind": k, "operations": list(ops_by_kind.get(k, ()))} for k in BUFFER_KINDS],
            "marker_api": [{"key": m.corr, "value": m.message} for m in w.markers],
            "correlation_id": {"external": []},
            "counters": {"dimension_ids": [
                {"id": i, "instance_size": n, "name": name}
                for name, (i, n) in sorted(DIMENSIONS.items(), key=lambda x: x[1])
            ]},
            "pc_sample_instructions": [], "pc_sample_comments": [], "att_filenames": [],
            "code_object_snapshot_filenames": [],
        },
        "code_objects": code_objects,
        "kernel_symbols": kernel_symbols,
        "host_functions": host_functions,
        "summary": [],
        "callback_records": {
            "counter_collection": [{
                "thread_id": PID,
                "dispatch_data": {"size": 168, "correlation_id": {"internal": d.corr, "external": 0},
                                  "start_timestamp": d.start, "end_timestamp": d.end,
                                  "dispatch_info": _dispatch_info(d)},
                "records": [{"counter_id": {"handle": COUNTERS[name]}, "value": v}
                            for name in COUNTER_RECORD_ORDER for v in d.counters[name]],
                "stream_id": {"handle": STREAM_ID}, "arch_vgpr_count": d.kernel.vgpr,
                "sgpr_count": d.kernel.sgpr,
                "lds_block_size_v": d.lds_block,
            } for d in by_end],
        },
        "buffer_records": {
            "kernel_dispatch": [{
                "size": 184, "kind": _kind("KERNEL_DISPATCH"),
                "operation": KIND_OPS["KERNEL_DISPATCH"].index("KERNEL_DISPATCH_COMPLETE"), "thread_id": PID,
                "correlation_id": {"internal": d.corr, "external": 0}, "start_timestamp": d.start,
                "end_timestamp": d.end, "dispatch_info": _dispatch_info(d),
                "stream_id": {"handle": STREAM_ID},
            } for d in by_end],
            "hip_api": [{
                "size": 248, "kind": _kind("HIP_RUNTIME_API_EXT"),
                "operation": HIP_RUNTIME_OPS.index(c.function),
                "correlation_id": {"internal": c.corr, "external": 0, "ancestor": 0},
                "start_timestamp": c.start,
                "end_timestamp": c.end, "thread_id": PID, "retval": {"uint64_t_retval": 0},
                "stream_id": {"handle": STREAM_ID},
            } for c in sorted(w.calls, key=lambda c: c.end)],
            "hsa_api": [],
            "marker_api": [{
                "size": 64, "kind": _kind("MARKER_CORE_RANGE_API"),
                "operation": KIND_OPS["MARKER_CORE_RANGE_API"].index("roctxThreadRangeA"),
                "correlation_id": {"internal": m.corr, "external": 0, "ancestor": 0},
                "start_timestamp": m.start,
                "end_timestamp": m.end, "thread_id": PID,
            } for m in sorted(w.markers, key=lambda m: m.end)],
            "rccl_api": [],
            "memory_copy": [{
                "size": 96, "kind": _kind("MEMORY_COPY"),
                "operation": KIND_OPS["MEMORY_COPY"].index("MEMORY_COPY_HOST_TO_DEVICE"), "thread_id": PID,
                "correlation_id": {"internal": c.corr, "external": 0}, "start_timestamp": c.start,
                "end_timestamp": c.end, "dst_agent_id": {"handle": gpu_handle},
                "src_agent_id": {"handle": AGENT_HANDLE_OFFSET + CPU_NODES[0]}, "bytes": c.size,
                "stream_id": {"handle": STREAM_ID},
            } for c in sorted(w.copies, key=lambda c: c.end)],
            "memory_allocation": [], "scratch_memory": [], "rocdecode_api": [], "rocjpeg_api": [],
            "pc_sample_host_trap": [], "pc_sample_stochastic": [],
        },
    }
    return {"rocprofiler-sdk-tool": [tool]}


def write_json(w: Workload, path: Path) -> None:
    """``<pid>_results.json``; one value per line like the tool's cereal writer (indent 0)."""
    path.write_text(json.dumps(json_document(w), indent=0) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# 4. RPD (rocmProfileData, schema 2)
# --------------------------------------------------------------------------------------------------


def write_rpd(w: Workload, path: Path) -> None:
    """An ``rpd_tracer`` trace of the same run (rocpd_api/rocpd_op/rocpd_api_ops/... tables)."""
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    for ddl in RPD_DDL:
        con.execute(ddl)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    sid("")  # id 1
    con.executemany("INSERT INTO rocpd_metadata (tag, value) VALUES (?, ?)",
                    [("schema_version", "2"), ("session_count", "1"),
                     ("resourceLock::smi_logger_active", "0")])
    host: list[tuple[int, ApiCall | Marker]] = sorted(
        [(c.start, c) for c in w.calls] + [(m.start, m) for m in w.markers], key=lambda x: (x[0], x[1].corr))
    api_id: dict[int, int] = {}  # correlation id -> rocpd_api.id
    api_rows: list[tuple[Any, ...]] = []
    for i, (_, call) in enumerate(host, start=1):
        api_id[call.corr] = i
        if isinstance(call, Marker):
            api_rows.append((i, PID, PID, call.start, call.end, sid("UserMarker"), sid(call.message)))
        else:
            api_rows.append((i, PID, PID, call.start, call.end, sid(call.function), sid("")))
    device: list[tuple[int, Dispatch | Copy]] = sorted(
        [(d.start, d) for d in w.dispatches] + [(c.start, c) for c in w.copies], key=lambda x: x[0])
    op_rows: list[tuple[Any, ...]] = []
    api_ops: list[tuple[int, int, int]] = []
    kernel_rows: list[tuple[Any, ...]] = []
    copy_rows: list[tuple[Any, ...]] = []
    by_corr = {c.corr: c for c in w.calls}
    for i, (_, rec) in enumerate(device, start=1):
        if isinstance(rec, Dispatch):
            op_rows.append((i, HIP_DEVICE, 0, 0, "", rec.start, rec.end, sid(rec.kernel.formatted),
                            sid("KernelExecution")))
            kernel_rows.append((api_id[rec.corr], "0x0", *rec.workgroups, *rec.workgroup, 0, 0,
                                "", "", "", "", sid(rec.kernel.formatted)))
        else:
            op_rows.append((i, HIP_DEVICE, 0, 0, "", rec.start, rec.end, sid(""), sid("CopyHostToDevice")))
            copy_rows.append((api_id[rec.corr], "0x0", rec.size, "", "", 1, _hex(rec.dst), _hex(rec.src),
                              0, 0, 0, 0))
        assert rec.corr in by_corr
        api_ops.append((len(api_ops) + 1, api_id[rec.corr], i))
    con.executemany("INSERT INTO rocpd_string (id, string) VALUES (?, ?)",
                    [(i, s) for s, i in strings.items()])
    con.executemany("INSERT INTO rocpd_api (id, pid, tid, start, end, apiName_id, args_id) "
                    "VALUES (?,?,?,?,?,?,?)", api_rows)
    con.executemany("INSERT INTO rocpd_op (id, gpuId, queueId, sequenceId, completionSignal, start, end, "
                    "description_id, opType_id) VALUES (?,?,?,?,?,?,?,?,?)", op_rows)
    con.executemany("INSERT INTO rocpd_api_ops (id, api_id, op_id) VALUES (?,?,?)", api_ops)
    con.executemany("INSERT INTO rocpd_kernelapi (api_ptr_id, stream, gridX, gridY, gridZ, workgroupX, "
                    "workgroupY, workgroupZ, groupSegmentSize, privateSegmentSize, kernelArgAddress, "
                    "aquireFence, releaseFence, codeObject_id, kernelName_id) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", kernel_rows)
    con.executemany("INSERT INTO rocpd_copyapi (api_ptr_id, stream, size, width, height, kind, dst, src, "
                    "dstDevice, srcDevice, sync, pinned) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", copy_rows)
    first = min(r[3] for r in api_rows)
    last = max(r[4] for r in api_rows)
    mid = (first + last) // 2
    con.executemany("INSERT INTO rocpd_monitor (deviceType, deviceId, monitorType, start, end, value) "
                    "VALUES (?,?,?,?,?,?)",
                    [("gpu", HIP_DEVICE, "sclk", first, mid, str(GPU_CLOCK_MHZ)),
                     ("gpu", HIP_DEVICE, "sclk", mid, last, str(GPU_CLOCK_MHZ))])
    con.commit()
    con.execute("VACUUM")
    con.close()


# --------------------------------------------------------------------------------------------------
# Expected totals
# --------------------------------------------------------------------------------------------------


def expected(w: Workload) -> dict[str, Any]:
    """What a reader of any of the four files must find (RPD: no counters, no agent properties)."""
    per_kernel: dict[str, dict[str, Any]] = {}
    for d in w.dispatches:
        e = per_kernel.setdefault(d.kernel.formatted, {
            "alias": d.kernel.alias, "count": 0, "total_ns": 0, "grids_workgroups": [],
            "workgroup": list(d.workgroup),
        })
        e["count"] += 1
        e["total_ns"] += d.end - d.start
        if list(d.workgroups) not in e["grids_workgroups"]:
            e["grids_workgroups"].append(list(d.workgroups))
    for e in per_kernel.values():
        e["grids_workgroups"].sort()
    counter_sums: dict[str, dict[str, float]] = defaultdict(dict)
    for d in w.dispatches:
        for name, vals in d.counters.items():
            sums = counter_sums[d.kernel.formatted]
            sums[name] = sums.get(name, 0.0) + sum(vals)
    functions: dict[str, int] = defaultdict(int)
    for c in w.calls:
        functions[c.function] += 1
    ag = agents()[-1]
    return {
        "synthetic": True,
        # the script's path when the committed file was written (now tools/), kept so regenerating
        # writes the same bytes
        "note": "SYNTHETIC: made up by sample_traces/make_amd_samples.py on the real schemas; not measured.",
        "seed": SEED,
        "files": {
            "rocpd": f"amd_synthetic_rocpd/{PID}_results.db",
            "rocprofv3_csv": "amd_synthetic_csv/",
            "rocprofv3_json": "amd_synthetic_results.json",
            "rpd": "amd_synthetic.rpd",
        },
        "process": {"pid": PID, "tid": PID, "host": HOSTNAME},
        "device": {
            "hip_index": HIP_DEVICE, "kfd_node": GPU_NODE, "csv_agent_id": _agent_label(GPU_NODE),
            "json_agent_handle": AGENT_HANDLE_OFFSET + GPU_NODE, "name": GPU_PRODUCT, "arch": GPU_ARCH,
            "compute_units": ag["cu_count"], "xcc_count": ag["num_xcc"], "simd_per_cu": ag["simd_per_cu"],
            "max_waves_per_cu": ag["max_waves_per_cu"], "wave_front_size": ag["wave_front_size"],
            "clock_mhz": ag["max_engine_clk_fcompute"], "memory_bytes": ag["mem_banks"][0]["size_in_bytes"],
        },
        "cpu_agents": len(CPU_NODES),
        "first_ns": min(min(c.start for c in w.calls), min(m.start for m in w.markers)),
        "last_ns": max(max(c.end for c in w.calls), max(m.end for m in w.markers),
                       max(d.end for d in w.dispatches)),
        "decode_steps": N_STEPS,
        "kernel_dispatches": len(w.dispatches),
        "distinct_kernels": len(per_kernel),
        "kernel_time_ns": sum(d.end - d.start for d in w.dispatches),
        "per_kernel": dict(sorted(per_kernel.items())),
        "kernel_launch_functions": {k.formatted: k.launch_api for k in w.kernels},
        "memory_copies": len(w.copies),
        "memory_copy_direction": "MEMORY_COPY_HOST_TO_DEVICE",
        "memory_copy_rpd_op_type": "CopyHostToDevice",
        "memory_copy_bytes": sum(c.size for c in w.copies),
        "memory_copy_time_ns": sum(c.end - c.start for c in w.copies),
        "memory_copy_list": [{"start_ns": c.start, "dur_ns": c.end - c.start,
                              "bytes": c.size} for c in w.copies],
        "hip_api_calls": len(w.calls),
        "hip_api_by_function": dict(sorted(functions.items())),
        "hip_api_time_ns": sum(c.end - c.start for c in w.calls),
        "launches_with_device_work": len(w.dispatches) + len(w.copies),
        "markers": len(w.markers),
        "marker_list": [{"message": m.message, "start_ns": m.start,
                         "dur_ns": m.end - m.start} for m in w.markers],
        "counters": {
            "names": sorted(COUNTERS),
            "ids": dict(sorted(COUNTERS.items())),
            "instances_per_dispatch": dict(sorted(COUNTER_INSTANCES.items())),
            "dispatches_with_counters": len(w.dispatches),
            "rows": len(w.dispatches) * len(COUNTERS),
            "rocpd_pmc_event_rows": len(w.dispatches) * sum(COUNTER_INSTANCES.values()),
            "total": {n: sum(sum(d.counters[n]) for d in w.dispatches) for n in sorted(COUNTERS)},
            "per_kernel": {k: dict(sorted(v.items())) for k, v in sorted(counter_sums.items())},
        },
    }


# --------------------------------------------------------------------------------------------------


def write_all(outdir: Path) -> dict[str, Path]:
    """Write the four formats and the expected totals under ``outdir``; return the paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    w = make_workload()
    paths = {
        "rocpd": outdir / "amd_synthetic_rocpd" / f"{PID}_results.db",
        "rocprofv3": outdir / "amd_synthetic_csv",
        "rocprofv3_json": outdir / "amd_synthetic_results.json",
        "rpd": outdir / "amd_synthetic.rpd",
        "expected": outdir / "amd_synthetic_expected.json",
    }
    write_rocpd(w, paths["rocpd"])
    write_csv(w, paths["rocprofv3"])
    write_json(w, paths["rocprofv3_json"])
    write_rpd(w, paths["rpd"])
    paths["expected"].write_text(json.dumps(expected(w), indent=1) + "\n", encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the SYNTHETIC AMD sample traces (4 formats + totals)")
    parser.add_argument("--outdir", type=Path, default=SAMPLES_DIR,
                        help="output directory (default: the repository's sample_traces/)")
    args = parser.parse_args(argv)
    paths = write_all(args.outdir)
    for key, p in paths.items():
        files = sorted(p.iterdir()) if p.is_dir() else [p]
        size = sum(f.stat().st_size for f in files)
        print(f"{key:15s} {p}  ({len(files)} file{'s' if len(files) > 1 else ''}, {size:,} bytes)")


# ==================================================================================================
# Embedded data
# ==================================================================================================

# The vendor DDL, read at run time from the data files beside this script (each with its licence):
# rocpd schema 3 (rocprofiler-sdk 1.0, ROCm 7.0) in rocpd_schema/, RPD schema_version 2
# (rocmProfileData) in rpd_schema/. The files say where the statements come from.
SCHEMA_DIR = Path(__file__).resolve().parent


def load_ddl(path: Path) -> tuple[str, ...]:
    """The statements of a DDL file, in file order: after the leading ``--`` header, each statement
    ends with ``;`` at the end of a line (no statement holds a ``;``), blank lines between them."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if not line.startswith("--"))
    return tuple(s.strip("\n") for s in "".join(lines[first:]).split(";\n") if s.strip())


ROCPD_DDL: tuple[str, ...] = load_ddl(SCHEMA_DIR / "rocpd_schema" / "rocpd_schema3.sql")
RPD_DDL: tuple[str, ...] = load_ddl(SCHEMA_DIR / "rpd_schema" / "rpd_schema2.sql")


# rocprofiler-sdk 1.0 enum names (rocprofiler_callback_tracing_kind_t, rocprofiler_buffer_tracing_kind_t
# and the HIP runtime API ids of hip/runtime_api_id.h), as its JSON writer lists them under
# ``strings``; a JSON record's ``kind``/``operation`` integers are positions in these lists. MIT licence.
CALLBACK_KINDS: tuple[str, ...] = (
    "NONE", "HSA_CORE_API", "HSA_AMD_EXT_API", "HSA_IMAGE_EXT_API", "HSA_FINALIZE_EXT_API",
    "HIP_RUNTIME_API", "HIP_COMPILER_API", "MARKER_CORE_API", "MARKER_CONTROL_API", "MARKER_NAME_API",
    "CODE_OBJECT", "SCRATCH_MEMORY", "KERNEL_DISPATCH", "MEMORY_COPY", "RCCL_API", "OMPT",
    "MEMORY_ALLOCATION", "RUNTIME_INITIALIZATION", "ROCDECODE_API", "ROCJPEG_API", "HIP_STREAM",
    "MARKER_CORE_RANGE_API",
)

BUFFER_KINDS: tuple[str, ...] = (
    "NONE", "HSA_CORE_API", "HSA_AMD_EXT_API", "HSA_IMAGE_EXT_API", "HSA_FINALIZE_EXT_API",
    "HIP_RUNTIME_API", "HIP_COMPILER_API", "MARKER_CORE_API", "MARKER_CONTROL_API", "MARKER_NAME_API",
    "MEMORY_COPY", "KERNEL_DISPATCH", "SCRATCH_MEMORY", "CORRELATION_ID_RETIREMENT", "RCCL_API", "OMPT",
    "MEMORY_ALLOCATION", "RUNTIME_INITIALIZATION", "ROCDECODE_API", "ROCJPEG_API", "HIP_STREAM",
    "HIP_RUNTIME_API_EXT", "HIP_COMPILER_API_EXT", "ROCDECODE_API_EXT", "KFD_EVENT_PAGE_MIGRATE",
    "KFD_EVENT_PAGE_FAULT", "KFD_EVENT_QUEUE", "KFD_EVENT_UNMAP_FROM_GPU", "KFD_EVENT_DROPPED_EVENTS",
    "KFD_PAGE_MIGRATE", "KFD_PAGE_FAULT", "KFD_QUEUE", "MARKER_CORE_RANGE_API",
)

HIP_RUNTIME_OPS: tuple[str, ...] = (
    "hipApiName", "hipArray3DCreate", "hipArray3DGetDescriptor", "hipArrayCreate", "hipArrayDestroy",
    "hipArrayGetDescriptor", "hipArrayGetInfo", "hipBindTexture", "hipBindTexture2D",
    "hipBindTextureToArray", "hipBindTextureToMipmappedArray", "hipChooseDevice", "hipChooseDeviceR0000",
    "hipConfigureCall", "hipCreateSurfaceObject", "hipCreateTextureObject", "hipCtxCreate",
    "hipCtxDestroy", "hipCtxDisablePeerAccess", "hipCtxEnablePeerAccess", "hipCtxGetApiVersion",
    "hipCtxGetCacheConfig", "hipCtxGetCurrent", "hipCtxGetDevice", "hipCtxGetFlags",
    "hipCtxGetSharedMemConfig", "hipCtxPopCurrent", "hipCtxPushCurrent", "hipCtxSetCacheConfig",
    "hipCtxSetCurrent", "hipCtxSetSharedMemConfig", "hipCtxSynchronize", "hipDestroyExternalMemory",
    "hipDestroyExternalSemaphore", "hipDestroySurfaceObject", "hipDestroyTextureObject",
    "hipDeviceCanAccessPeer", "hipDeviceComputeCapability", "hipDeviceDisablePeerAccess",
    "hipDeviceEnablePeerAccess", "hipDeviceGet", "hipDeviceGetAttribute", "hipDeviceGetByPCIBusId",
    "hipDeviceGetCacheConfig", "hipDeviceGetDefaultMemPool", "hipDeviceGetGraphMemAttribute",
    "hipDeviceGetLimit", "hipDeviceGetMemPool", "hipDeviceGetName", "hipDeviceGetP2PAttribute",
    "hipDeviceGetPCIBusId", "hipDeviceGetSharedMemConfig", "hipDeviceGetStreamPriorityRange",
    "hipDeviceGetUuid", "hipDeviceGraphMemTrim", "hipDevicePrimaryCtxGetState",
    "hipDevicePrimaryCtxRelease", "hipDevicePrimaryCtxReset", "hipDevicePrimaryCtxRetain",
    "hipDevicePrimaryCtxSetFlags", "hipDeviceReset", "hipDeviceSetCacheConfig",
    "hipDeviceSetGraphMemAttribute", "hipDeviceSetLimit", "hipDeviceSetMemPool",
    "hipDeviceSetSharedMemConfig", "hipDeviceSynchronize", "hipDeviceTotalMem", "hipDriverGetVersion",
    "hipDrvGetErrorName", "hipDrvGetErrorString", "hipDrvGraphAddMemcpyNode", "hipDrvMemcpy2DUnaligned",
    "hipDrvMemcpy3D", "hipDrvMemcpy3DAsync", "hipDrvPointerGetAttributes", "hipEventCreate",
    "hipEventCreateWithFlags", "hipEventDestroy", "hipEventElapsedTime", "hipEventQuery",
    "hipEventRecord", "hipEventSynchronize", "hipExtGetLinkTypeAndHopCount", "hipExtLaunchKernel",
    "hipExtLaunchMultiKernelMultiDevice", "hipExtMallocWithFlags", "hipExtStreamCreateWithCUMask",
    "hipExtStreamGetCUMask", "hipExternalMemoryGetMappedBuffer", "hipFree", "hipFreeArray",
    "hipFreeAsync", "hipFreeHost", "hipFreeMipmappedArray", "hipFuncGetAttribute", "hipFuncGetAttributes",
    "hipFuncSetAttribute", "hipFuncSetCacheConfig", "hipFuncSetSharedMemConfig", "hipGLGetDevices",
    "hipGetChannelDesc", "hipGetDevice", "hipGetDeviceCount", "hipGetDeviceFlags",
    "hipGetDevicePropertiesR0600", "hipGetDevicePropertiesR0000", "hipGetErrorName", "hipGetErrorString",
    "hipGetLastError", "hipGetMipmappedArrayLevel", "hipGetSymbolAddress", "hipGetSymbolSize",
    "hipGetTextureAlignmentOffset", "hipGetTextureObjectResourceDesc",
    "hipGetTextureObjectResourceViewDesc", "hipGetTextureObjectTextureDesc", "hipGetTextureReference",
    "hipGraphAddChildGraphNode", "hipGraphAddDependencies", "hipGraphAddEmptyNode",
    "hipGraphAddEventRecordNode", "hipGraphAddEventWaitNode", "hipGraphAddHostNode",
    "hipGraphAddKernelNode", "hipGraphAddMemAllocNode", "hipGraphAddMemFreeNode", "hipGraphAddMemcpyNode",
    "hipGraphAddMemcpyNode1D", "hipGraphAddMemcpyNodeFromSymbol", "hipGraphAddMemcpyNodeToSymbol",
    "hipGraphAddMemsetNode", "hipGraphChildGraphNodeGetGraph", "hipGraphClone", "hipGraphCreate",
    "hipGraphDebugDotPrint", "hipGraphDestroy", "hipGraphDestroyNode", "hipGraphEventRecordNodeGetEvent",
    "hipGraphEventRecordNodeSetEvent", "hipGraphEventWaitNodeGetEvent", "hipGraphEventWaitNodeSetEvent",
    "hipGraphExecChildGraphNodeSetParams", "hipGraphExecDestroy", "hipGraphExecEventRecordNodeSetEvent",
    "hipGraphExecEventWaitNodeSetEvent", "hipGraphExecHostNodeSetParams",
    "hipGraphExecKernelNodeSetParams", "hipGraphExecMemcpyNodeSetParams",
    "hipGraphExecMemcpyNodeSetParams1D", "hipGraphExecMemcpyNodeSetParamsFromSymbol",
    "hipGraphExecMemcpyNodeSetParamsToSymbol", "hipGraphExecMemsetNodeSetParams", "hipGraphExecUpdate",
    "hipGraphGetEdges", "hipGraphGetNodes", "hipGraphGetRootNodes", "hipGraphHostNodeGetParams",
    "hipGraphHostNodeSetParams", "hipGraphInstantiate", "hipGraphInstantiateWithFlags",
    "hipGraphKernelNodeCopyAttributes", "hipGraphKernelNodeGetAttribute", "hipGraphKernelNodeGetParams",
    "hipGraphKernelNodeSetAttribute", "hipGraphKernelNodeSetParams", "hipGraphLaunch",
    "hipGraphMemAllocNodeGetParams", "hipGraphMemFreeNodeGetParams", "hipGraphMemcpyNodeGetParams",
    "hipGraphMemcpyNodeSetParams", "hipGraphMemcpyNodeSetParams1D",
    "hipGraphMemcpyNodeSetParamsFromSymbol", "hipGraphMemcpyNodeSetParamsToSymbol",
    "hipGraphMemsetNodeGetParams", "hipGraphMemsetNodeSetParams", "hipGraphNodeFindInClone",
    "hipGraphNodeGetDependencies", "hipGraphNodeGetDependentNodes", "hipGraphNodeGetEnabled",
    "hipGraphNodeGetType", "hipGraphNodeSetEnabled", "hipGraphReleaseUserObject",
    "hipGraphRemoveDependencies", "hipGraphRetainUserObject", "hipGraphUpload",
    "hipGraphicsGLRegisterBuffer", "hipGraphicsGLRegisterImage", "hipGraphicsMapResources",
    "hipGraphicsResourceGetMappedPointer", "hipGraphicsSubResourceGetMappedArray",
    "hipGraphicsUnmapResources", "hipGraphicsUnregisterResource", "hipHostAlloc", "hipHostFree",
    "hipHostGetDevicePointer", "hipHostGetFlags", "hipHostMalloc", "hipHostRegister", "hipHostUnregister",
    "hipImportExternalMemory", "hipImportExternalSemaphore", "hipInit", "hipIpcCloseMemHandle",
    "hipIpcGetEventHandle", "hipIpcGetMemHandle", "hipIpcOpenEventHandle", "hipIpcOpenMemHandle",
    "hipKernelNameRef", "hipKernelNameRefByPtr", "hipLaunchByPtr", "hipLaunchCooperativeKernel",
    "hipLaunchCooperativeKernelMultiDevice", "hipLaunchHostFunc", "hipLaunchKernel", "hipMalloc",
    "hipMalloc3D", "hipMalloc3DArray", "hipMallocArray", "hipMallocAsync", "hipMallocFromPoolAsync",
    "hipMallocHost", "hipMallocManaged", "hipMallocMipmappedArray", "hipMallocPitch", "hipMemAddressFree",
    "hipMemAddressReserve", "hipMemAdvise", "hipMemAllocHost", "hipMemAllocPitch", "hipMemCreate",
    "hipMemExportToShareableHandle", "hipMemGetAccess", "hipMemGetAddressRange",
    "hipMemGetAllocationGranularity", "hipMemGetAllocationPropertiesFromHandle", "hipMemGetInfo",
    "hipMemImportFromShareableHandle", "hipMemMap", "hipMemMapArrayAsync", "hipMemPoolCreate",
    "hipMemPoolDestroy", "hipMemPoolExportPointer", "hipMemPoolExportToShareableHandle",
    "hipMemPoolGetAccess", "hipMemPoolGetAttribute", "hipMemPoolImportFromShareableHandle",
    "hipMemPoolImportPointer", "hipMemPoolSetAccess", "hipMemPoolSetAttribute", "hipMemPoolTrimTo",
    "hipMemPrefetchAsync", "hipMemPtrGetInfo", "hipMemRangeGetAttribute", "hipMemRangeGetAttributes",
    "hipMemRelease", "hipMemRetainAllocationHandle", "hipMemSetAccess", "hipMemUnmap", "hipMemcpy",
    "hipMemcpy2D", "hipMemcpy2DAsync", "hipMemcpy2DFromArray", "hipMemcpy2DFromArrayAsync",
    "hipMemcpy2DToArray", "hipMemcpy2DToArrayAsync", "hipMemcpy3D", "hipMemcpy3DAsync", "hipMemcpyAsync",
    "hipMemcpyAtoH", "hipMemcpyDtoD", "hipMemcpyDtoDAsync", "hipMemcpyDtoH", "hipMemcpyDtoHAsync",
    "hipMemcpyFromArray", "hipMemcpyFromSymbol", "hipMemcpyFromSymbolAsync", "hipMemcpyHtoA",
    "hipMemcpyHtoD", "hipMemcpyHtoDAsync", "hipMemcpyParam2D", "hipMemcpyParam2DAsync", "hipMemcpyPeer",
    "hipMemcpyPeerAsync", "hipMemcpyToArray", "hipMemcpyToSymbol", "hipMemcpyToSymbolAsync",
    "hipMemcpyWithStream", "hipMemset", "hipMemset2D", "hipMemset2DAsync", "hipMemset3D",
    "hipMemset3DAsync", "hipMemsetAsync", "hipMemsetD16", "hipMemsetD16Async", "hipMemsetD32",
    "hipMemsetD32Async", "hipMemsetD8", "hipMemsetD8Async", "hipMipmappedArrayCreate",
    "hipMipmappedArrayDestroy", "hipMipmappedArrayGetLevel", "hipModuleGetFunction", "hipModuleGetGlobal",
    "hipModuleGetTexRef", "hipModuleLaunchCooperativeKernel",
    "hipModuleLaunchCooperativeKernelMultiDevice", "hipModuleLaunchKernel", "hipModuleLoad",
    "hipModuleLoadData", "hipModuleLoadDataEx", "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor",
    "hipModuleOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "hipModuleOccupancyMaxPotentialBlockSize", "hipModuleOccupancyMaxPotentialBlockSizeWithFlags",
    "hipModuleUnload", "hipOccupancyMaxActiveBlocksPerMultiprocessor",
    "hipOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "hipOccupancyMaxPotentialBlockSize",
    "hipPeekAtLastError", "hipPointerGetAttribute", "hipPointerGetAttributes", "hipPointerSetAttribute",
    "hipProfilerStart", "hipProfilerStop", "hipRuntimeGetVersion", "hipSetDevice", "hipSetDeviceFlags",
    "hipSetupArgument", "hipSignalExternalSemaphoresAsync", "hipStreamAddCallback",
    "hipStreamAttachMemAsync", "hipStreamBeginCapture", "hipStreamCreate", "hipStreamCreateWithFlags",
    "hipStreamCreateWithPriority", "hipStreamDestroy", "hipStreamEndCapture", "hipStreamGetCaptureInfo",
    "hipStreamGetCaptureInfo_v2", "hipStreamGetDevice", "hipStreamGetFlags", "hipStreamGetPriority",
    "hipStreamIsCapturing", "hipStreamQuery", "hipStreamSynchronize",
    "hipStreamUpdateCaptureDependencies", "hipStreamWaitEvent", "hipStreamWaitValue32",
    "hipStreamWaitValue64", "hipStreamWriteValue32", "hipStreamWriteValue64", "hipTexObjectCreate",
    "hipTexObjectDestroy", "hipTexObjectGetResourceDesc", "hipTexObjectGetResourceViewDesc",
    "hipTexObjectGetTextureDesc", "hipTexRefGetAddress", "hipTexRefGetAddressMode",
    "hipTexRefGetFilterMode", "hipTexRefGetFlags", "hipTexRefGetFormat", "hipTexRefGetMaxAnisotropy",
    "hipTexRefGetMipMappedArray", "hipTexRefGetMipmapFilterMode", "hipTexRefGetMipmapLevelBias",
    "hipTexRefGetMipmapLevelClamp", "hipTexRefSetAddress", "hipTexRefSetAddress2D",
    "hipTexRefSetAddressMode", "hipTexRefSetArray", "hipTexRefSetBorderColor", "hipTexRefSetFilterMode",
    "hipTexRefSetFlags", "hipTexRefSetFormat", "hipTexRefSetMaxAnisotropy",
    "hipTexRefSetMipmapFilterMode", "hipTexRefSetMipmapLevelBias", "hipTexRefSetMipmapLevelClamp",
    "hipTexRefSetMipmappedArray", "hipThreadExchangeStreamCaptureMode", "hipUnbindTexture",
    "hipUserObjectCreate", "hipUserObjectRelease", "hipUserObjectRetain",
    "hipWaitExternalSemaphoresAsync", "hipCreateChannelDesc", "hipExtModuleLaunchKernel",
    "hipHccModuleLaunchKernel", "hipMemcpy_spt", "hipMemcpyToSymbol_spt", "hipMemcpyFromSymbol_spt",
    "hipMemcpy2D_spt", "hipMemcpy2DFromArray_spt", "hipMemcpy3D_spt", "hipMemset_spt",
    "hipMemsetAsync_spt", "hipMemset2D_spt", "hipMemset2DAsync_spt", "hipMemset3DAsync_spt",
    "hipMemset3D_spt", "hipMemcpyAsync_spt", "hipMemcpy3DAsync_spt", "hipMemcpy2DAsync_spt",
    "hipMemcpyFromSymbolAsync_spt", "hipMemcpyToSymbolAsync_spt", "hipMemcpyFromArray_spt",
    "hipMemcpy2DToArray_spt", "hipMemcpy2DFromArrayAsync_spt", "hipMemcpy2DToArrayAsync_spt",
    "hipStreamQuery_spt", "hipStreamSynchronize_spt", "hipStreamGetPriority_spt",
    "hipStreamWaitEvent_spt", "hipStreamGetFlags_spt", "hipStreamAddCallback_spt", "hipEventRecord_spt",
    "hipLaunchCooperativeKernel_spt", "hipLaunchKernel_spt", "hipGraphLaunch_spt",
    "hipStreamBeginCapture_spt", "hipStreamEndCapture_spt", "hipStreamIsCapturing_spt",
    "hipStreamGetCaptureInfo_spt", "hipStreamGetCaptureInfo_v2_spt", "hipLaunchHostFunc_spt",
    "hipGetStreamDeviceId", "hipDrvGraphAddMemsetNode", "hipGraphAddExternalSemaphoresWaitNode",
    "hipGraphAddExternalSemaphoresSignalNode", "hipGraphExternalSemaphoresSignalNodeSetParams",
    "hipGraphExternalSemaphoresWaitNodeSetParams", "hipGraphExternalSemaphoresSignalNodeGetParams",
    "hipGraphExternalSemaphoresWaitNodeGetParams", "hipGraphExecExternalSemaphoresSignalNodeSetParams",
    "hipGraphExecExternalSemaphoresWaitNodeSetParams", "hipGraphAddNode", "hipGraphInstantiateWithParams",
    "hipExtGetLastError", "hipTexRefGetBorderColor", "hipTexRefGetArray", "hipGetProcAddress",
    "hipStreamBeginCaptureToGraph", "hipGetFuncBySymbol", "hipSetValidDevices", "hipMemcpyAtoD",
    "hipMemcpyDtoA", "hipMemcpyAtoA", "hipMemcpyAtoHAsync", "hipMemcpyHtoAAsync",
    "hipMemcpy2DArrayToArray", "hipDrvGraphAddMemFreeNode", "hipDrvGraphExecMemcpyNodeSetParams",
    "hipDrvGraphExecMemsetNodeSetParams", "hipGraphExecGetFlags", "hipGraphNodeSetParams",
    "hipGraphExecNodeSetParams", "hipExternalMemoryGetMappedMipmappedArray",
    "hipDrvGraphMemcpyNodeGetParams", "hipDrvGraphMemcpyNodeSetParams", "hipExtHostAlloc",
    "hipDeviceGetTexture1DLinearMaxWidth", "hipStreamBatchMemOp", "hipGraphAddBatchMemOpNode",
    "hipGraphBatchMemOpNodeGetParams", "hipGraphBatchMemOpNodeSetParams",
    "hipGraphExecBatchMemOpNodeSetParams", "hipLinkAddData", "hipLinkAddFile", "hipLinkComplete",
    "hipLinkCreate", "hipLinkDestroy", "hipEventRecordWithFlags", "hipLaunchKernelExC",
    "hipDrvLaunchKernelEx", "hipMemGetHandleForAddressRange",
)

# The 13 kernels of the workload: symbols, names and code-object properties of the vLLM-on-MI300X
# kernels in the workspace corpus sample (shared/corpus/rocprof/rocpd-v3-sample). `formatted` is what
# every format shows as the kernel name; names the demangler cannot handle (DF16_, TnPFT_) stay mangled.
KERNEL_SYMBOLS: tuple[KernelSymbol, ...] = (
    KernelSymbol(
        alias='embedding',
        code_object=1, kernarg=928, static_lds=0, private=0,
        sgpr=48, vgpr=24, agpr=0, entry_offset=18176,
        symbol=(
            '_ZN2at6native12_GLOBAL__N_121indexSelectSmallIndexIN3c104HalfEljLi2ELi2ELin2EEEvNS_4'
            'cuda6detail10TensorInfoIT_T1_EENS7_IKS8_S9_EENS7_IKT0_S9_EEiiS9_l.kd'
        ),
        formatted=(
            'void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::Half, long, unsig'
            'ned int, 2, 2, -2>(at::cuda::detail::TensorInfo<c10::Half, unsigned int>, at::cuda::'
            'detail::TensorInfo<c10::Half const, unsigned int>, at::cuda::detail::TensorInfo<long'
            ' const, unsigned int>, int, int, unsigned int, long)'
        ),
        truncated='indexSelectSmallIndex',
    ),
    KernelSymbol(
        alias='rms_norm',
        code_object=2, kernarg=296, static_lds=72, private=0,
        sgpr=32, vgpr=32, agpr=0, entry_offset=12544,
        symbol='_ZN4vllm22scaled_rms_norm_kernelIN3c104HalfEEEvPNS1_15Float8_e4m3fnuzEPKT_S7_ffii.kd',
        formatted=(
            'void vllm::scaled_rms_norm_kernel<c10::Half>(c10::Float8_e4m3fnuz*, c10::Half const*'
            ', c10::Half const*, float, float, int, int)'
        ),
        truncated='scaled_rms_norm_kernel',
    ),
    KernelSymbol(
        alias='fused_add_rms_norm_fp8',
        code_object=2, kernarg=304, static_lds=72, private=0,
        sgpr=32, vgpr=40, agpr=0, entry_offset=7936,
        symbol=(
            '_ZN4vllm32scaled_fused_add_rms_norm_kernelIN3c104HalfELi8EEENSt9enable_ifIXaagtT0_Li'
            '0Esr12_typeConvertIT_E6existsEvE4typeEPNS1_15Float8_e4m3fnuzEPS5_SB_PKS5_ffii.kd'
        ),
        formatted=(
            'std::enable_if<(((8)>(0)))&&_typeConvert<c10::Half>::exists, void>::type vllm::scale'
            'd_fused_add_rms_norm_kernel<c10::Half, 8>(c10::Float8_e4m3fnuz*, c10::Half*, c10::Ha'
            'lf*, c10::Half const*, float, float, int, int)'
        ),
        truncated='scaled_fused_add_rms_norm_kernel',
    ),
    KernelSymbol(
        alias='fused_add_rms_norm',
        code_object=2, kernarg=288, static_lds=72, private=0,
        sgpr=32, vgpr=40, agpr=0, entry_offset=4864,
        symbol=(
            '_ZN4vllm25fused_add_rms_norm_kernelIN3c104HalfELi8EEENSt9enable_ifIXaagtT0_Li0Esr12_'
            'typeConvertIT_E6existsEvE4typeEPS5_S9_PKS5_fii.kd'
        ),
        formatted=(
            'std::enable_if<(((8)>(0)))&&_typeConvert<c10::Half>::exists, void>::type vllm::fused'
            '_add_rms_norm_kernel<c10::Half, 8>(c10::Half*, c10::Half*, c10::Half const*, float, '
            'int, int)'
        ),
        truncated='fused_add_rms_norm_kernel',
    ),
    KernelSymbol(
        alias='rotary',
        code_object=2, kernarg=312, static_lds=0, private=0,
        sgpr=32, vgpr=24, agpr=0, entry_offset=12544,
        symbol='_ZN4vllm23rotary_embedding_kernelIN3c104HalfELb1EEEvPKlPT_S6_PKS5_illiii.kd',
        formatted=(
            'void vllm::rotary_embedding_kernel<c10::Half, true>(long const*, c10::Half*, c10::Ha'
            'lf*, c10::Half const*, int, long, long, int, int, int)'
        ),
        truncated='rotary_embedding_kernel',
    ),
    KernelSymbol(
        alias='reshape_and_cache',
        code_object=2, kernarg=328, static_lds=0, private=0,
        sgpr=32, vgpr=20, agpr=0, entry_offset=4864,
        symbol=(
            '_ZN4vllm24reshape_and_cache_kernelIthLNS_18Fp8KVCacheDataTypeE1EEEvPKT_S4_PT0_S6_PKl'
            'iiiiiiff.kd'
        ),
        formatted=(
            'void vllm::reshape_and_cache_kernel<unsigned short, unsigned char, (vllm::Fp8KVCache'
            'DataType)1>(unsigned short const*, unsigned short const*, unsigned char*, unsigned c'
            'har*, long const*, int, int, int, int, int, int, float, float)'
        ),
        truncated='reshape_and_cache_kernel',
    ),
    KernelSymbol(
        alias='silu_and_mul',
        code_object=2, kernarg=280, static_lds=0, private=0,
        sgpr=32, vgpr=24, agpr=0, entry_offset=4864,
        symbol=(
            '_ZN4vllm25scaled_act_and_mul_kernelIN3c104HalfETnPFT_RKS3_EXadL_ZNS_11silu_kernelIS2'
            '_EES3_S5_EEEEvPNS1_15Float8_e4m3fnuzEPS4_if.kd'
        ),
        formatted=(
            '_ZN4vllm25scaled_act_and_mul_kernelIN3c104HalfETnPFT_RKS3_EXadL_ZNS_11silu_kernelIS2'
            '_EES3_S5_EEEEvPNS1_15Float8_e4m3fnuzEPS4_if'
        ),
        truncated=(
            '_ZN4vllm25scaled_act_and_mul_kernelIN3c104HalfETnPFT_RKS3_EXadL_ZNS_11silu_kernelIS2'
            '_EES3_S5_EEEEvPNS1_15Float8_e4m3fnuzEPS4_if.kd'
        ),
    ),
    KernelSymbol(
        alias='paged_attention',
        code_object=3, kernarg=376, static_lds=4224, private=0,
        sgpr=64, vgpr=128, agpr=32, entry_offset=7936,
        symbol=(
            '_Z32paged_attention_ll4mi_QKV_kernelIDF16_hLN4vllm18Fp8KVCacheDataTypeE1ELi16ELi128E'
            'Li512ELi4EEvPKT_PKT0_S7_ifPKiS9_iPKfiiiPfSC_PS2_SD_iff.kd'
        ),
        formatted=(
            '_Z32paged_attention_ll4mi_QKV_kernelIDF16_hLN4vllm18Fp8KVCacheDataTypeE1ELi16ELi128E'
            'Li512ELi4EEvPKT_PKT0_S7_ifPKiS9_iPKfiiiPfSC_PS2_SD_iff'
        ),
        truncated=(
            '_Z32paged_attention_ll4mi_QKV_kernelIDF16_hLN4vllm18Fp8KVCacheDataTypeE1ELi16ELi128E'
            'Li512ELi4EEvPKT_PKT0_S7_ifPKiS9_iPKfiiiPfSC_PS2_SD_iff.kd'
        ),
    ),
    KernelSymbol(
        alias='paged_attention_reduce',
        code_object=3, kernarg=304, static_lds=4352, private=0,
        sgpr=48, vgpr=48, agpr=0, entry_offset=18176,
        symbol='_Z35paged_attention_ll4mi_reduce_kernelIDF16_Li128ELi128ELi512EEvPT_PKfS3_PKS0_PKii.kd',
        formatted='_Z35paged_attention_ll4mi_reduce_kernelIDF16_Li128ELi128ELi512EEvPT_PKfS3_PKS0_PKii',
        truncated=(
            '_Z35paged_attention_ll4mi_reduce_kernelIDF16_Li128ELi128ELi512EEvPT_PKfS3_PKS0_PKii.'
            'kd'
        ),
    ),
    KernelSymbol(
        alias='lm_head',
        code_object=3, kernarg=296, static_lds=65536, private=0,
        sgpr=48, vgpr=96, agpr=0, entry_offset=4864,
        symbol='_Z15wvSpltK_hf_sml_ILi64ELi4ELi16ELi8ELi1ELi4EEviiPK6__halfS2_PS0_i.kd',
        formatted=(
            'void wvSpltK_hf_sml_<64, 4, 16, 8, 1, 4>(int, int, __half const*, __half const*, __h'
            'alf*, int)'
        ),
        truncated='wvSpltK_hf_sml_',
    ),
    KernelSymbol(
        alias='gemm_32x16x1024',
        code_object=4, kernarg=240, static_lds=49152, private=0,
        sgpr=96, vgpr=128, agpr=64, entry_offset=12544,
        symbol=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT32x16x1024_MI16x16x1_SN_LDSB1_AF'
            'C1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMB_IU1_K1_LBSPPA1024_LBSPPB'
            '1024_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_N'
            'TD0_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_TLDS1_ULS'
            'GRO0_USL1_UIOFGRO0_USFGROn1_VWA1_VWB1_WSGRA0_WSGRB0_WG32_4_1_WGMXCC1_WGMXCCG0.kd'
        ),
        formatted=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT32x16x1024_MI16x16x1_SN_LDSB1_AF'
            'C1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMB_IU1_K1_LBSPPA1024_LBSPPB'
            '1024_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_N'
            'TD0_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_TLDS1_ULS'
            'GRO0_USL1_UIOFGRO0_USFGROn1_VWA1_VWB1_WSGRA0_WSGRB0_WG32_4_1_WGMXCC1_WGMXCCG0'
        ),
        truncated=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT32x16x1024_MI16x16x1_SN_LDSB1_AF'
            'C1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMB_IU1_K1_LBSPPA1024_LBSPPB'
            '1024_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_N'
            'TD0_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_TLDS1_ULS'
            'GRO0_USL1_UIOFGRO0_USFGROn1_VWA1_VWB1_WSGRA0_WSGRB0_WG32_4_1_WGMXCC1_WGMXCCG0.kd'
        ),
    ),
    KernelSymbol(
        alias='gemm_64x32x256',
        code_object=4, kernarg=240, static_lds=33792, private=0,
        sgpr=96, vgpr=128, agpr=64, entry_offset=4864,
        symbol=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1_AFC'
            '1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMB_IU1_K1_LBSPPA512_LBSPPB25'
            '6_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT2_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0'
            '_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW2_TLDS1_ULSGRO'
            '0_USL1_UIOFGRO0_USFGROn1_VWA2_VWB1_WSGRA0_WSGRB0_WG32_8_1_WGMXCC1_WGMXCCG0.kd'
        ),
        formatted=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1_AFC'
            '1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMB_IU1_K1_LBSPPA512_LBSPPB25'
            '6_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT2_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0'
            '_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW2_TLDS1_ULSGRO'
            '0_USL1_UIOFGRO0_USFGROn1_VWA2_VWB1_WSGRA0_WSGRB0_WG32_8_1_WGMXCC1_WGMXCCG0'
        ),
        truncated=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1_AFC'
            '1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMB_IU1_K1_LBSPPA512_LBSPPB25'
            '6_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT2_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0'
            '_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW2_TLDS1_ULSGRO'
            '0_USL1_UIOFGRO0_USFGROn1_VWA2_VWB1_WSGRA0_WSGRB0_WG32_8_1_WGMXCC1_WGMXCCG0.kd'
        ),
    ),
    KernelSymbol(
        alias='gemm_64x16x512',
        code_object=4, kernarg=240, static_lds=40960, private=0,
        sgpr=96, vgpr=112, agpr=32, entry_offset=7936,
        symbol=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT64x16x512_MI16x16x1_SN_LDSB1_AFC'
            '1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMBSK_IU1_K1_LBSPPA512_LBSPPB'
            '512_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NT'
            'D0_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_TLDS1_ULSG'
            'RO0_USL1_UIOFGRO0_USFGROn1_VWA1_VWB1_WSGRA0_WSGRB0_WG64_4_1_WGMXCC1_WGMXCCG0.kd'
        ),
        formatted=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT64x16x512_MI16x16x1_SN_LDSB1_AFC'
            '1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMBSK_IU1_K1_LBSPPA512_LBSPPB'
            '512_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NT'
            'D0_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_TLDS1_ULSG'
            'RO0_USL1_UIOFGRO0_USFGROn1_VWA1_VWB1_WSGRA0_WSGRB0_WG64_4_1_WGMXCC1_WGMXCCG0'
        ),
        truncated=(
            'Cijk_Alik_Bljk_F8HS_BH_BiasSH_AS_SAB_SAV_UserArgs_MT64x16x512_MI16x16x1_SN_LDSB1_AFC'
            '1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_GRVWA16_GRVWB16_GSUAMBSK_IU1_K1_LBSPPA512_LBSPPB'
            '512_LBSPPM0_LPA32_LPB32_LPM0_LRVW16_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NT'
            'D0_NEPBS16_NLCA1_NLCB1_ONLL0_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_TLDS1_ULSG'
            'RO0_USL1_UIOFGRO0_USFGROn1_VWA1_VWB1_WSGRA0_WSGRB0_WG64_4_1_WGMXCC1_WGMXCCG0.kd'
        ),
    ),
)


if __name__ == "__main__":
    main()
