"""communication: collective share of device time, exposed (not overlapped) communication, bus
bandwidth against the interconnect, host cost per collective and rank skew.

The exposure math is checked exactly on small hand-written Kineto traces ingested for real; the
corpus numbers are recomputed here from the raw trace files with the standard library (kernel
durations summed by name, ops matched to kernels through correlation and External id), not read
back from the store."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import CORPUS, KINETO, SAMPLES, needs_shared
from helpers import library_query

import tracekit
from tracekit.analysis import analyze_run
from tracekit.analysis.communication import (
    EXPOSED_CRITICAL_FRACTION,
    EXPOSED_WARNING_FRACTION,
)
from tracekit.names import short_kernel_name

B200_EAGER = KINETO / "tracelens-b200-vllm-eager-inference-rank0of8" / "eager_trace.json.gz"
MI300X_RESNET = KINETO / "tracelens-mi300x-resnet-train-rank0of8" / "resnet_act_checkpoint.json.gz"
TWO_RANKS = KINETO / "hta-train-2ranks-of128-sampled"
MI350X_JSON = CORPUS / "more" / "tracelens-mi350x-rocprofv3-json-train" / "908_results.json.gz"
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
# Collective kernels as a reader of these traces names them (independent of categories.py).
COMM_NAMES = ("nccl", "multimem_all_reduce")

T = 1_000.0  # µs: trace time origin of the hand-written traces
B200_PROPS = [{"id": 0, "name": "NVIDIA B200", "totalGlobalMem": 191503138816, "computeMajor": 10,
               "computeMinor": 0, "numSms": 148, "warpSize": 32, "maxThreadsPerMultiprocessor": 2048}]


# ---- running the analyzer ---------------------------------------------------------------------

def _analyze(paths: list[Path], store: Path) -> tuple[str, dict[str, float | None], list[dict[str, Any]]]:
    [run] = tracekit.ingest(paths, store=store)
    con = duckdb.connect(str(store))
    try:
        analyze_run(con, run.run_id, ["communication"])
        metrics = dict(con.execute(
            "SELECT name, value FROM metrics WHERE run_id = ? AND analyzer = 'communication'", [run.run_id]
        ).fetchall())
        findings = [
            {"severity": s, "title": t, "detail": d, "evidence": json.loads(ev), "saving_ns": sn, "saving_fraction": sf}
            for s, t, d, ev, sn, sf in con.execute(
                """SELECT severity, title, detail, evidence, saving_ns, saving_fraction FROM findings
                   WHERE run_id = ? AND analyzer = 'communication'""",
                [run.run_id],
            ).fetchall()
        ]
    finally:
        con.close()
    return run.run_id, metrics, findings


_query = library_query


# ---- hand-written Kineto traces ---------------------------------------------------------------

def _kineto(path: Path, events: list[dict[str, Any]], rank: int = 0, world: int = 8) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": B200_PROPS,
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
           "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def _k(name: str, start: float, dur: float, corr: int, stream: int, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": T + start, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, **extra}}


def _launch(start: float, corr: int, ext: int | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"correlation": corr, "cbid": 211}
    if ext is not None:
        args["External id"] = ext
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100,
            "ts": T + start, "dur": 2, "args": args}


def _op(name: str, start: float, dur: float, ext: int, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": T + start, "dur": dur,
            "args": {"External id": ext, **extra}}


ALLREDUCE = "ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
MULTIMEM = ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
            "unsigned long, unsigned int**, unsigned long, unsigned long)")


def _tp_timeline(with_collectives: bool = True) -> list[dict[str, Any]]:
    """Device rows (µs after T), compute on stream 7, collectives on stream 20:

    gemm 0-100, rms_norm 180-190, gemm 300-400; NCCL all-reduce 50-150 (kernel args: 1 Mi BFloat16
    elements, 8 ranks), multimem all-reduce 120-200 launched by symm_mem::multimem_all_reduce_
    (input [524288] BFloat16) inside vllm::all_reduce (60 µs on the host).

    Exposure: the collectives' union is 50-200 (150 µs); compute covers 50-100 and 180-190 of it, so
    90 µs is exposed: 50 µs of the NCCL kernel (50-150 less 50-100) and 40 µs of the multimem
    kernel (its part after 150, 150-200, less 180-190). Window 0-400 µs: 22.5 %."""
    ev = [
        _launch(-10, 1), _k("gemm_bf16_kernel", 0, 100, 1, 7),
        _launch(-8, 2), _k("rms_norm_kernel", 180, 10, 2, 7),
        _launch(-6, 3), _k("gemm_bf16_kernel", 300, 100, 3, 7),
    ]
    if with_collectives:
        ev += [
            _launch(-4, 4), _k(ALLREDUCE, 50, 100, 4, 20, **{
                "Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576,
                "Group size": 8, "dtype": "BFloat16"}),
            _op("vllm::all_reduce", -50, 60, 10, **{"Input Dims": [[512, 1024], []],
                                                    "Input type": ["c10::BFloat16", ""]}),
            _op("symm_mem::multimem_all_reduce_", -40, 30, 11, **{"Input Dims": [[524288], [], []],
                                                                 "Input type": ["c10::BFloat16", "", ""]}),
            _launch(-30, 5, ext=11), _k(MULTIMEM, 120, 80, 5, 20),
        ]
    return ev


def test_exposed_overlap_math_on_a_hand_made_timeline(tmp_path: Path) -> None:
    trace = _kineto(tmp_path / "tp.json", _tp_timeline())
    store = tmp_path / "s.duckdb"
    rid, metrics, findings = _analyze([trace], store)

    assert metrics["communication_time_fraction"] == pytest.approx(180 / 390)
    assert metrics["exposed_communication_time_fraction"] == pytest.approx(90 / 400)
    rows = _query(store, """SELECT name, dur_ns, overlap_ns, exposed_ns, collective, msg_bytes, group_size,
                                   busbw_gbps, op_name
                            FROM collectives WHERE run_id = ? ORDER BY start_ns""", [rid])
    assert [r[1:4] for r in rows] == [(100_000, 50_000, 50_000), (80_000, 10_000, 40_000)]
    # NCCL-tests busbw: all-reduce S = count x 2 B, x 2(n-1)/n = 1.75 for 8 ranks
    assert rows[0][4:7] == ("all_reduce", 1048576 * 2, 8)
    assert rows[0][7] == pytest.approx(1048576 * 2 / 100_000 * 1.75)
    # the multimem kernel's message comes from its op's first input; n from the world size
    assert rows[1][4:7] == ("all_reduce", 524288 * 2, 8) and rows[1][8] == "symm_mem::multimem_all_reduce_"
    assert rows[1][7] == pytest.approx(524288 * 2 / 80_000 * 1.75)
    busbw = (1048576 * 2 + 524288 * 2) * 1.75 / 180_000
    assert metrics["collective_busbw_gbps"] == pytest.approx(busbw)
    assert metrics["collective_busbw_peak_fraction"] == pytest.approx(busbw / 900)  # B200 NVLink 5, per direction
    assert metrics["collective_host_us_per_call"] == pytest.approx(60)  # outermost op: vllm::all_reduce
    assert metrics["communication_rank_skew"] is None

    by_dev = _query(store, "SELECT window_ns, n_collectives, collective_ns, exposed_ns, exposed_fraction "
                           "FROM communication_by_device WHERE run_id = ?", [rid])
    assert by_dev == [(400_000, 2, 180_000, 90_000, pytest.approx(0.225))]
    host = _query(store, "SELECT name, outermost, collective FROM collective_ops WHERE run_id = ? ORDER BY start_ns",
                  [rid])
    assert host == [("vllm::all_reduce", True, "all_reduce"), ("symm_mem::multimem_all_reduce_", False, "all_reduce")]

    [f] = findings
    assert 0.225 >= EXPOSED_CRITICAL_FRACTION and f["severity"] == "critical"
    assert "22%" in f["title"] and "ncclDevKernel_AllReduce_RING_LL (all_reduce, 1x)" in f["title"]
    assert f["saving_ns"] == 90_000 and f["saving_fraction"] == pytest.approx(0.225)
    assert "tensor-parallel inference" in f["detail"] and "RMSNorm" in f["detail"]
    assert "900 GB/s per-direction" in f["detail"]


def test_overlapped_communication_is_info_and_tiny_communication_is_silent(tmp_path: Path) -> None:
    """The same collectives hidden behind one long compute kernel: exposed 0, share 180/580 ->
    info. One short collective next to a long kernel: no finding."""
    hidden = [e for e in _tp_timeline() if e["name"] != "gemm_bf16_kernel"] + [
        _launch(-12, 9), _k("gemm_bf16_kernel", 0, 400, 9, 7)]
    _, metrics, findings = _analyze([_kineto(tmp_path / "hidden.json", hidden)], tmp_path / "a.duckdb")
    assert metrics["exposed_communication_time_fraction"] == 0
    assert metrics["communication_time_fraction"] == pytest.approx(180 / 590)
    [f] = findings
    assert f["severity"] == "info" and f["saving_ns"] == 0
    assert "hidden behind compute" in f["detail"]

    tiny = [_launch(-10, 1), _k("gemm_bf16_kernel", 0, 1000, 1, 7),
            _launch(-4, 4), _k(ALLREDUCE, 1000, 5, 4, 20)]
    _, metrics, findings = _analyze([_kineto(tmp_path / "tiny.json", tiny)], tmp_path / "b.duckdb")
    assert metrics["exposed_communication_time_fraction"] == pytest.approx(5 / 1005)
    assert 5 / 1005 < EXPOSED_WARNING_FRACTION and findings == []


def test_run_without_collectives(tmp_path: Path) -> None:
    """No collective kernels: both fractions 0, the rest NULL, no finding. A CPU-only capture: NULL."""
    _, metrics, findings = _analyze([_kineto(tmp_path / "c.json", _tp_timeline(with_collectives=False))],
                                    tmp_path / "a.duckdb")
    assert metrics["communication_time_fraction"] == 0 and metrics["exposed_communication_time_fraction"] == 0
    assert metrics["collective_busbw_gbps"] is None and metrics["collective_host_us_per_call"] is None
    assert findings == []
    _, metrics, findings = _analyze([SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"],
                                    tmp_path / "b.duckdb")
    assert metrics["communication_time_fraction"] is None and findings == []


def test_rank_skew_names_the_rank_the_others_wait_for(tmp_path: Path) -> None:
    """Rank 0 sits 100 µs in an all-reduce that rank 1 (the straggler, busy computing) finishes in 20."""
    d = tmp_path / "ranks"
    d.mkdir()
    for rank, wait in ((0, 100.0), (1, 20.0)):
        ev = [_launch(-10, 1), _k("gemm_bf16_kernel", 0, 200 - wait, 1, 7),
              _launch(-4, 2), _k(ALLREDUCE, 200 - wait, wait, 2, 20)]
        _kineto(d / f"rank{rank}.json", ev, rank=rank, world=2)
    _, metrics, findings = _analyze([d], tmp_path / "s.duckdb")
    assert metrics["communication_rank_skew"] == pytest.approx((100 - 20) / 100)
    [f] = findings
    assert "rank 1 spends 20.0 µs in collectives against 100 µs on rank 0" in f["detail"]
    assert "wait for rank 1" in f["detail"]


def test_short_kernel_name() -> None:
    assert short_kernel_name(MULTIMEM) == "multimem_all_reduce_kernel"
    assert short_kernel_name("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") == "ncclDevKernel_Generic"
    assert short_kernel_name("all-reduce") == "all-reduce"


# ---- the corpus, recomputed from the raw files ------------------------------------------------

def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as fh:
        return list(json.loads(fh.read())["traceEvents"])


def _comm_share(events: list[dict[str, Any]]) -> float:
    by_name: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS:
            by_name[e["name"]] += float(e.get("dur", 0))
    comm = sum(v for k, v in by_name.items() if any(s in k for s in COMM_NAMES))
    return comm / sum(by_name.values())


@needs_shared
def test_b200_vllm_tp8_all_reduce(tmp_path: Path) -> None:
    """B200 vLLM eager, TP rank 0 of 8: the symmetric-memory all-reduce is 18.4 % of kernel time;
    each vllm::all_reduce costs ~173 µs on the host against a ~29 µs kernel; 5.3 MB messages move
    at ~318 GB/s busbw (35 % of NVLink 5's 900 GB/s per direction). The device is idle most of the
    84.5 ms window (launch-bound), so only 2.5 % of it is exposed communication: info."""
    ev = _events(B200_EAGER)
    share = _comm_share(ev)
    assert share == pytest.approx(0.1836, abs=0.002)
    host = [float(e["dur"]) for e in ev if e.get("cat") == "cpu_op" and e["name"] == "vllm::all_reduce"]
    # busbw of the multimem kernels from the JSON: kernel -> launch (correlation) -> op (External id)
    launch_ext = {e["args"]["correlation"]: e["args"].get("External id") for e in ev
                  if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    op_dims = {e["args"]["External id"]: e["args"]["Input Dims"][0] for e in ev
               if e.get("cat") == "cpu_op" and e["name"] == "symm_mem::multimem_all_reduce_"}
    kernels = [e for e in ev if e.get("cat") == "kernel" and "multimem_all_reduce" in e["name"]]
    nbytes = sum(2 * _prod(op_dims[launch_ext[k["args"]["correlation"]]]) for k in kernels)
    busbw = nbytes * 2 * 7 / 8 / sum(float(k["dur"]) * 1e3 for k in kernels)

    _, metrics, findings = _analyze([B200_EAGER], tmp_path / "s.duckdb")
    assert metrics["communication_time_fraction"] == pytest.approx(share, rel=1e-6)
    assert metrics["exposed_communication_time_fraction"] == pytest.approx(0.0253, abs=0.001)
    assert metrics["collective_host_us_per_call"] == pytest.approx(177.0, abs=1)  # 73 all_reduce + 1 all_gather
    [f] = findings
    assert f["severity"] == "info" and "18%" in f["title"] and "multimem_all_reduce_kernel" in f["title"]
    ops = {h["name"]: h for h in f["evidence"]["host_ops"]}
    assert ops["vllm::all_reduce"]["count"] == len(host) == 73
    assert ops["vllm::all_reduce"]["mean_us"] == pytest.approx(statistics.fmean(host), rel=1e-6)
    assert ops["vllm::all_reduce"]["mean_us"] == pytest.approx(173.2, abs=0.5)
    mm = next(c for c in f["evidence"]["collectives"] if "multimem" in c["name"])
    assert mm["busbw_gbps"] == pytest.approx(busbw, rel=1e-6)
    assert f["evidence"]["interconnect_gbps"] == 900 and "NVLink" in f["evidence"]["interconnect_source"]
    assert "vllm::all_reduce call takes 173 µs" in f["detail"]


def _prod(dims: list[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


@needs_shared
def test_mi300x_resnet_ddp_waits_in_rccl(tmp_path: Path) -> None:
    """MI300X ResNet training, rank 0 of 8: ncclDevKernel_Generic is 71.4 % of kernel time and 64 %
    of the device window runs nothing else; the all-reduces move 5.7-17.6 MB at < 1 % of the
    448 GB/s Infinity Fabric peak (per direction): the rank waits, it does not move data."""
    share = _comm_share(_events(MI300X_RESNET))
    assert share == pytest.approx(0.7135, abs=0.002)
    _, metrics, findings = _analyze([MI300X_RESNET], tmp_path / "s.duckdb")
    assert metrics["communication_time_fraction"] == pytest.approx(share, rel=1e-6)
    assert metrics["exposed_communication_time_fraction"] == pytest.approx(0.639, abs=0.002)
    assert metrics["collective_busbw_peak_fraction"] is not None and metrics["collective_busbw_peak_fraction"] < 0.01
    [f] = findings
    assert f["severity"] == "critical" and "ncclDevKernel_Generic" in f["title"] and "64%" in f["title"]
    assert f["evidence"]["interconnect_gbps"] == 448
    assert "waiting for slower peers" in f["detail"] and "data-parallel training" in f["detail"]


@needs_shared
def test_mi350x_rocprofv3_one_rccl_kernel(tmp_path: Path) -> None:
    """MI350X rocprofv3 JSON, one training process: ncclDevKernel_Generic_1 is 93.6 % of kernel time
    (rocprofv3 kernel_dispatch records, durations summed by kernel symbol); 26 % of the window is
    communication alone. No message sizes in the trace; the detail says it is likely waiting."""
    with gzip.open(MI350X_JSON) as fh:
        tool = json.loads(fh.read())["rocprofiler-sdk-tool"][0]
    symbols = {s["kernel_id"]: s["kernel_name"] for s in tool["kernel_symbols"]}
    by_name: dict[str, int] = defaultdict(int)
    for r in tool["buffer_records"]["kernel_dispatch"]:
        by_name[symbols[r["dispatch_info"]["kernel_id"]]] += r["end_timestamp"] - r["start_timestamp"]
    rccl = sum(v for k, v in by_name.items() if "ncclDevKernel" in k)
    assert rccl / sum(by_name.values()) == pytest.approx(0.936, abs=0.002)

    _, metrics, findings = _analyze([MI350X_JSON], tmp_path / "s.duckdb")
    assert metrics["communication_time_fraction"] == pytest.approx(rccl / sum(by_name.values()), rel=1e-6)
    assert metrics["exposed_communication_time_fraction"] == pytest.approx(0.261, abs=0.002)
    [f] = findings
    assert f["severity"] == "critical" and "ncclDevKernel_Generic_1" in f["title"]
    assert "waiting for slower peers" in f["detail"] and "bus bandwidth is unknown" in f["detail"]


@needs_shared
def test_two_ranks_skew_from_the_raw_files(tmp_path: Path) -> None:
    """hta-train-2ranks-of128-sampled: per-rank NCCL time from each rank's JSON gives the skew."""
    per_rank = {}
    for p in sorted(TWO_RANKS.glob("*.json.gz")):
        ev = _events(p)
        per_rank[p.name] = sum(float(e["dur"]) for e in ev
                               if e.get("cat") == "kernel" and "nccl" in e["name"].lower())
    hi, lo = max(per_rank.values()), min(per_rank.values())
    _, metrics, _ = _analyze([TWO_RANKS], tmp_path / "s.duckdb")
    assert metrics["communication_rank_skew"] == pytest.approx((hi - lo) / hi, rel=1e-6)
    assert metrics["communication_time_fraction"] == pytest.approx(0.608, abs=0.002)
