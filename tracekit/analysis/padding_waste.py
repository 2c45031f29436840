"""padding_waste: work spent on padding — layout tiles, matrix-unit tiles, sequence buckets, GPU waves.

Four checks, each on the data a run has (a check without data is skipped, with the reason in
every finding's ``evidence["checks"]`` and a NULL metric):

(a) **Layout/tile padding** (XLA, TPU). Inputs: ``op_costs.shape_with_layout`` (the op's output,
e.g. ``f32[5,1024,1024,256]{3,2,1,0:T(8,128)}``, bf16 ``{1,0:T(16,128)(2,1)}``), joined to the
op's executions in ``kernels`` (``category = 'kernel'``), timed by ``device_dur_ns`` (else
``dur_ns``). The layout ``{minor_to_major:T(a,b)(c,d)…}`` tiles the physical shape (dimensions in
major-to-minor order): the first tile's last size pads the most minor dimension, its size before
that the next one, and so on; a tile with more sizes than the shape has dimensions pads leading
size-1 dimensions (a scalar under ``T(128)`` takes 128 elements). Later tiles (``(2,1)``) tile the
first tile's own shape and pad it when they do not divide it. padded bytes = Π padded dims ×
element bytes; logical bytes = Π dims × element bytes; a tuple output sums its elements. Per op,
padding share = 1 − logical ÷ padded. ``layout_padding_fraction`` = Σ time × share ÷ Σ time over
the ops with a tiled shape; saving = Σ time × share (time ∝ padded bytes, i.e. memory-bound ops).
FLOPs on padding are estimated as XLA's ``flops`` × (padded ÷ logical − 1), which holds for
elementwise ops (a dot's padding is check (b)).

(b) **Matrix-unit tile misfit.** The device's matrix tile comes from the hardware catalog's
``matrix_tile`` (:func:`matrix_tile_mnk`): TPU MXU ``128x128`` / ``256x256`` pads K and N to the
MXU size (rows stream, M is not padded here); NVIDIA ``mma``/``wgmma``/``tcgen05`` and AMD MFMA
pad M, N, K to the smallest 16-bit instruction shape the catalog lists. GEMM dimensions: Kineto
ops ``aten::mm/addmm/bmm/baddbmm/matmul/linear`` and scaled-dot-product / flash / efficient
attention (two GEMMs: QKᵀ with K = head_dim, PV with N = head_dim) from ``kernel_ops.input_dims``,
timed by the GPU time of the kernels they launched; XLA ``dot`` ops from ``op_costs.hlo_text``.
Efficiency = Π dims ÷ Π dims rounded up to the tile. Padding costs MACs, and MACs cost time only
where the GEMM is compute-bound, so GEMMs with M ≤ :data:`SKINNY_M` (GEMVs, an M = 1 LM head) or
an arithmetic intensity below the device's ridge point are left out (listed as memory-bound in the
evidence, no tile advice): intensity = 2·M·N·K ÷ (element bytes · (M·K + K·N + M·N)) — A and B read,
C written once; a fused attention op 2·L·S ÷ (element bytes · (L + S)), Q, K, V, O moved once —
against :func:`ridge_point` of the dtype's peak (bf16/fp16, fp8, int8; fp32 the matrix FP32, else
TF32, peak; unknown dtype: bf16). ``matrix_unit_efficiency`` is the time-weighted mean over the
compute-bound GEMMs; saving = Σ time × (1 − efficiency) (time ∝ padded MACs: an upper bound).
A device not identified in the catalog, or a CPU, has no matrix unit: the check is skipped.

(c) **Sequence-bucket padding.** Annotations named ``…len<n>_T<T>…`` (the bundled JAX sample's
``prefill_len<n>_T<bucket>``; ``n`` real tokens padded to ``T``). Per call, padded share =
(T − n) ÷ T; the call's time is the device/XLA-op time (``kernels``) that starts inside the
annotation, else the annotation's span minus the compiles inside it. **Assumes time ∝ tokens**
(true for the MLP/projection GEMMs of a prefill, pessimistic for attention's T² part).
``bucket_padding_fraction`` = Σ time × share ÷ Σ time; ``bucket_padded_token_fraction`` =
Σ (T − n) ÷ Σ T (per row: a batch's rows are taken as equally padded). A lengths file given on
the command line is planned (see docs); not read yet.

(d) **GPU wave quantization** (kernels with grid, block and a CU/SM count). Resident blocks per
SM/CU, then capacity = SMs/CUs × resident; waves = ⌈blocks ÷ capacity⌉; last-wave efficiency =
(blocks mod capacity) ÷ capacity (1 when it divides); wave efficiency = blocks ÷ (waves ×
capacity). Only kernels with more than one wave are quantized. Model (residency): an SM's
throughput is shared by its resident blocks, so its time ∝ the blocks it runs and a kernel's time
∝ ⌈blocks ÷ SMs⌉ (the busiest SM): a last wave of r blocks on C = SMs × R slots takes ⌈r ÷ SMs⌉ ÷ R
of a full wave, not a whole one; saving = dur × (1 − blocks ÷ (SMs · ⌈blocks ÷ SMs⌉))
(:func:`residency_efficiency`). It equals the full-wave charge when R = 1. The full-wave charge,
dur × (1 − wave efficiency), holds only when per-block time is fixed (latency-bound blocks) and
is reported as the upper bound. Kernels whose grid is sized to the device by design
(``device_work.by_design``: persistent, split-K/stream-K, attention, collectives) are left out.
Kernels with fewer blocks than SMs/CUs are counted as under-filled (no saving computed: their time
is latency, not waves). ``last_wave_efficiency`` is the time-weighted mean over multi-wave kernels.

*NVIDIA* (Kineto/XPlane grid, block, registers and shared memory): resident blocks per SM = min
over the limits of the CUDA occupancy calculator: warps (``max_threads_per_cu`` ÷ warp size ÷
warps per block), blocks per SM (:data:`MAX_BLOCKS_PER_SM` by ``arch``), registers (per-warp
allocation rounded up to 256 registers), shared memory (per block + 1 KiB reserved on sm_80+,
rounded up to 128 B, against ``shared_mem_per_cu_bytes``; the largest carveout, so an optimistic
count).

*AMD CDNA* (gfx90a, gfx940–942, gfx950; rocpd, rocprofv3 CSV/JSON, RPD; ``grid_*`` is already in
workgroups: the parsers divide rocprof's work-item grid by the workgroup size, rounding up).
Resident workgroups per CU = min of (:func:`resident_workgroups_amd`, constants in
:data:`AMD_TARGETS`, from LLVM ``AMDGPUBaseInfo.cpp`` as ported by OpenXLA's
``rocm_occupancy.cc``): wave slots (``max_waves_per_cu`` ÷ waves per workgroup, waves = ⌈threads ÷
wave size⌉); barriers (16 workgroups per CU when a workgroup has more than one wave); VGPRs (unified
file: VGPRs = align(arch VGPRs, 4) + AGPRs, else max of the two; waves per SIMD = 512 ÷ align(VGPRs,
8), clamped to 1..waves per SIMD; × SIMDs per CU ÷ waves per workgroup); SGPRs (800 ÷ align(SGPRs,
16) waves per SIMD, likewise); LDS (LDS per CU ÷ align(LDS per workgroup, granule): 64 KiB and
512 B on gfx90a/gfx94x, 160 KiB and 1280 B on gfx950, at least 1). CUs, SIMDs per CU, wave slots per
CU, wave size and LDS per CU come from the ``devices`` row when stated (a CPX partition states its 38
CUs), else from the hardware catalog (:func:`identify`, partition-scaled). A register count the
trace lacks (RPD) drops that limit: the count is then an upper bound, said in the evidence. The
LDS per workgroup is what the format stores (``shared_mem_bytes``: rocpd/JSON static + dynamic,
CSV static only, RPD dynamic only), so CSV/RPD counts can be optimistic. Other targets (RDNA
gfx10–12: wave32 and a larger register file) are not modelled and are counted as such.

Thresholds: module constants below. ``saving_fraction`` = saving ÷ the run's device window time
(Σ ``run_window.window_ns``; the longest rank span when the run has no device work). The matrix and
wave findings take their severity from it (:func:`run_share_severity`): none under 1 %, info
1–5 %, warning 5–20 %, critical ≥ 20 %. The layout and bucket findings keep their shares of the
time they were computed over (tiled-op time, prefill time).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import duckdb

from tracekit.analysis.base import (
    Analyzer,
    AnalyzerResult,
    Finding,
    Metric,
    run_share_severity,
    run_window_ns,
)
from tracekit.analysis.hardware import DeviceSpec, identify, ridge_point
from tracekit.formatting import duration_ns

LAYOUT_WARNING_FRACTION = 0.10  # time-weighted padded share of tiled-op time
LAYOUT_INFO_FRACTION = 0.02
SKINNY_M = 16  # GEMMs with M ≤ this are GEMVs/skinny GEMMs: memory-bound, no matrix-tile advice
BUCKET_WARNING_FRACTION = 0.20  # time-weighted padded share of prefill time
BUCKET_INFO_FRACTION = 0.05
_BUCKET_REMEDY = ("Use finer buckets near the common lengths, pack several requests into one bucket, "
                  "or a ragged (paged) prefill kernel.")
#: Severity of a finding with a saving (matrix tile, wave tails) from saving ÷ the run's device
#: window time (``run_window``): under 1 % no finding, info 1–5 %, warning 5–20 %, critical ≥ 20 %.
TOP = 10  # offending ops/kernels listed in evidence

#: Maximum resident blocks per SM by compute capability (CUDA C++ Programming Guide, table
#: "Technical Specifications per Compute Capability").
MAX_BLOCKS_PER_SM = {
    "sm_70": 32, "sm_72": 32, "sm_75": 16, "sm_80": 32, "sm_86": 16, "sm_87": 16, "sm_89": 24,
    "sm_90": 32, "sm_100": 32,
}
REG_ALLOC_UNIT = 256  # registers, per warp


@dataclass(frozen=True)
class AmdTarget:
    """Occupancy constants of one AMD CDNA target (LLVM ``AMDGPUBaseInfo.cpp`` accessors)."""

    lds_per_cu: int  # bytes (getAddressableLocalMemorySize)
    lds_granule: int  # bytes (getLdsDwGranularity × 4)
    total_vgprs: int = 512  # per SIMD lane, arch + accum in one file (getTotalNumVGPRs, gfx90a+)
    vgpr_granule: int = 8  # getVGPRAllocGranule (gfx90a+)
    arch_vgpr_granule: int = 4  # arch VGPRs are aligned to this before the AGPRs start
    total_sgprs: int = 800  # per SIMD (getTotalNumSGPRs)
    sgpr_granule: int = 16  # getSGPRAllocGranule
    max_barriers: int = 16  # workgroups per CU with a barrier (more than one wave; getMaxWorkGroupsPerCU)


#: CDNA targets whose occupancy is modelled, by gfx name (gfx90a = MI200, gfx94x = MI300A/X/MI325X,
#: gfx950 = MI350/MI355X: 160 KiB LDS).
AMD_TARGETS = {
    "gfx90a": AmdTarget(65536, 512), "gfx940": AmdTarget(65536, 512), "gfx941": AmdTarget(65536, 512),
    "gfx942": AmdTarget(65536, 512), "gfx950": AmdTarget(163840, 1280),
}
SMEM_ALLOC_UNIT = 128  # bytes
SMEM_RESERVED_SM80 = 1024  # bytes per block reserved by the system on sm_80 and later

_ELEMENT_BITS = {
    "pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32,
    "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f8e4m3fn": 8, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3b11fnuz": 8,
    "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 4, "s2": 2, "u2": 2, "s1": 1, "u1": 1, "tf32": 32,
}
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
_TILE = re.compile(r"\(([0-9*,\s]*)\)")
_BUCKET = re.compile(r"len(\d+)_T(\d+)")
_MM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")


# --------------------------------------------------------------------------------------------
# (a) shapes and tiles


@dataclass(frozen=True)
class ArrayShape:
    dtype: str
    dims: tuple[int, ...]
    minor_to_major: tuple[int, ...] | None
    tiles: tuple[tuple[int, ...], ...]

    @property
    def element_bits(self) -> int | None:
        return _ELEMENT_BITS.get(self.dtype)

    def logical_elements(self) -> int:
        return math.prod(self.dims)

    def padded_elements(self) -> int:
        """Elements the tiled layout stores (see the module docstring)."""
        if not self.tiles:
            return self.logical_elements()
        order = self.minor_to_major if self.minor_to_major is not None else tuple(reversed(range(len(self.dims))))
        physical = [self.dims[d] for d in reversed(order)]  # major → minor
        first = self.tiles[0]
        if len(first) > len(physical):
            physical = [1] * (len(first) - len(physical)) + physical
        k = len(first)
        head, tail = physical[: len(physical) - k], physical[len(physical) - k:]
        n_tiles = math.prod(head) * math.prod(-(-d // t) for d, t in zip(tail, first))
        tile = list(first)
        for sub in self.tiles[1:]:  # later tiles tile the previous tile's shape
            if len(sub) > len(tile):
                tile = [1] * (len(sub) - len(tile)) + tile
            lead, minor = tile[: len(tile) - len(sub)], tile[len(tile) - len(sub):]
            tile = lead + [-(-d // t) * t for d, t in zip(minor, sub)]
        return n_tiles * math.prod(tile)


def parse_shapes(text: str) -> list[ArrayShape]:
    """Every array shape in an XLA shape string (a tuple gives several); ``<=`` bounds read as
    their bound. Tile sizes ``*`` (combine) are read as 1."""
    out = []
    for dtype, dims, layout in _ARRAY.findall(text):
        sizes = tuple(int(d.strip().lstrip("<=")) for d in dims.split(",") if d.strip())
        m2m: tuple[int, ...] | None = None
        tiles: tuple[tuple[int, ...], ...] = ()
        if layout:
            body = layout[1:-1]
            order, _, rest = body.partition(":")
            m2m = tuple(int(x) for x in order.split(",") if x.strip()) or None
            if rest.startswith("T"):
                tiles = tuple(
                    tuple(int(x) if x.strip() not in ("*", "") else 1 for x in t.split(",") if x.strip())
                    for t in _TILE.findall(rest[1:].split("S(")[0].split("E(")[0].split("L(")[0])
                )
                tiles = tuple(t for t in tiles if t)
        if m2m is not None and len(m2m) != len(sizes):
            m2m = None
        out.append(ArrayShape(dtype, sizes, m2m, tiles))
    return out


def layout_bytes(text: str) -> tuple[int, int] | None:
    """(logical bytes, padded bytes) of a ``shape_with_layout``; None when a dtype is unknown."""
    logical = padded = 0
    shapes = parse_shapes(text)
    if not shapes:
        return None
    for s in shapes:
        bits = s.element_bits
        if bits is None:
            return None
        logical += -(-s.logical_elements() * bits // 8)
        padded += -(-s.padded_elements() * bits // 8)
    return logical, padded


# --------------------------------------------------------------------------------------------
# (b) matrix tiles


def matrix_tile_mnk(spec: DeviceSpec) -> tuple[int, int, int] | None:
    """(M, N, K) padding tile from the catalog's ``matrix_tile`` text; None if not stated."""
    text = spec.matrix_tile or ""
    if m := re.search(r"(\d+)\s*x\s*(\d+)\s*MXU", text):
        return 1, int(m.group(2)), int(m.group(1))
    if m := re.search(r"\bm(\d+)n(\d+|N)k(\d+)", text):
        n = m.group(2)
        if n == "N":
            step = re.search(r"N\s*=\s*(\d+)\s*\.\.", text)
            n = step.group(1) if step else "8"
        return int(m.group(1)), int(n), int(m.group(3))
    if m := re.search(r"M\s*=\s*(\d+)\s*\(N\s*(\d+)\s*\.\.", text):
        k = re.search(r"K\s*=\s*(\d+)", text)
        return int(m.group(1)), int(m.group(2)), int(k.group(1)) if k else 16
    if "MFMA" in text or re.search(r"\d+x\d+x\d+", text):
        segment = text.split(";")[0]
        shapes = [tuple(int(x) for x in s) for s in re.findall(r"(\d+)x(\d+)x(\d+)", segment)]
        if shapes:
            m_, n_, k_ = min(shapes, key=lambda s: (s[0] * s[1], -s[2]))
            return m_, n_, k_
    return None


