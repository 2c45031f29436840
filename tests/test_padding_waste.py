"""padding_waste on real captures: every number is recomputed here from the trace files (JSON,
jax's ProfileData) or from the store's raw strings with an independent parser."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS, KINETO, SAMPLES

import tracekit
from tracekit.analysis.base import AnalyzerResult
from tracekit.analysis.padding_waste import PaddingWaste, layout_bytes, tile_efficiency

JAX = SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz"
TPU = CORPUS / "xplane" / "xprof_tpu_v6e_inference" / "tpu_inference_2.xplane.pb"
A100 = KINETO / "hta-a100-train-rank0of16"
H100 = KINETO / "tracelens-h100-qwen05b-inference"


def _skip_without(path: Path) -> Any:
    return pytest.mark.skipif(
        not path.exists(),
        reason=f"real-trace corpus file {path} not found (only in the project's workspace and CI)",
    )


def _analyze(path: Path, tmp_path: Path) -> tuple[AnalyzerResult, duckdb.DuckDBPyConnection, str]:
    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([path], store=store)
    con = duckdb.connect(str(store), read_only=True)
    return PaddingWaste().analyze(con, run.run_id), con, run.run_id


def _metrics(res: AnalyzerResult) -> dict[str, float | None]:
    return {m.name: m.value for m in res.metrics}


# ---- (a) layout tiling ------------------------------------------------------------------------

_ELEM = {"f32": 4, "bf16": 2, "u32": 4, "s32": 4, "f16": 2, "s8": 1}


def _my_padded(shape: str) -> tuple[int, int]:
    """Independent parse: (logical, padded) bytes of an XLA shape string; only the first tile
    matters for the shapes checked here (later tiles like (2,1) divide it)."""
    logical = padded = 0
    for dt, dims, layout in re.findall(r"(\w+)\[([\d,]*)\](?:\{([^}]*)\})?", shape):
        sizes = [int(x) for x in dims.split(",") if x]
        m2m_text, tiles = (layout.split(":", 1) + [""])[:2] if layout else ("", "")
        m2m = [int(x) for x in m2m_text.split(",") if x] or list(range(len(sizes)))[::-1]
        phys = [sizes[i] for i in m2m[::-1]]
        tm = re.match(r"T\(([\d,]+)\)", tiles)
        tile = [int(x) for x in tm.group(1).split(",")] if tm else []
        while len(phys) < len(tile):
            phys.insert(0, 1)
        for j, t in enumerate(reversed(tile)):
            i = len(phys) - 1 - j
            phys[i] = math.ceil(phys[i] / t) * t
        logical += math.prod(sizes) * _ELEM[dt]
        padded += math.prod(phys) * _ELEM[dt]
    return logical, padded


def test_layout_bytes_hand_cases() -> None:
    cases = {
        "bf16[8,64]{1,0:T(16,128)(2,1)}": (8 * 64 * 2, 16 * 128 * 2),  # head_dim 64 in bf16: 4x
        "f32[]{:T(128)S(6)}": (4, 128 * 4),  # scalar in a 128-lane tile
        "f32[2,3,64]{2,1,0:T(8,128)}": (2 * 3 * 64 * 4, 2 * 8 * 128 * 4),
        "f32[4,64]{0,1:T(8,128)}": (4 * 64 * 4, 64 * 128 * 4),  # dim 0 is minor
        "(f32[8,128]{1,0:T(8,128)}, u32[]{:S(2)})": (8 * 128 * 4 + 4, 8 * 128 * 4 + 4),
    }
    for shape, expected in cases.items():
        assert layout_bytes(shape) == expected == _my_padded(shape), shape


@_skip_without(TPU)
def test_tpu_v6e_layout_padding_matches_independent_parse(tmp_path: Path) -> None:
    res, con, run_id = _analyze(TPU, tmp_path)
    rows = con.execute(
        """SELECT c.shape_with_layout, k.device_dur_ns, k.dur_ns FROM kernels k, op_costs c
           WHERE k.run_id = c.run_id AND k.rank = c.rank AND k.device = c.device
             AND k.op_metadata_id = c.op_metadata_id AND k.category = 'kernel'
             AND c.shape_with_layout LIKE '%T(%' AND k.run_id = ?""",
        [run_id],
    ).fetchall()
    assert rows
    logical = padded = 0
    t_all = t_pad = 0.0
    for shape, ddur, dur in rows:
        lo, pa = _my_padded(shape)
        logical, padded = logical + lo, padded + pa
        t = ddur if ddur is not None else dur
        t_all += t
        t_pad += t * (1 - lo / pa)
    m = _metrics(res)
    assert m["layout_logical_bytes"] == logical and m["layout_padded_bytes"] == padded
    assert m["layout_padding_fraction"] == pytest.approx(t_pad / t_all, abs=1e-12)
    # the v6e capture's arrays ([5,1024,1024,256] f32 under T(8,128)) fill their tiles: no finding
    assert padded == logical and not [f for f in res.findings if "layout" in f.title]
    # the TPU is identified, but the capture has no dot: nothing to check for the matrix unit
    assert m["matrix_unit_efficiency"] is None


# ---- (c) sequence buckets and (b) skipped on CPU ----------------------------------------------


def test_jax_bucket_padding_from_annotations(tmp_path: Path) -> None:
    from jax.profiler import ProfileData

    pd = ProfileData.from_serialized_xspace(gzip.decompress(JAX.read_bytes()))
    spans: list[tuple[int, int, float, float]] = []
    xla_ops: list[tuple[float, float]] = []
    for plane in pd.planes:
        for line in plane.lines:
            for e in line.events:
                m = re.fullmatch(r"prefill_len(\d+)_T(\d+)", e.name)
                if m:
                    spans.append((int(m.group(1)), int(m.group(2)), e.start_ns, e.start_ns + e.duration_ns))
                elif line.name.startswith(("tf_XLAEigen", "tf_XLAPjRtCpuClient")) and "hlo_op" in dict(e.stats):
                    xla_ops.append((e.start_ns, e.duration_ns))
    assert len(spans) == 7
    total = wasted = 0.0
    for n, t_pad, s, e in spans:
        t = sum(d for st, d in xla_ops if s <= st < e)  # XLA op time inside the prefill
        total += t
        wasted += t * (t_pad - n) / t_pad
    tokens = sum(t - n for n, t, *_ in spans) / sum(t for _, t, *_ in spans)

    res, _, _ = _analyze(JAX, tmp_path)
    m = _metrics(res)
    assert m["bucket_padded_token_fraction"] == pytest.approx(tokens, abs=1e-12)
    assert tokens == pytest.approx(39 / 172)  # README table: padded 7 + 2 + 19 + 11 of 172
    assert m["bucket_padding_fraction"] == pytest.approx(wasted / total, rel=1e-4)
    [f] = [f for f in res.findings if f.title.startswith("Sequence buckets")]
    assert f.severity == "warning" and f.saving_ns == pytest.approx(wasted, rel=1e-4)
    assert [c["padded_tokens"] - c["real_tokens"] for c in f.evidence["calls"]] == [t - n for n, t, *_ in spans]
    # (b): a CPU has no matrix unit in the catalog; the reason is stated, the metric is NULL
    assert "CPU" in f.evidence["checks"]["matrix_unit"] and f.evidence["checks"]["matrix_unit"].startswith("skipped")
    assert m["matrix_unit_efficiency"] is None and m["layout_padding_fraction"] is None


# ---- (d) wave quantization ---------------------------------------------------------------------

_MAX_BLOCKS = {(8, 0): 32, (9, 0): 32}


def _my_resident(k: dict[str, Any], dev: dict[str, Any]) -> int:
    """Occupancy calculator written out here: min of the warp, block, register and shared-memory
    limits (register allocation per warp in 256s, 1 KiB reserved shared memory per block)."""
    threads = k["block"][0] * k["block"][1] * k["block"][2]
    warps = -(-threads // 32)
    lim = [dev["maxThreadsPerMultiprocessor"] // 32 // warps, _MAX_BLOCKS[(dev["computeMajor"], dev["computeMinor"])]]
    regs = k["registers per thread"]
    if regs:
        lim.append(dev["regsPerMultiprocessor"] // (math.ceil(regs * 32 / 256) * 256) // warps)
    lim.append(dev["sharedMemPerMultiprocessor"] // (math.ceil((k["shared memory"] + 1024) / 128) * 128))
    return min(lim)


def _kineto(path: Path) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    [f] = list(path.glob("*.json*"))
    data = json.loads(gzip.decompress(f.read_bytes()))
    devs = {int(d["id"]): d for d in data["deviceProperties"]}
    return [e for e in data["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"], devs


@_skip_without(A100)
def test_a100_wave_quantization_recomputed_from_json(tmp_path: Path) -> None:
    kernels, devs = _kineto(A100)
    multi_t = multi_last = wasted = all_t = 0.0
    checked = 0
    for e in kernels:
        a, dur = e["args"], round(e["dur"] * 1000)
        all_t += dur
        dev = devs[a["device"]]
        res = _my_resident(a, dev)
        threads = a["block"][0] * a["block"][1] * a["block"][2]
        # Kineto's occupancy (CUDA's occupancy API) implies the resident blocks when the grid
        # exceeds them; the calculator must agree wherever Kineto computed one
        occ = a["est. achieved occupancy %"]
        if occ > 0 and a["warps per SM"] > res * threads / 32 + 0.5:
            assert occ / 100 * 64 / math.ceil(threads / 32) == pytest.approx(res, abs=0.05), e["name"]
            checked += 1
        blocks = a["grid"][0] * a["grid"][1] * a["grid"][2]
        cap = dev["numSms"] * res
        waves = math.ceil(blocks / cap)
        if waves > 1:
            multi_t += dur
            multi_last += dur * ((blocks % cap) / cap if blocks % cap else 1.0)
            wasted += dur * (1 - blocks / (waves * cap))
    assert checked >= 500  # kernels whose Kineto occupancy pins the resident count
    res, _, _ = _analyze(A100, tmp_path)
    m = _metrics(res)
    assert m["last_wave_efficiency"] == pytest.approx(multi_last / multi_t, rel=1e-9)
    assert m["wave_quantization_fraction"] == pytest.approx(wasted / all_t, rel=1e-9)
    [f] = [f for f in res.findings if f.title.startswith("GPU wave tails")]
    assert f.saving_ns == pytest.approx(wasted, abs=2)
    top = f.evidence["kernels"][0]
    assert top["waves"] == math.ceil(top["blocks"] / (108 * top["resident_blocks_per_sm"]))


# ---- (b) matrix tile on an identified GPU -----------------------------------------------------


@_skip_without(H100)
def test_h100_matrix_tile_efficiency_recomputed_from_json(tmp_path: Path) -> None:
    [f] = list(H100.glob("*.json*"))
    events = json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
    ops = {e["args"].get("External id"): e for e in events if e.get("cat") == "cpu_op"}
    tile = (64, 8, 16)  # H100 wgmma m64nNk16, N a multiple of 8 (PTX ISA)
    total = useful = 0.0
    for e in events:
        if e.get("cat") != "kernel":
            continue
        op = ops.get(e["args"].get("External id"))
        if op is None:
            continue
        dims, t = op["args"]["Input Dims"], round(e["dur"] * 1000)
        if op["name"] in ("aten::mm", "aten::bmm"):
            gemms = [(dims[0][-2], dims[1][-1], dims[0][-1])]
        elif op["name"] == "aten::addmm":
            gemms = [(dims[1][0], dims[2][1], dims[1][1])]
        elif op["name"] == "aten::_flash_attention_forward":  # q [B, L, H, E]
            _, seq, _, hd = dims[0]
            gemms = [(seq, dims[1][1], hd), (seq, hd, dims[1][1])]
        else:
            continue
        for g in gemms:
            total += t / len(gemms)
            useful += t / len(gemms) * math.prod(g) / math.prod(math.ceil(d / s) * s for d, s in zip(g, tile))
    res, _, _ = _analyze(H100, tmp_path)
    assert _metrics(res)["matrix_unit_efficiency"] == pytest.approx(useful / total, rel=1e-6)
    assert tile_efficiency((559, 559, 64), tile) == pytest.approx(559 * 559 / (576 * 560))


def test_bucket_padding_from_a_lengths_file(tmp_path: Path) -> None:
    """`tracekit analyze RUN --lengths FILE`: the padded-token share of the requests in the file."""
    import json as _json

    from helpers import run_cli

    store = tmp_path / "s.duckdb"
    [run] = tracekit.ingest([SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"], store=store)
    pairs = [(9, 16), (14, 16), (21, 32), (45, 64), (30, 30)]
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("real,padded\n" + "\n".join(f"{r},{p}" for r, p in pairs[:-1]) + f"\n{pairs[-1][0]}\n")
    res = run_cli("analyze", run.run_id, "--store", str(store), "--lengths", str(lengths), "-f", "json")
    assert res.returncode == 0, res.stderr
    out = _json.loads(res.stdout)[0]
    want = sum(p - r for r, p in pairs) / sum(p for _, p in pairs)
    metrics = {m["name"]: m["value"] for m in out["metrics"] if m["analyzer"] == "padding_waste"}
    assert metrics["bucket_padded_token_fraction"] == pytest.approx(want)
    [finding] = [f for f in out["findings"] if f["analyzer"] == "padding_waste" and "lengths file" in f["title"]]
    assert finding["evidence"]["requests"] == len(pairs)
    bad = tmp_path / "bad.txt"
    bad.write_text("12\nlots\n")
    res = run_cli("analyze", run.run_id, "--store", str(store), "--lengths", str(bad))
    assert res.returncode == 2 and res.stderr.strip() == (
        f"error: {bad}: line 2: expected 'real[,padded]' token counts, got 'lots'"
    )
    res = run_cli("analyze", "--all", "--store", str(store), "--lengths", str(lengths))
    assert res.returncode == 2 and "exactly one RUN" in res.stderr


# ---- (d) AMD wave quantization -----------------------------------------------------------------

ROCPD_SAMPLE = SAMPLES / "amd_synthetic_rocpd" / "27182_results.db"
V3 = CORPUS / "rocprof" / "rocpd-v3-sample"
RPD_VLLM = CORPUS / "rocprof" / "rpd" / "vllm_mi300_mytrace.rpd.gz"


def _my_amd_resident(threads: int, vgpr: int, agpr: int, sgpr: int, lds: int, lds_per_cu: int = 65536) -> int:
    """CDNA3 occupancy written out here (LLVM AMDGPUBaseInfo / HIP occupancy API): 4 SIMDs × 8 wave
    slots, 512 unified VGPRs per lane in granules of 8 (arch VGPRs aligned to 4 before the AGPRs),
    800 SGPRs in granules of 16, LDS in 512-B granules, 16 barriers per CU for multi-wave groups."""
    waves = math.ceil(threads / 64)
    candidates = [32 // waves]
    if waves > 1:
        candidates.append(16)
    regs = (math.ceil(vgpr / 4) * 4 + agpr) if agpr else vgpr
    if regs:
        per_simd = 8 if regs < 8 else max(1, min(8, 512 // (math.ceil(regs / 8) * 8)))
        candidates.append(per_simd * 4 // waves)
    if sgpr:
        candidates.append(max(1, min(8, 800 // (math.ceil(sgpr / 16) * 16))) * 4 // waves)
    if lds:
        candidates.append(max(1, lds_per_cu // (math.ceil(lds / 512) * 512)))
    return min(candidates)


def _expected_waves(rows: list[tuple[int, int, int, int, int, int, int]], cus: int) -> tuple[float, float, float]:
    """(last-wave efficiency, quantization fraction, wasted ns) from raw rows of
    (workgroups, threads, vgpr, agpr, sgpr, lds, dur_ns)."""
    all_t = sum(r[6] for r in rows)
    multi_t = last = wasted = 0.0
    for wgs, threads, vgpr, agpr, sgpr, lds, dur in rows:
        cap = cus * _my_amd_resident(threads, vgpr, agpr, sgpr, lds)
        waves = math.ceil(wgs / cap)
        if waves > 1:
            multi_t += dur
            last += dur * ((wgs % cap) / cap if wgs % cap else 1.0)
            wasted += dur * (1 - wgs / (waves * cap))
    return last / multi_t, wasted / all_t, wasted


def _rocpd_rows(db: Path) -> tuple[list[tuple[int, int, int, int, int, int, int]], int]:
    """Raw dispatch rows of a rocpd database (grid in work-items → workgroups) and the GPU's CUs."""
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(
        """SELECT ((d.grid_size_x + d.workgroup_size_x - 1) / d.workgroup_size_x)
                * ((d.grid_size_y + d.workgroup_size_y - 1) / d.workgroup_size_y)
                * ((d.grid_size_z + d.workgroup_size_z - 1) / d.workgroup_size_z),
                  d.workgroup_size_x * d.workgroup_size_y * d.workgroup_size_z,
                  s.arch_vgpr_count, s.accum_vgpr_count, s.sgpr_count, d.group_segment_size, d."end" - d.start
           FROM rocpd_kernel_dispatch d JOIN rocpd_info_kernel_symbol s ON s.id = d.kernel_id"""
    ).fetchall()
    [(cus,)] = con.execute(
        "SELECT DISTINCT json_extract(a.extdata, '$.cu_count') FROM rocpd_info_agent a "
        "JOIN rocpd_kernel_dispatch d ON d.agent_id = a.id").fetchall()
    con.close()
    return rows, int(cus)


