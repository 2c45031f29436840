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
from tracekit.analysis import library
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
    library.install(con)  # what analyze_run does first: the SQL library's TEMP views (run_window, device_work)
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


def _gpu_window(events: list[dict[str, Any]]) -> int:
    """First to last GPU row of a one-device, one-session Kineto capture (ns)."""
    spans = [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in events
             if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return max(b for _, b in spans) - min(a for a, _ in spans)


@_skip_without(A100)
def test_a100_wave_quantization_recomputed_from_json(tmp_path: Path) -> None:
    kernels, devs = _kineto(A100)
    res, con, run_id = _analyze(A100, tmp_path)
    design = _by_design(con, run_id)
    multi_t = multi_last = wasted = upper = all_t = 0.0
    checked = 0
    for e in kernels:
        a, dur = e["args"], round(e["dur"] * 1000)
        all_t += dur
        dev = devs[a["device"]]
        res_blocks = _my_resident(a, dev)
        threads = a["block"][0] * a["block"][1] * a["block"][2]
        # Kineto's occupancy (CUDA's occupancy API) implies the resident blocks when the grid
        # exceeds them; the calculator must agree wherever Kineto computed one
        occ = a["est. achieved occupancy %"]
        if occ > 0 and a["warps per SM"] > res_blocks * threads / 32 + 0.5:
            assert occ / 100 * 64 / math.ceil(threads / 32) == pytest.approx(res_blocks, abs=0.05), e["name"]
            checked += 1
        if e["name"] in design:  # NCCL, split-K reduce, GEMV: their grids fit the device by design
            continue
        blocks = a["grid"][0] * a["grid"][1] * a["grid"][2]
        sms = dev["numSms"]
        cap = sms * res_blocks
        waves = math.ceil(blocks / cap)
        if waves > 1:
            multi_t += dur
            multi_last += dur * ((blocks % cap) / cap if blocks % cap else 1.0)
            upper += dur * (1 - blocks / (waves * cap))  # every wave a full wave's time
            wasted += dur * (1 - blocks / (sms * math.ceil(blocks / sms)))  # residency: time ∝ ⌈blocks ÷ SMs⌉
    assert checked >= 500  # kernels whose Kineto occupancy pins the resident count
    m = _metrics(res)
    assert m["last_wave_efficiency"] == pytest.approx(multi_last / multi_t, rel=1e-9)
    assert m["wave_quantization_fraction"] == pytest.approx(wasted / all_t, rel=1e-9)
    window = _gpu_window(json.loads(gzip.decompress(next(A100.glob("*.json*")).read_bytes()))["traceEvents"])
    status = PaddingWaste()._waves(con, run_id, window)[2]["waves"]
    assert status["wasted_ns"] == pytest.approx(wasted, abs=2)
    assert status["upper_bound_wasted_ns"] == pytest.approx(upper, abs=2)
    # charging each partial wave a full wave (the old model) said 14.4 ms, 1.2 % of the 1.23 s window
    # (an info finding); with Adam's 2 resident blocks per SM the tail costs a third of that: no finding
    assert upper / window >= 0.01 > wasted / window and wasted < upper / 2
    assert not [f for f in res.findings if f.title.startswith("GPU wave tails")]


# ---- (b) matrix tile on an identified GPU -----------------------------------------------------


@_skip_without(H100)
def test_h100_matrix_tile_efficiency_recomputed_from_json(tmp_path: Path) -> None:
    [f] = list(H100.glob("*.json*"))
    events = json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
    ops = {e["args"].get("External id"): e for e in events if e.get("cat") == "cpu_op"}
    tile = (64, 8, 16)  # H100 wgmma m64nNk16, N a multiple of 8 (PTX ISA)
    # element bytes and the ridge (FLOP/byte) of H100 SXM: dense bf16 989.4 TF, TF32 494.7 TF, 3350 GB/s
    ridge = {"c10::BFloat16": (2, 989.4e12 / 3350e9), "float": (4, 494.7e12 / 3350e9)}
    total = useful = memory_bound = 0.0
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
        nbytes, rp = ridge[next(x for x in op["args"]["Input type"] if x in ridge)]
        for mm, nn, kk in gemms:
            if op["name"] == "aten::_flash_attention_forward":  # 4·L·S·E FLOPs over Q, K, V, O
                ai = 2 * seq * dims[1][1] / (nbytes * (seq + dims[1][1]))
            else:
                ai = 2 * mm * nn * kk / (nbytes * (mm * kk + kk * nn + mm * nn))
            if mm <= 16 or ai < rp:  # memory-bound: padding costs no time
                memory_bound += t / len(gemms)
                continue
            total += t / len(gemms)
            useful += t / len(gemms) * mm * nn * kk / math.prod(math.ceil(d / s) * s for d, s in zip((mm, nn, kk), tile))
    res, con, run_id = _analyze(H100, tmp_path)
    assert _metrics(res)["matrix_unit_efficiency"] == pytest.approx(useful / total, rel=1e-6)
    status = PaddingWaste()._matrix(con, run_id, None)[2]["matrix_unit"]
    # flash attention at L = S = 559, head_dim 64 reaches 279.5 FLOP/byte, under the 295 ridge
    assert status["memory_bound_time_ns"] == pytest.approx(memory_bound, abs=4) and memory_bound > 0
    assert tile_efficiency((559, 559, 64), tile) == pytest.approx(559 * 559 / (576 * 560))
    assert not [f for f in res.findings if "matrix tile" in f.title]


B200 = KINETO / "tracelens-b200-vllm-eager-inference-rank0of8"
MI300X_RESNET = KINETO / "tracelens-mi300x-resnet-train-rank0of8"


@_skip_without(B200)
def test_no_matrix_tile_advice_for_an_m1_lm_head(tmp_path: Path) -> None:
    """Was: "GEMM dimensions misfit the NVIDIA B200 matrix tile: 5% of GEMM time is padding", led by
    the LM head aten::mm [1, 2880] × [2880, 25136]: a GEMV, bound by its weight bytes, where padding
    M to 64 costs no time."""
    res, con, run_id = _analyze(B200, tmp_path)
    assert not [f for f in res.findings if "matrix tile" in f.title]
    status = PaddingWaste()._matrix(con, run_id, None)[2]["matrix_unit"]
    assert status["memory_bound_gemms"] >= 1
    from tracekit.analysis.padding_waste import gemm_intensity

    assert gemm_intensity(1, 25136, 2880, 2) < 1.0 < 2250e12 / 7700e9  # ~1 FLOP/byte, ridge 292


@_skip_without(MI300X_RESNET)
def test_no_matrix_tile_warning_for_resnet_fc_gemms(tmp_path: Path) -> None:
    """Was: a *warning* that 38 % of GEMM time is padding on MI300X, for the ResNet FC layer's three
    GEMMs (M = 10 batch rows; K = 10 in the weight gradient), a 23 µs saving = 0.03 % of the run."""
    res, con, run_id = _analyze(MI300X_RESNET, tmp_path)
    assert not [f for f in res.findings if "matrix tile" in f.title]
    assert _metrics(res)["matrix_unit_efficiency"] is None  # no compute-bound GEMM with shapes
    status = PaddingWaste()._matrix(con, run_id, None)[2]["matrix_unit"]
    assert (status["gemms"], status["memory_bound_gemms"]) == (0, 3)
    from tracekit.analysis.padding_waste import gemm_intensity

    # fp32 [1000, 10] × [10, 512]: 4.9 FLOP/byte against the MI300X fp32 matrix ridge 163.4e12 / 5300e9 = 30.8
    assert gemm_intensity(1000, 512, 10, 4) < 163.4e12 / 5300e9


TE_ATTN = CORPUS / "xplane" / "tracelens_mi300x_jax" / "te_fused_attn__934987a2fc2f.xplane.pb"


@_skip_without(TE_ATTN)
def test_wave_tails_leave_out_by_design_kernels(tmp_path: Path) -> None:
    """Was: "GPU wave tails waste 12.2% of kernel time" (warning) on the MI355X XPlane, from ck_tile's
    FMHA forward kernel, an attention kernel whose grid is sized to the device."""
    res, con, run_id = _analyze(TE_ATTN, tmp_path)
    assert not [f for f in res.findings if f.title.startswith("GPU wave tails")]
    status = PaddingWaste()._waves(con, run_id, None)[2]["waves"]
    fmha = con.execute(
        """SELECT count(*) FROM device_work WHERE run_id = ? AND by_design AND name LIKE '%FmhaFwd%'
             AND kernel_class = 'attention'""", [run_id]).fetchall()[0][0]
    assert fmha > 0 and status["by_design_launches"] >= fmha


def test_residency_model_and_run_share_severity() -> None:
    from tracekit.analysis.base import run_share_severity
    from tracekit.analysis.padding_waste import residency_efficiency, wave_stats

    # Adam on A100: 320 blocks, 108 SMs × 2 resident = 216 slots: 2 waves, the last 104 blocks ≤ 1 per SM
    assert wave_stats(320, 216) == (2, 104 / 216, 320 / 432)
    assert residency_efficiency(320, 108) == pytest.approx(320 / (108 * 3))  # ⌈320 ÷ 108⌉ = 3 blocks per SM
    # one resident block per SM: the partial wave is a full wave under both models
    assert residency_efficiency(448, 304) == wave_stats(448, 304)[2]
    assert residency_efficiency(304 * 5, 304) == 1.0
    assert [run_share_severity(x) for x in (None, 0.0099, 0.01, 0.0499, 0.05, 0.1999, 0.2)] == [
        None, None, "info", "info", "warning", "warning", "critical"]


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


Row = tuple[str, int, int, int, int, int, int, int]  # kernel, workgroups, threads, vgpr, agpr, sgpr, lds, dur_ns


def _expected_waves(rows: list[Row], cus: int, by_design: set[str]) -> dict[str, float]:
    """Wave numbers from raw dispatch rows, by-design kernels left out: last-wave efficiency,
    quantization fraction (residency model ÷ all kernel time), the residency-model waste and the
    full-wave upper bound (ns). Residency model: kernel time ∝ ⌈workgroups ÷ CUs⌉."""
    all_t = sum(r[7] for r in rows)
    multi_t = last = wasted = upper = 0.0
    for name, wgs, threads, vgpr, agpr, sgpr, lds, dur in rows:
        if name in by_design:
            continue
        cap = cus * _my_amd_resident(threads, vgpr, agpr, sgpr, lds)
        waves = math.ceil(wgs / cap)
        if waves > 1:
            multi_t += dur
            last += dur * ((wgs % cap) / cap if wgs % cap else 1.0)
            upper += dur * (1 - wgs / (waves * cap))
            wasted += dur * (1 - wgs / (cus * math.ceil(wgs / cus)))
    return {"lw": last / multi_t if multi_t else None, "frac": wasted / all_t, "wasted": wasted, "upper": upper}


def _rocpd_rows(db: Path) -> tuple[list[Row], int]:
    """Raw dispatch rows of a rocpd database (grid in work-items → workgroups) and the GPU's CUs."""
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(
        """SELECT s.display_name, ((d.grid_size_x + d.workgroup_size_x - 1) / d.workgroup_size_x)
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


def _by_design(con: duckdb.DuckDBPyConnection, run_id: str) -> set[str]:
    """Kernel names the SQL library marks low-occupancy by design (its one definition)."""
    return {n for (n,) in con.execute(
        "SELECT DISTINCT name FROM device_work WHERE run_id = ? AND by_design", [run_id]).fetchall()}


def _check_waves(path: Path, tmp_path: Path, rows: list[Row], cus: int) -> tuple[Any, dict[str, float], Any]:
    """Analyze ``path``; its wave metrics (and finding, when the saving is ≥ 1 % of the run window)
    must match those computed from ``rows``. Returns (finding or None, expected, wave status)."""
    res, con, run_id = _analyze(path, tmp_path)
    want = _expected_waves(rows, cus, _by_design(con, run_id))
    m = _metrics(res)
    assert m["last_wave_efficiency"] == (None if want["lw"] is None else pytest.approx(want["lw"], rel=1e-12))
    assert m["wave_quantization_fraction"] == pytest.approx(want["frac"], rel=1e-12)
    window = con.execute("SELECT sum(window_ns) FROM run_window WHERE run_id = ?", [run_id]).fetchall()[0][0]
    status = PaddingWaste()._waves(con, run_id, window)[2]["waves"]
    assert status["wasted_ns"] == pytest.approx(want["wasted"], abs=2)
    assert status["upper_bound_wasted_ns"] == pytest.approx(want["upper"], abs=2)
    found = [f for f in res.findings if f.title.startswith("GPU wave tails")]
    assert len(found) == (1 if want["wasted"] / window >= 0.01 else 0)
    for f in found:
        assert f.saving_ns == pytest.approx(want["wasted"], abs=2)
        share = want["wasted"] / window
        assert f.saving_fraction == pytest.approx(share, rel=1e-6)
        assert f.severity == ("info" if share < 0.05 else "warning" if share < 0.2 else "critical")
    return (found[0] if found else None), want, status


def test_amd_wave_quantization_rocpd_sample_and_cpx(tmp_path: Path) -> None:
    import shutil
    import sqlite3

    rows, cus = _rocpd_rows(ROCPD_SAMPLE)
    assert cus == 304
    f, want, _ = _check_waves(ROCPD_SAMPLE, tmp_path, rows, cus)
    # the only multi-wave kernels are the batch-4 FP8 decode GEMMs (hipBLASLt macro tiles 64x32,
    # 64x16: 448 workgroups on 304 CUs): skinny, memory-bound by design, so no tail is charged
    (tmp_path / "again").mkdir()
    _, con, run_id = _analyze(ROCPD_SAMPLE, tmp_path / "again")
    design = _by_design(con, run_id)
    assert any(n.startswith("Cijk_") and "_MT64x32x256_" in n for n in design)
    assert f is None and want["lw"] is None and want["wasted"] == 0

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
    f_cpx, want_cpx, status = _check_waves(cpx, tmp_path / "cpx", rows_cpx, 38)
    # on 38 CUs the tails are still those of the by-design decode GEMMs (the metrics above are
    # checked against the raw rows): nothing charged
    assert f_cpx is None and status["run_share"] < 0.01 and want_cpx["wasted"] == 0


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
        rows.append((r["Kernel_Name"], math.prod(math.ceil(g / w) for g, w in zip(grid, wg)), math.prod(wg),
                     int(r["VGPR_Count"]), int(r["Accum_VGPR_Count"]), int(r["SGPR_Count"]),
                     int(r["LDS_Block_Size"]), int(r["End_Timestamp"]) - int(r["Start_Timestamp"])))
    f, _, _ = _check_waves(folder, tmp_path, rows, cus)
    assert f is None  # the decode GEMMs with tails are skinny (by design): nothing charged
    # the rocpd rendering of the same capture (static + dynamic LDS) agrees with its own raw rows
    rows_db, cus_db = _rocpd_rows(V3 / "vllm_mi300x_decode_results.db")
    (tmp_path / "db").mkdir()
    _check_waves(V3 / "vllm_mi300x_decode_results.db", tmp_path / "db", rows_db, cus_db)


@_skip_without(RPD_VLLM)
def test_amd_wave_quantization_says_why_rpd_is_not_modelled(tmp_path: Path) -> None:
    """RPD records no agent properties (CUs, wave slots) and no registers: no wave numbers."""
    res, con, run_id = _analyze(RPD_VLLM, tmp_path)
    m = _metrics(res)
    assert m["last_wave_efficiency"] is None and m["wave_quantization_fraction"] is None
    assert not [f for f in res.findings if f.title.startswith("GPU wave tails")]
    status = PaddingWaste()._waves(con, run_id, None)[2]["waves"]
    # 1228 launches with a grid, less the by-design ones (paged attention, wvSpltK GEMVs, FMHA)
    design = con.execute(
        """SELECT count(*) FROM kernels WHERE run_id = ? AND category = 'kernel' AND grid_x IS NOT NULL
             AND name IN (SELECT name FROM device_work WHERE run_id = ? AND by_design)""", [run_id, run_id]
    ).fetchall()[0][0]
    assert design > 0
    assert status.startswith(f"skipped: no launch could be modelled ({1228 - design} launches: no CU count")


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