def tile_efficiency(mnk: Sequence[int], tile: Sequence[int]) -> float:
    """Π dims ÷ Π dims rounded up to the tile."""
    if any(d <= 0 for d in mnk):
        return 1.0
    return math.prod(mnk) / math.prod(-(-d // t) * t for d, t in zip(mnk, tile))


def gemm_intensity(m: int, n: int, k: int, element_bytes: int) -> float:
    """Arithmetic intensity of one (M, N, K) GEMM, FLOP per byte: 2·M·N·K ÷ (element bytes ×
    (M·K + K·N + M·N)), i.e. A and B read once and C written once (a batch scales both sides)."""
    moved = element_bytes * (m * k + k * n + m * n)
    return 2 * m * n * k / moved if moved > 0 else 0.0


#: element bytes and the catalog peak that bounds a GEMM of that dtype (the highest matrix peak of
#: the dtype, so the ridge is the highest one: an fp32 GEMM on NVIDIA takes the TF32 tensor peak)
_DTYPE_PEAK = {
    "bf16": (2, "bf16"), "f16": (2, "fp16"), "f32": (4, "fp32_matrix"), "f8": (1, "fp8"), "s8": (1, "int8"),
}


def _torch_dtype(types: Any) -> str | None:
    """The GEMM's element type from a Kineto ``Input type`` list (first recognised entry)."""
    try:
        listed = json.loads(types) if isinstance(types, str) else []
    except ValueError:
        return None
    for t in listed if isinstance(listed, list) else []:
        name = str(t).lower()
        if "bfloat16" in name:
            return "bf16"
        if "half" in name or name.endswith("float16"):
            return "f16"
        if "float8" in name:
            return "f8"
        if name in ("float", "c10::float", "float32"):
            return "f32"
        if name in ("signed char", "int8", "c10::qint8"):
            return "s8"
    return None


def _hlo_dtype(hlo: str) -> str | None:
    """The element type of an HLO ``dot``'s first operand."""
    m = re.search(r"\bdot\((.*?)\)\s*,", hlo)
    shapes = parse_shapes(m.group(1)) if m else []
    if not shapes:
        return None
    d = shapes[0].dtype
    return "f8" if d.startswith("f8") else d if d in ("bf16", "f16", "f32", "s8") else None


def _ridge(spec: DeviceSpec, key: str) -> float | None:
    """Ridge point of ``key``'s peak; fp32 falls back to TF32, then the vector FP32 peak."""
    for k in ((key, "tf32", "fp32") if key == "fp32_matrix" else (key, "bf16")):
        r = ridge_point(spec, k)
        if r is not None:
            return r
    return None


def gemms_of_op(op_name: str, input_dims: Any) -> list[tuple[int, int, int, int]]:
    """(batch, M, N, K) of each GEMM a Kineto op runs, from its ``Input Dims``."""
    dims = [d if isinstance(d, list) else [] for d in input_dims] if isinstance(input_dims, list) else []
    try:
        if op_name in ("aten::mm", "aten::matmul", "aten::bmm") and len(dims) >= 2:
            a, b = dims[0], dims[1]
            if len(a) >= 2 and len(b) >= 2:
                return [(math.prod(a[:-2]) or 1, a[-2], b[-1], a[-1])]
        if op_name in ("aten::addmm", "aten::baddbmm") and len(dims) >= 3:
            a, b = dims[1], dims[2]
            if len(a) >= 2 and len(b) >= 2:
                return [(math.prod(a[:-2]) or 1, a[-2], b[-1], a[-1])]
        if op_name == "aten::linear" and len(dims) >= 2 and dims[0] and len(dims[1]) == 2:
            x, w = dims[0], dims[1]
            return [(1, math.prod(x[:-1]), w[0], x[-1])]
        if "attention" in op_name and len(dims) >= 3 and len(dims[0]) == 4 and len(dims[1]) == 4:
            q, k = dims[0], dims[1]
            # SDPA: [B, H, L, E]; flash/efficient: [B, L, H, E]
            flash = "flash" in op_name or "efficient" in op_name
            b, h, lq, e = (q[0], q[2], q[1], q[3]) if flash else (q[0], q[1], q[2], q[3])
            s = k[1] if flash else k[2]
            return [(b * h, lq, s, e), (b * h, lq, e, s)]
    except (TypeError, IndexError):
        return []
    return []


def dot_dims(hlo_text: str) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of an HLO ``dot`` from its operand shapes and dimension numbers."""
    m = re.search(r"\bdot\((.*?)\)\s*,", hlo_text)
    if m is None:
        return None
    ops = parse_shapes(m.group(1))
    if len(ops) != 2:
        return None

    def dimset(key: str) -> set[int]:
        g = re.search(key + r"=\{([0-9,]*)\}", hlo_text)
        return {int(x) for x in g.group(1).split(",") if x} if g else set()

    lc, rc = dimset("lhs_contracting_dims"), dimset("rhs_contracting_dims")
    lb, rb = dimset("lhs_batch_dims"), dimset("rhs_batch_dims")
    lhs, rhs = ops[0].dims, ops[1].dims
    batch = math.prod(lhs[i] for i in lb)
    k = math.prod(lhs[i] for i in lc)
    mm = math.prod(d for i, d in enumerate(lhs) if i not in lc and i not in lb)
    n = math.prod(d for i, d in enumerate(rhs) if i not in rc and i not in rb)
    return batch, mm, n, k


# --------------------------------------------------------------------------------------------
# (d) waves


def resident_blocks(
    arch: str | None, threads: int, regs: int | None, smem: int | None, warp_size: int,
    max_threads_per_cu: int, regs_per_cu: int | None, smem_per_cu: int | None,
) -> tuple[int, str] | None:
    """(resident blocks per SM, limiting factor) by the CUDA occupancy calculator; None when the
    architecture's block limit is not known."""
    if arch not in MAX_BLOCKS_PER_SM or threads <= 0 or warp_size <= 0:
        return None
    wpb = -(-threads // warp_size)
    limits = {"warps": (max_threads_per_cu // warp_size) // wpb, "blocks": MAX_BLOCKS_PER_SM[arch]}
    if regs and regs_per_cu:
        per_warp = -(-regs * warp_size // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        limits["registers"] = (regs_per_cu // per_warp) // wpb
    if smem_per_cu:
        reserved = SMEM_RESERVED_SM80 if int(arch.split("_")[1]) >= 80 else 0
        per_block = -(-((smem or 0) + reserved) // SMEM_ALLOC_UNIT) * SMEM_ALLOC_UNIT
        if per_block:
            limits["shared_memory"] = smem_per_cu // per_block
    factor = min(limits, key=lambda k: limits[k])
    return limits[factor], factor


def _align(value: int, granule: int) -> int:
    return -(-value // granule) * granule


@dataclass(frozen=True)
class AmdCu:
    """What the device states about its compute units (defaults: CDNA's)."""

    wave_size: int = 64  # threads per wavefront
    simd_per_cu: int = 4
    max_waves_per_cu: int = 32
    lds_per_cu: int | None = None  # bytes; None: the target's


def resident_workgroups_amd(
    target: AmdTarget, threads: int, vgprs: int | None, agprs: int | None, sgprs: int | None,
    lds: int | None, cu: AmdCu = AmdCu(),
) -> tuple[int, str] | None:
    """(resident workgroups per CU, limiting factor) of an AMD CDNA dispatch (module docstring (d));
    None when the workgroup cannot be resident (more waves or registers than a CU holds)."""
    wave_size, simd_per_cu, max_waves_per_cu = cu.wave_size, cu.simd_per_cu, cu.max_waves_per_cu
    if threads <= 0 or wave_size <= 0 or simd_per_cu <= 0:
        return None
    waves = -(-threads // wave_size)
    per_simd = max_waves_per_cu // simd_per_cu
    if waves > max_waves_per_cu or per_simd <= 0:
        return None
    limits = {"wave_slots": max_waves_per_cu // waves}
    if waves > 1:
        limits["barriers"] = min(limits["wave_slots"], target.max_barriers)
    if vgprs or agprs:
        arch, acc = vgprs or 0, agprs or 0
        total = _align(arch, target.arch_vgpr_granule) + acc if acc else arch
        occ = per_simd if total < target.vgpr_granule else min(
            per_simd, max(1, target.total_vgprs // _align(total, target.vgpr_granule)))
        limits["vgprs"] = occ * simd_per_cu // waves
    if sgprs:
        occ = min(per_simd, max(1, target.total_sgprs // _align(sgprs, target.sgpr_granule)))
        limits["sgprs"] = occ * simd_per_cu // waves
    if lds:
        limits["lds"] = max(1, (cu.lds_per_cu or target.lds_per_cu) // _align(lds, target.lds_granule))
    factor = min(limits, key=lambda k: limits[k])
    return (limits[factor], factor) if limits[factor] > 0 else None


def wave_stats(blocks: int, capacity: int) -> tuple[int, float, float]:
    """(waves, last-wave efficiency, wave efficiency)."""
    waves = -(-blocks // capacity)
    rem = blocks % capacity
    return waves, (rem / capacity if rem else 1.0), blocks / (waves * capacity)


def residency_efficiency(blocks: int, cus: int) -> float:
    """Useful share of a kernel's time under the residency model (module docstring (d)): an
    SM/CU's throughput is shared by its resident blocks, so its time ∝ the blocks it runs and the
    kernel's time ∝ ⌈blocks ÷ SMs⌉ (the busiest SM) against the ideal blocks ÷ SMs. The last wave
    of r blocks on C = SMs × R slots then costs ⌈r ÷ SMs⌉ ÷ R of a full wave, not a whole one."""
    per_sm = -(-blocks // cus)
    return blocks / (cus * per_sm) if per_sm else 1.0


# --------------------------------------------------------------------------------------------


def _severity(value: float, warning: float, info: float) -> Literal["warning", "info"] | None:
    """Warning at or above the ``warning`` threshold, info at or above ``info`` (a padding share
    never makes a finding critical), else None."""
    if value >= warning:
        return "warning"
    if value >= info:
        return "info"
    return None


def _bucket_metrics(time_fraction: float | None, token_fraction: float | None) -> list[Metric]:
    """``bucket_padding_fraction`` (of prefill time) and ``bucket_padded_token_fraction`` (of the
    processed tokens), both fractions."""
    return [Metric("bucket_padding_fraction", time_fraction, "fraction", "lower"),
            Metric("bucket_padded_token_fraction", token_fraction, "fraction", "lower")]


def _bucket_verdict(
    time_fraction: float, token_fraction: float, status: dict[str, Any], *, what: str, detail: str,
    evidence: dict[str, Any], saving: tuple[int | None, float | None] = (None, None),
) -> tuple[list[Finding], list[Metric], dict[str, Any]]:
    """The bucket-padding metrics, status and (when the wasted time fraction reaches a severity)
    finding. Time ∝ tokens is assumed, and said in the status and the evidence. The title reads
    "Sequence buckets pad N% of ``what``", the remedy follows ``detail``; ``saving`` in ns and as
    a fraction of the device window."""
    metrics = _bucket_metrics(time_fraction, token_fraction)
    status = {"bucket": {**status, "assumption": "time ∝ tokens"}}
    sev = _severity(time_fraction, BUCKET_WARNING_FRACTION, BUCKET_INFO_FRACTION)
    if sev is None:
        return [], metrics, status
    return [Finding(
        severity=sev,
        title=f"Sequence buckets pad {token_fraction:.0%} of {what}",
        detail=f"{detail} {_BUCKET_REMEDY}",
        evidence={**evidence, "assumption": "time ∝ tokens"},
        saving_ns=saving[0],
        saving_fraction=saving[1],
    )], metrics, status


#: One GEMM of the run: op, dims, (batch, M, N, K), executions, time (ns), element dtype, and the
#: op-level FLOP/byte of a fused attention kernel (else None).
_GemmItem = tuple[str, str, tuple[int, int, int, int], int, int, str | None, float | None]


def _gemm_items(con: duckdb.DuckDBPyConnection, run_id: str) -> list[_GemmItem]:
    """The run's GEMMs with shapes: PyTorch matmul/attention ops and XLA dot ops."""
    items: list[_GemmItem] = []
    for op, dims, types, n, t in con.execute(
        f"""SELECT op_name, input_dims, any_value(input_types), count(*), sum(dur_ns) FROM kernel_ops
            WHERE run_id = ? AND category = 'kernel' AND input_dims IS NOT NULL
              AND (op_name IN {_MM_OPS} OR op_name LIKE '%attention%')
            GROUP BY op_name, input_dims""",
        [run_id],
    ).fetchall():
        gemms = gemms_of_op(op, json.loads(dims))
        dtype = _torch_dtype(types)
        fused = None
        if "attention" in op and len(gemms) == 2:
            # both GEMMs in one kernel: 4·L·S·E FLOPs over Q, K, V, O read/written once
            _, lq, sk, _ = gemms[0]
            nbytes = _DTYPE_PEAK.get(dtype or "", (2, ""))[0]
            fused = 2 * lq * sk / (nbytes * (lq + sk)) if lq + sk else 0.0
        for g in gemms:
            items.append((op, dims, g, int(n), int(t) // len(gemms), dtype, fused))
    for name, hlo, n, t in con.execute(
        """SELECT o.name, o.hlo_text, count(*), sum(coalesce(k.device_dur_ns, k.dur_ns))
           FROM op_costs o JOIN kernels k USING (run_id, rank, device, op_metadata_id)
           WHERE o.run_id = ? AND k.category = 'kernel' AND o.hlo_text LIKE '% dot(%'
           GROUP BY ALL""",
        [run_id],
    ).fetchall():
        dot = dot_dims(hlo)
        if dot is not None:
            items.append((name, hlo.split(" = ")[0], dot, int(n), int(t), _hlo_dtype(hlo), None))
    return items


class PaddingWaste(Analyzer, name="padding_waste"):
    summary = "work spent on padding: XLA layout tiles, matrix-unit tile misfit, sequence buckets, GPU wave tails"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        checks: dict[str, Any] = {}
        findings: list[Finding] = []
        metrics: list[Metric] = []
        # the run's device window time (Σ run_window.window_ns); a run without device work (a CPU
        # capture's annotations only) falls back to its longest rank span
        window = run_window_ns(con, run_id) or con.execute(
            "SELECT max(last_ns - first_ns) FROM ranks WHERE run_id = ?", [run_id]
        ).fetchall()[0][0]
        for check in (self._layout, self._matrix, self._buckets, self._waves):
            found, measured, status = check(con, run_id, window)
            findings += found
            metrics += measured
            checks.update(status)
        for finding in findings:
            finding.evidence["checks"] = checks
        return AnalyzerResult(findings=findings, metrics=metrics)

    # (a) ------------------------------------------------------------------------------------
    def _layout(self, con: duckdb.DuckDBPyConnection, run_id: str, window: int | None) -> tuple[
        list[Finding], list[Metric], dict[str, Any]
    ]:
        rows = con.execute(
            """SELECT o.name, o.shape_with_layout, any_value(o.flops), count(*),
                      sum(coalesce(k.device_dur_ns, k.dur_ns))
               FROM op_costs o JOIN kernels k USING (run_id, rank, device, op_metadata_id)
               WHERE o.run_id = ? AND k.category = 'kernel' AND o.shape_with_layout LIKE '%:T(%'
               GROUP BY o.name, o.shape_with_layout ORDER BY 5 DESC""",
            [run_id],
        ).fetchall()
        status: dict[str, Any]
        if not rows:
            status = {"layout": "skipped: no op with a tiled shape_with_layout (XLA TPU captures carry them)"}
            return [], [Metric("layout_padding_fraction", None, "fraction", "lower")], status
        total = wasted = 0.0
        logical_sum = padded_sum = pad_flops = 0.0
        ops: list[dict[str, Any]] = []
        for name, shape, flops, n, t in rows:
            lb = layout_bytes(shape)
            if lb is None or lb[1] == 0:
                continue
            logical, padded = lb
            share = 1 - logical / padded
            total += float(t)
            wasted += float(t) * share
            logical_sum += logical * n
            padded_sum += padded * n
            extra_flops = float(flops or 0) * (padded / logical - 1) * n if logical else 0.0
            pad_flops += extra_flops
            ops.append({"op": name, "shape_with_layout": shape, "executions": int(n), "time_ns": int(t),
                        "logical_bytes": logical, "padded_bytes": padded, "padding_share": share,
                        "padding_flops": extra_flops})
        frac = wasted / total if total else 0.0
        metrics = [
            Metric("layout_padding_fraction", frac, "fraction", "lower"),
            Metric("layout_padded_bytes", padded_sum, "bytes", "lower"),
            Metric("layout_logical_bytes", logical_sum, "bytes", "lower"),
        ]
        status = {"layout": {"ops": len(ops), "time_ns": int(total), "padding_fraction": frac}}
        sev = _severity(frac, LAYOUT_WARNING_FRACTION, LAYOUT_INFO_FRACTION)
        if sev is None:
            return [], metrics, status
        worst = sorted(ops, key=lambda o: -o["time_ns"] * o["padding_share"])[:TOP]
        top = worst[0]
        return [Finding(
            severity=sev,
            title=f"XLA layout tiling pads {frac:.0%} of tiled-op time ({padded_sum / max(logical_sum, 1):.2f}× bytes)",
            detail=(
                f"Tiled layouts (e.g. {top['shape_with_layout']} of {top['op']}) store "
                f"{top['padded_bytes']} bytes for {top['logical_bytes']} logical. Make the minor "
                "dimensions multiples of the tile (128 lanes; 8 sublanes for 32-bit, 16 for bf16), "
                "e.g. pad head_dim 64 → 128 once in the weights or pack two heads per 128 lanes."
            ),
            evidence={"padded_bytes": padded_sum, "logical_bytes": logical_sum, "padding_flops": pad_flops,
                      "time_ns": int(total), "wasted_ns": int(wasted), "ops": worst},
            saving_ns=int(wasted),
            saving_fraction=wasted / window if window else None,
        )], metrics, status

    # (b) ------------------------------------------------------------------------------------
    def _matrix(self, con: duckdb.DuckDBPyConnection, run_id: str, window: int | None) -> tuple[
        list[Finding], list[Metric], dict[str, Any]
    ]:
        none = [Metric("matrix_unit_efficiency", None, "fraction", "higher")]
        cur = con.execute("SELECT * FROM devices WHERE run_id = ? ORDER BY rank, device", [run_id])
        cols = [d[0] for d in cur.description]
        devrows = [dict(zip(cols, r)) for r in cur.fetchall()]
        if not devrows:
            return [], none, {"matrix_unit": "skipped: the run lists no device"}
        row = devrows[0]
        if row.get("vendor") == "cpu":
            return [], none, {"matrix_unit": "skipped: the device is a CPU (XLA); the hardware catalog gives "
                              "CPUs no matrix unit, so head_dim/GEMM tile fit is not checked"}
        spec = identify(row)
        if spec is None:
            return [], none, {"matrix_unit": f"skipped: device {row.get('name')!r} is not identified in the "
                              "hardware catalog, so its matrix tile is unknown"}
        tile = matrix_tile_mnk(spec)
        if tile is None:
            return [], none, {"matrix_unit": f"skipped: the catalog states no parseable matrix tile for {spec.name}"}
        items = _gemm_items(con, run_id)
        if not items:
            return [], none, {"matrix_unit": {"device": spec.name, "tile_mnk": list(tile),
                                              "gemms": 0, "note": "no GEMM/attention op with shapes in the run"}}
        total = wasted = 0.0
        listed: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        for op, dims, (b, m, nn, k), n, t, dtype, fused in items:
            nbytes, peak_key = _DTYPE_PEAK.get(dtype or "", (2, "bf16"))
            ai = fused if fused is not None else gemm_intensity(m, nn, k, nbytes)
            ridge = _ridge(spec, peak_key)
            eff = tile_efficiency((m, nn, k), tile)
            rec = {"op": op, "shapes": dims, "batch": b, "m": m, "n": nn, "k": k, "dtype": dtype,
                   "executions": n, "time_ns": t, "efficiency": eff, "flop_per_byte": ai,
                   "ridge_flop_per_byte": ridge}
            # padding costs MACs, and MACs cost time only where the GEMM is compute-bound: a GEMV or
            # skinny GEMM (M ≤ 16) or one below the ridge is bound by its bytes, so no M-padding advice
            if m <= SKINNY_M:
                skipped.append({**rec, "why": f"M = {m} ≤ {SKINNY_M}: a GEMV/skinny GEMM, memory-bound"})
                continue
            if ridge is not None and ai < ridge:
                skipped.append({**rec, "why": f"{ai:.0f} FLOP/byte < ridge {ridge:.0f}: memory-bound"})
                continue
            total += t
            wasted += t * (1 - eff)
            listed.append(rec)
        skipped_ns = sum(x["time_ns"] for x in skipped)
        status: dict[str, Any] = {"matrix_unit": {
            "device": spec.name, "tile_mnk": list(tile), "gemms": len(listed),
            "memory_bound_gemms": len(skipped), "memory_bound_time_ns": skipped_ns}}
        if not listed:
            status["matrix_unit"]["note"] = f"every GEMM is memory-bound (M ≤ {SKINNY_M} or below the ridge)"
            return [], none, status
        eff_w = 1 - wasted / total if total else 1.0
        status["matrix_unit"]["efficiency"] = eff_w
        metrics = [Metric("matrix_unit_efficiency", eff_w, "fraction", "higher")]
        share = wasted / window if window else None
        sev = run_share_severity(share)
        if sev is None:
            return [], metrics, status
        worst = sorted(listed, key=lambda x: -x["time_ns"] * (1 - x["efficiency"]))[:TOP]
        w = worst[0]
        return [Finding(
            severity=sev,
            title=(f"GEMM dimensions misfit the {spec.name} matrix tile: ≤{duration_ns(wasted)} of padded "
                   f"MACs ({share:.1%} of the run window; {1 - eff_w:.0%} of compute-bound GEMM time)"),
            detail=(
                f"The matrix unit works on {tile[0]}×{tile[1]}×{tile[2]} (M×N×K) tiles; {w['op']} has "
                f"M={w['m']}, N={w['n']}, K={w['k']} ({w['efficiency']:.0%} useful, "
                f"{w['flop_per_byte']:.0f} FLOP/byte: compute-bound). Make head_dim, hidden and vocabulary "
                "sizes multiples of the tile, or pack heads so the padded dimension fills the tile. The "
                "saving assumes time ∝ padded MACs (an upper bound). "
                f"{len(skipped)} memory-bound GEMMs ({duration_ns(skipped_ns)}: M ≤ {SKINNY_M} or below the "
                "ridge) are left out: padding costs them no time."
            ),
            evidence={"tile_mnk": list(tile), "time_ns": int(total), "wasted_ns": int(wasted), "gemms": worst,
                      "memory_bound_gemms": sorted(skipped, key=lambda x: -x["time_ns"])[:TOP],
                      "memory_bound_time_ns": skipped_ns, "run_window_ns": window, "run_share": share},
            saving_ns=int(wasted),
            saving_fraction=share,
        )], metrics, status

    # (c) ------------------------------------------------------------------------------------
    def _buckets(self, con: duckdb.DuckDBPyConnection, run_id: str, window: int | None) -> tuple[
        list[Finding], list[Metric], dict[str, Any]
    ]:
        # XPlane TraceAnnotations are host TraceMe spans (view `tracemes`), Kineto's are annotations.
        rows = con.execute(
            """WITH a AS (
                 SELECT run_id, rank, name, start_ns, start_ns + dur_ns AS end_ns, dur_ns
                 FROM annotations WHERE run_id = ? AND regexp_matches(name, 'len[0-9]+_T[0-9]+')
                 UNION ALL
                 SELECT run_id, rank, name, start_ns, end_ns, dur_ns
                 FROM tracemes WHERE run_id = ? AND regexp_matches(name, 'len[0-9]+_T[0-9]+'))
               SELECT a.name, a.start_ns, a.dur_ns,
                      (SELECT sum(k.dur_ns) FROM kernels k WHERE k.run_id = a.run_id AND k.rank = a.rank
                         AND k.category = 'kernel' AND k.start_ns >= a.start_ns AND k.start_ns < a.end_ns),
                      (SELECT sum(c.dur_ns) FROM compiles c WHERE c.run_id = a.run_id AND c.rank = a.rank
                         AND c.start_ns >= a.start_ns AND c.end_ns <= a.end_ns)
               FROM a ORDER BY a.start_ns""",
            [run_id, run_id],
        ).fetchall()
        none = _bucket_metrics(None, None)
        calls = []
        for name, start, dur, kern, comp in rows:
            m = _BUCKET.search(name)
            if m is None:
                continue
            real, padded = int(m.group(1)), int(m.group(2))
            if padded <= 0 or real > padded:
                continue
            t = int(kern) if kern else max(int(dur) - int(comp or 0), 0)
            calls.append({"annotation": name, "start_ns": int(start), "real_tokens": real, "padded_tokens": padded,
                          "time_ns": t, "time_source": "kernels" if kern else "span minus compiles",
                          "padding_share": (padded - real) / padded})
        if not calls:
            return self._buckets_from_lengths(con, run_id, none)
        total = sum(c["time_ns"] for c in calls)
        wasted = sum(c["time_ns"] * c["padding_share"] for c in calls)
        frac = wasted / total if total else 0.0
        tok = sum(c["padded_tokens"] - c["real_tokens"] for c in calls) / sum(c["padded_tokens"] for c in calls)
        return _bucket_verdict(
            frac, tok, {"calls": len(calls), "padding_fraction": frac, "padded_token_fraction": tok},
            what=f"prefill tokens (≈{frac:.0%} of prefill time)",
            detail=(f"{len(calls)} prefill calls ran padded lengths; assuming time ∝ tokens, {duration_ns(wasted)} "
                    f"of {duration_ns(total)} went to padding."),
            evidence={"calls": calls, "time_ns": total, "wasted_ns": int(wasted)},
            saving=(int(wasted), wasted / window if window else None),
        )

    @staticmethod
    def _buckets_from_lengths(
        con: duckdb.DuckDBPyConnection, run_id: str, none: list[Metric]
    ) -> tuple[list[Finding], list[Metric], dict[str, Any]]:
        """Bucket padding from a lengths file (`tracekit analyze RUN --lengths FILE`): real vs
        padded tokens per request; no per-call times, so only the token share is known."""
        n, real, padded = con.execute(
            "SELECT count(*), sum(real_tokens), sum(padded_tokens) FROM token_lengths WHERE run_id = ?",
            [run_id],
        ).fetchall()[0]
        if not n:
            return [], none, {"bucket": "skipped: no annotation names real and padded lengths "
                              "(`…len<n>_T<T>`) and no lengths file was given (--lengths)"}
        tok = (int(padded) - int(real)) / int(padded) if padded else 0.0
        return _bucket_verdict(
            tok, tok, {"requests": int(n), "padded_token_fraction": tok, "source": "lengths file"},
            what=f"prompt tokens ({n} requests from the lengths file)",
            detail=(f"{int(padded) - int(real):,} of {int(padded):,} processed prompt tokens were padding; "
                    "assuming time ∝ tokens, that share of prefill time is wasted."),
            evidence={"requests": int(n), "real_tokens": int(real), "padded_tokens": int(padded),
                      "source": "lengths file"},
        )

    # (d) ------------------------------------------------------------------------------------
    def _waves(self, con: duckdb.DuckDBPyConnection, run_id: str, window: int | None) -> tuple[
        list[Finding], list[Metric], dict[str, Any]
    ]:
        none = [Metric("last_wave_efficiency", None, "fraction", "higher"),
                Metric("wave_quantization_fraction", None, "fraction", "lower")]
        groups = _nvidia_wave_groups(con, run_id) + _amd_wave_groups(con, run_id)
        all_ns = con.execute(
            "SELECT sum(dur_ns) FROM kernels WHERE run_id = ? AND category = 'kernel'", [run_id]
        ).fetchall()[0][0]
        if not groups:
            return [], none, {"waves": "skipped: no kernel with a grid, a block/workgroup size and an SM/CU "
                              "count (the trace's devices row or the hardware catalog)"}
        # persistent, split-K/stream-K, attention and collective kernels size their grids to the
        # device on purpose (by_design_low_occupancy, the SQL library's one definition): no tail advice
        by_design = {name for (name,) in con.execute(
            "SELECT DISTINCT name FROM device_work WHERE run_id = ? AND category = 'kernel' AND by_design",
            [run_id]).fetchall()}
        multi_ns = multi_eff = wasted = upper = under_ns = design_ns = 0.0
        unknown = under = design = 0
        unmodelled: dict[str, int] = {}
        kernels: list[dict[str, Any]] = []
        for g in groups:
            res, blocks, cus, n, t = g["resident"], g["blocks"], g["cus"], g["launches"], g["time_ns"]
            if g["kernel"] in by_design:
                design += n
                design_ns += t
                continue
            if res is None or res[0] <= 0 or not blocks:
                unknown += n
                if g.get("why"):
                    unmodelled[g["why"]] = unmodelled.get(g["why"], 0) + n
                continue
            cap = cus * res[0]
            waves, last, eff = wave_stats(blocks, cap)
            if waves <= 1:
                if blocks < cus:
                    under += n
                    under_ns += t
                continue
            res_eff = residency_efficiency(blocks, cus)
            multi_ns += t
            multi_eff += t * last
            wasted += t * (1 - res_eff)
            upper += t * (1 - eff)
            unit = "cu" if g["vendor"] == "amd" else "sm"
            tail = blocks - (waves - 1) * cap
            kernels.append({"kernel": g["kernel"], "vendor": g["vendor"], "blocks": blocks,
                            "threads_per_block": g["threads"], f"resident_blocks_per_{unit}": res[0],
                            "limited_by": res[1], f"{unit}s": cus, "waves": waves, "last_wave_blocks": tail,
                            f"last_wave_blocks_per_{unit}": -(-tail // cus), "last_wave_efficiency": last,
                            "wave_efficiency": eff, "residency_efficiency": res_eff, "launches": n,
                            "time_ns": t,
                            "wasted_ns": int(t * (1 - res_eff)), "upper_bound_wasted_ns": int(t * (1 - eff)),
                            **g.get("extra", {})})
        if unknown == sum(g["launches"] for g in groups) - design:
            if design and not unknown:
                return [], none, {"waves": f"skipped: every modelled launch ({design}) is a by-design kernel "
                                  "(persistent, split-K, attention, collective)"}
            reasons = "; ".join(f"{n} launches: {why}" for why, n in unmodelled.items()) or "no block limit known"
            return [], none, {"waves": f"skipped: no launch could be modelled ({reasons})"}
        lw = multi_eff / multi_ns if multi_ns else None
        frac = wasted / all_ns if all_ns else 0.0
        metrics = [Metric("last_wave_efficiency", lw, "fraction", "higher"),
                   Metric("wave_quantization_fraction", frac, "fraction", "lower")]
        share = wasted / window if window else None
        status = {"waves": {"multi_wave_kernel_time_ns": int(multi_ns), "last_wave_efficiency": lw,
                            "quantization_fraction": frac, "wasted_ns": int(wasted),
                            "upper_bound_wasted_ns": int(upper), "run_share": share,
                            "underfilled_launches": under, "underfilled_time_ns": int(under_ns),
                            "by_design_launches": design, "by_design_time_ns": int(design_ns),
                            "launches_without_block_limit": unknown, "launches_not_modelled": unmodelled}}
        sev = run_share_severity(share)
        if sev is None or lw is None:
            return [], metrics, status
        worst = sorted(kernels, key=lambda x: (-x["wasted_ns"], -x["upper_bound_wasted_ns"]))[:TOP]
        w = worst[0]
        amd = w["vendor"] == "amd"
        unit = "cu" if amd else "sm"
        cus, res_key = w[f"{unit}s"], f"resident_blocks_per_{unit}"
        blocks_word, sm_word, one = ("workgroups", "CUs", "a CU") if amd else ("blocks", "SMs", "an SM")
        bound = (f"; ≤{duration_ns(upper)} if per-block time is fixed" if upper > wasted * 1.005
                 else "; one resident per SM/CU, so a full wave either way")
        return [Finding(
            severity=sev,
            title=(f"GPU wave tails cost ≈{duration_ns(wasted)} ({share:.1%} of the run window{bound}), "
                   f"last-wave efficiency {lw:.0%}"),
            detail=(
                f"{w['kernel'][:80]} launches {w['blocks']} {blocks_word} on {cus} {sm_word} × "
                f"{w[res_key]} resident (limited by {w['limited_by']}) = {w['waves']} waves, the last "
                f"{w['last_wave_efficiency']:.0%} full ({w['last_wave_blocks']} {blocks_word}, "
                f"≤{w[f'last_wave_blocks_per_{unit}']} per {sm_word[:-1]}). Model: {one}'s throughput "
                f"is shared by its resident {blocks_word}, so a partial wave of r {blocks_word} on C "
                f"slots costs ⌈r ÷ {sm_word}⌉ ÷ resident of a full wave (≈{duration_ns(wasted)} over the "
                "run); it costs a whole wave only when per-block time is fixed (latency-bound, or 1 "
                f"resident): the upper bound {duration_ns(upper)}. Pick tile sizes (or split-K / "
                f"stream-K) so that {blocks_word} fill whole waves"
                + (", or free the limiting resource (VGPRs/AGPRs, LDS) so more workgroups fit per CU."
                   if amd else ".")
            ),
            evidence={"kernel_time_ns": int(all_ns or 0), "wasted_ns": int(wasted),
                      "upper_bound_wasted_ns": int(upper),
                      "model": "residency: kernel time ∝ ⌈blocks ÷ SMs⌉; upper bound: every wave, the last "
                               "included, takes a full wave's time",
                      "run_window_ns": window, "run_share": share, "by_design_launches": design,
                      "by_design_time_ns": int(design_ns), "kernels": worst},
            saving_ns=int(wasted),
            saving_fraction=share,
        )], metrics, status


def _nvidia_wave_groups(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """One dict per distinct NVIDIA launch shape: resident blocks per SM by the CUDA calculator."""
    out = []
    for (name, arch, sms, ws, mtc, rpc, spc, blocks, threads, regs, smem, n, t) in con.execute(
        """SELECT k.name, d.arch, d.compute_units, d.warp_size, d.max_threads_per_cu, d.regs_per_cu,
                  d.shared_mem_per_cu_bytes, k.grid_x * k.grid_y * k.grid_z AS blocks,
                  k.block_x * k.block_y * k.block_z AS threads, k.registers_per_thread,
                  k.shared_mem_bytes, count(*), sum(k.dur_ns)
           FROM kernels k JOIN devices d USING (run_id, rank, device)
           WHERE k.run_id = ? AND k.category = 'kernel' AND d.vendor = 'nvidia'
             AND k.grid_x IS NOT NULL AND k.block_x IS NOT NULL AND d.compute_units > 0
           GROUP BY ALL""",
        [run_id],
    ).fetchall():
        res = resident_blocks(arch, int(threads), regs, smem, int(ws or 32), int(mtc or 2048), rpc, spc)
        out.append({"kernel": name, "vendor": "nvidia", "blocks": int(blocks or 0), "threads": int(threads),
                    "cus": int(sms), "resident": res, "launches": int(n), "time_ns": float(t)})
    return out


def _amd_device_shapes(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (rank, device): CUs, wave size, SIMDs and wave slots per CU, LDS per CU and the gfx
    target, from the devices row, else from the hardware catalog (partition-scaled)."""
    cur = con.execute("SELECT * FROM devices WHERE run_id = ? AND vendor = 'amd'", [run_id])
    cols = [d[0] for d in cur.description]
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for row in cur.fetchall():
        rec = dict(zip(cols, row))
        spec = None
        if rec.get("compute_units") is None or rec.get("arch") is None or rec.get("max_waves_per_cu") is None:
            spec = identify(rec)
        arch = rec.get("arch") or (spec.match.arch[0] if spec is not None and len(spec.match.arch) == 1 else None)
        out[(int(rec["rank"]), int(rec["device"]))] = {
            "arch": arch,
            "cus": rec.get("compute_units") or (spec.compute_units if spec is not None else None),
            "wave_size": rec.get("warp_size") or (spec.warp_size if spec is not None else None) or 64,
            "simd_per_cu": rec.get("simd_per_cu") or 4,
            "max_waves_per_cu": rec.get("max_waves_per_cu") or (spec.max_warps_per_cu if spec is not None else None),
            "lds_per_cu": rec.get("shared_mem_per_cu_bytes"),
            "source": "trace" if spec is None else f"hardware catalog ({spec.name})",
        }
    return out


def _amd_wave_groups(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """One dict per distinct AMD dispatch shape: resident workgroups per CU (module docstring (d))."""
    shapes = _amd_device_shapes(con, run_id)
    if not shapes:
        return []
    out = []
    for (rank, device, name, blocks, threads, vgpr, agpr, sgpr, lds, n, t) in con.execute(
        """SELECT rank, device, name, grid_x * grid_y * grid_z, block_x * block_y * block_z,
                  vgpr_count, accum_vgpr_count, sgpr_count, shared_mem_bytes, count(*), sum(dur_ns)
           FROM kernels WHERE run_id = ? AND category = 'kernel' AND grid_x IS NOT NULL
             AND block_x IS NOT NULL AND device IS NOT NULL
           GROUP BY ALL""",
        [run_id],
    ).fetchall():
        shape = shapes.get((int(rank), int(device)))
        if shape is None:
            continue
        target = AMD_TARGETS.get(str(shape["arch"]).lower())
        why = None
        res = None
        if not shape["cus"]:
            why = "no CU count (the trace states none and the device is not identified in the catalog)"
        elif target is None or not shape["max_waves_per_cu"]:
            why = f"occupancy of {shape['arch'] or 'an unknown gfx target'} is not modelled (CDNA gfx90a/gfx94x/gfx950 only)"
        else:
            res = resident_workgroups_amd(
                target, int(threads), vgpr, agpr, sgpr, lds, AmdCu(
                    wave_size=int(shape["wave_size"]), simd_per_cu=int(shape["simd_per_cu"]),
                    max_waves_per_cu=int(shape["max_waves_per_cu"]), lds_per_cu=shape["lds_per_cu"] or target.lds_per_cu))
        missing = [k for k, v in (("vgprs", vgpr if vgpr or agpr else None), ("sgprs", sgpr)) if v is None]
        extra: dict[str, Any] = {"arch": shape["arch"], "vgprs": vgpr, "agprs": agpr, "sgprs": sgpr,
                                 "lds_bytes": lds, "device_source": shape["source"]}
        if missing:
            extra["limits_unknown"] = missing  # an upper bound on residency
        out.append({"kernel": name, "vendor": "amd", "blocks": int(blocks or 0), "threads": int(threads),
                    "cus": int(shape["cus"] or 0), "resident": res, "why": why, "launches": int(n),
                    "time_ns": float(t), "extra": extra})
    return out