def _check_waves(path: Path, tmp_path: Path, rows: list[tuple[int, int, int, int, int, int, int]],
                 cus: int) -> Any:
    """Analyze ``path``; its wave metrics and finding must match those computed from ``rows``."""
    lw, frac, wasted = _expected_waves(rows, cus)
    res, _, _ = _analyze(path, tmp_path)
    m = _metrics(res)
    assert m["last_wave_efficiency"] == pytest.approx(lw, rel=1e-12)
    assert m["wave_quantization_fraction"] == pytest.approx(frac, rel=1e-12)
    [f] = [f for f in res.findings if f.title.startswith("GPU wave tails")]
    assert f.saving_ns == pytest.approx(wasted, abs=2)
    return f


def test_amd_wave_quantization_rocpd_sample_and_cpx(tmp_path: Path) -> None:
    import shutil
    import sqlite3

    rows, cus = _rocpd_rows(ROCPD_SAMPLE)
    assert cus == 304
    _, frac, _ = _expected_waves(rows, cus)
    f = _check_waves(ROCPD_SAMPLE, tmp_path, rows, cus)
    top = f.evidence["kernels"][0]
    # the MT64x32x256 GEMM: 448 workgroups, LDS 33792 B → one per CU (64 KiB), 304 CUs → 2 waves
    assert (top["blocks"], top["resident_blocks_per_cu"], top["limited_by"], top["waves"]) == (448, 1, "lds", 2)
    assert top["last_wave_efficiency"] == pytest.approx(144 / 304)
    assert "448 workgroups on 304 CUs" in f.detail

    # CPX partition: the same capture on a 38-CU, 1-XCC partition (the trace states the CU count)
    cpx = tmp_path / "cpx" / "27182_results.db"
    cpx.parent.mkdir()
    shutil.copy(ROCPD_SAMPLE, cpx)
    con = sqlite3.connect(cpx)
    [table] = [t for (t,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd_info_agent_%'")]
    con.execute(f"""UPDATE {table} SET extdata = json_set(extdata, '$.cu_count', 38, '$.num_xcc', 1,
                    '$.simd_count', 152) WHERE type = 'GPU'""")
    con.commit()
    con.close()
    rows_cpx, cus_cpx = _rocpd_rows(cpx)
    assert cus_cpx == 38
    lw_cpx, frac_cpx, _ = _expected_waves(rows_cpx, 38)
    res_cpx, _, _ = _analyze(cpx, tmp_path / "cpx")
    m_cpx = _metrics(res_cpx)
    assert m_cpx["last_wave_efficiency"] == pytest.approx(lw_cpx, rel=1e-12)
    assert m_cpx["wave_quantization_fraction"] == pytest.approx(frac_cpx, rel=1e-12)
    # 448 workgroups on 38 CUs: 12 waves, the tail is a smaller share; under the 2 % info threshold
    assert frac_cpx < 0.02 < frac and not [f for f in res_cpx.findings if f.title.startswith("GPU wave tails")]


@_skip_without(V3)
def test_amd_wave_quantization_rocprofv3_csv_from_raw_rows(tmp_path: Path) -> None:
    import csv

    folder = V3 / "vllm_mi300x_decode_csv"
    agents = csv.DictReader(next(folder.glob("*_agent_info.csv")).read_text().splitlines())
    [agent] = [r for r in agents if r["Agent_Type"] == "GPU"][:1]
    cus = int(agent["Cu_Count"])
    rows = []
    for r in csv.DictReader(next(folder.glob("*_kernel_trace.csv")).read_text().splitlines()):
        wg = [int(r[f"Workgroup_Size_{d}"]) for d in "XYZ"]
        grid = [int(r[f"Grid_Size_{d}"]) for d in "XYZ"]  # work-items
        rows.append((math.prod(math.ceil(g / w) for g, w in zip(grid, wg)), math.prod(wg), int(r["VGPR_Count"]),
                     int(r["Accum_VGPR_Count"]), int(r["SGPR_Count"]), int(r["LDS_Block_Size"]),
                     int(r["End_Timestamp"]) - int(r["Start_Timestamp"])))
    f = _check_waves(folder, tmp_path, rows, cus)
    assert f.severity == "info"  # 6.2 % of kernel time
    # the rocpd rendering of the same capture (static + dynamic LDS) agrees with its own raw rows
    rows_db, cus_db = _rocpd_rows(V3 / "vllm_mi300x_decode_results.db")
    _, frac_db, _ = _expected_waves(rows_db, cus_db)
    (tmp_path / "db").mkdir()
    res_db, _, _ = _analyze(V3 / "vllm_mi300x_decode_results.db", tmp_path / "db")
    assert _metrics(res_db)["wave_quantization_fraction"] == pytest.approx(frac_db, rel=1e-12)


@_skip_without(RPD_VLLM)
def test_amd_wave_quantization_says_why_rpd_is_not_modelled(tmp_path: Path) -> None:
    """RPD records no agent properties (CUs, wave slots) and no registers: no wave numbers."""
    res, con, run_id = _analyze(RPD_VLLM, tmp_path)
    m = _metrics(res)
    assert m["last_wave_efficiency"] is None and m["wave_quantization_fraction"] is None
    assert not [f for f in res.findings if f.title.startswith("GPU wave tails")]
    status = PaddingWaste()._waves(con, run_id, None)[2]["waves"]
    assert status.startswith("skipped: no launch could be modelled (1228 launches: no CU count")


def test_amd_resident_workgroups_hand_cases() -> None:
    from tracekit.analysis.padding_waste import AMD_TARGETS, resident_workgroups_amd

    gfx942, gfx950 = AMD_TARGETS["gfx942"], AMD_TARGETS["gfx950"]
    # 4 waves, 128 + 64 = 192 VGPRs → 2 waves/SIMD → 2 workgroups; LDS 33 KiB of 64 KiB → 1
    assert resident_workgroups_amd(gfx942, 256, 128, 64, 96, 33792) == (1, "lds")
    # gfx950: 160 KiB LDS in 1280-B granules → 4; the VGPRs now bind at 2
    assert resident_workgroups_amd(gfx950, 256, 128, 64, 96, 33792) == (2, "vgprs")
    # 1024 threads = 16 waves × 240 VGPRs (2 waves/SIMD = 8 per CU): cannot be resident
    assert resident_workgroups_amd(gfx942, 1024, 240, 0, 32, 0) is None
    # 320 threads = 5 waves: 32 slots hold 6 workgroups, VGPRs (4) do not bind
    assert resident_workgroups_amd(gfx942, 320, 4, 0, 16, 0) == (6, "wave_slots")
    # arch VGPRs align to 4 before the AGPRs: 130 → 132 + 124 = 256 → 2 waves/SIMD
    assert resident_workgroups_amd(gfx942, 64, 130, 124, 16, 0) == (8, "vgprs")
