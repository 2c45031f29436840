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
    data = json.loads(gzip.open(f).read())
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
    events = json.loads(gzip.open(f).read())["traceEvents"]
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
