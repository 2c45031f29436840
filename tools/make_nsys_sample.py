#!/usr/bin/env python
"""Write the SYNTHETIC Nsight Systems sample: a made-up 2-GPU vLLM-style decode captured with
``nsys profile --trace=cuda,nvtx --cuda-graph-trace=node`` and exported to SQLite.

Run from the repository root (Python standard library only, nothing is downloaded)::

    python tools/make_nsys_sample.py                 # -> sample_traces/nsys_synthetic_tp2_graphs.sqlite
    python tools/make_nsys_sample.py --out /tmp/x.sqlite

**Nothing here was measured.** The tables are those of a real Nsight Systems 2024.6.2 export, their
DDL copied verbatim into ``tools/nsys_schema/nsys_2024.6_tables.sql`` (NVIDIA's column comments
included); the rows are invented to exercise what the corpus's real exports do not hold:

* **CUDA graphs traced node by node**: each decode step is one ``cudaGraphLaunch_v10000`` call whose
  kernels carry a ``graphNodeId`` and the launch's ``correlationId`` (how nsys links graph kernels
  to their launch with ``--cuda-graph-trace=node``); the prefill runs eagerly, one
  ``cudaLaunchKernel_v7000`` per kernel.
* **NVTX step ranges** as PyTorch's ``emit_nvtx`` writes ``record_function`` scopes
  (``execute_context_1(512)_generation_0(0), op_id = 7``: TraceLens' vLLM step name with the
  ``op_id`` suffix), ``aten::`` op ranges with ``seq`` / ``op_id`` / ``sizes``, an NCCL-domain
  range (``NvtxDomainCreate`` row, ``textId`` string) and one unclosed range (no end).
* **Two ranks, tensor parallel 2**: processes 4242 and 4244 each see their GPU as CUDA device 0
  (``CUDA_VISIBLE_DEVICES`` per rank); ``TARGET_INFO_CUDA_DEVICE`` maps (pid, cudaId 0) to GPU 0
  and GPU 1, whose bus locations differ. A third process (4243) only calls
  ``cudaGetDeviceCount``: not a rank.
* A CUDA-backtrace runtime row (``eventClass`` 67) that repeats the correlation id of a
  ``cudaMemcpyAsync`` call, as 2022 exports hold them.

Each process: one prefill step (14 kernels) and :data:`N_DECODE` decode steps (one graph of 12
kernels each, an input-id copy HtoD, one ``cudaStreamSynchronize`` and its sync record).
Durations come from :class:`random.Random` seeded with :data:`SEED`.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DDL = ROOT / "tools" / "nsys_schema" / "nsys_2024.6_tables.sql"
OUT = ROOT / "sample_traces" / "nsys_synthetic_tp2_graphs.sqlite"
SEED = 20261207
N_DECODE = 6
SESSION_START_UTC_NS = 1_796_630_400_000_000_000  # 2026-12-07T08:00:00Z
PIDS = (4242, 4244)
LAUNCHER_PID = 4243
VM = 281474976710656  # TARGET_INFO_GPU.vmId of every real export
H100 = ("NVIDIA H100 80GB HBM3", 1, 52428800, 84942979072, 3352320000000, 1980000000, 132)  # isDiscrete..smCount

KERNELS = [  # (demangled, short, grid, block, registers, static smem, dynamic smem, mean ns)
    ("void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16 *, const c10::BFloat16 *, const c10::BFloat16 *, float, int, int)",
     "rms_norm_kernel", (8, 1, 1), (1024, 1, 1), 30, 128, 0, 3_000),
    ("nvjet_tst_128x64_64x8_2x1_v_bz_TNN", "nvjet_tst_128x64_64x8_2x1_v_bz_TNN", (48, 1, 1), (384, 1, 1), 168,
     0, 213_000, 18_000),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(const long *, c10::BFloat16 *, c10::BFloat16 *, const c10::BFloat16 *, int, long, long, int, int, int)",
     "rotary_embedding_kernel", (8, 1, 1), (256, 1, 1), 40, 0, 0, 2_500),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(const T1 *, const T1 *, T2 *, T2 *, const long *, long, long, long, long, int, int, int, const float *, const float *)",
     "reshape_and_cache_flash_kernel", (8, 1, 1), (512, 1, 1), 32, 0, 0, 2_800),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t>>, false, true, false, false, true, true, false, false>(Flash_fwd_params)",
     "flash_fwd_splitkv_kernel", (1, 8, 8), (128, 1, 1), 255, 0, 49_152, 21_000),
    ("nvjet_tst_64x32_64x16_4x1_v_bz_TNN", "nvjet_tst_64x32_64x16_4x1_v_bz_TNN", (32, 1, 1), (256, 1, 1), 128, 0,
     98_304, 11_000),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16 *, c10::BFloat16 *, const c10::BFloat16 *, float, int, int)",
     "fused_add_rms_norm_kernel", (8, 1, 1), (1024, 1, 1), 32, 128, 0, 3_200),
    ("nvjet_tst_128x128_64x6_2x1_v_bz_TNN", "nvjet_tst_128x128_64x6_2x1_v_bz_TNN", (112, 1, 1), (384, 1, 1), 168,
     0, 213_000, 41_000),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(c10::BFloat16 *, const c10::BFloat16 *, int)",
     "act_and_mul_kernel", (8, 1, 1), (1024, 1, 1), 24, 0, 0, 4_000),
    ("nvjet_tst_128x64_64x8_2x1_v_bz_TNN_down", "nvjet_tst_128x64_64x8_2x1_v_bz_TNN_down", (56, 1, 1), (384, 1, 1),
     168, 0, 213_000, 24_000),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096UL>)", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
     (4, 1, 1), (512, 1, 1), 96, 0, 0, 9_000),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float *, const float *, int)",
     "cunn_SoftMaxForward", (8, 1, 1), (1024, 1, 1), 38, 0, 64, 6_000),
]
PREFILL_EXTRA = [
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<c10::BFloat16>, std::array<char *, (unsigned long)1>>(int, T2, T3)",
     "vectorized_elementwise_kernel", (64, 1, 1), (128, 1, 1), 16, 0, 0, 1_600),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<2>>(at::TensorIteratorBase &, c10::ArrayRef<long>, c10::ArrayRef<long>)::[lambda(char *, const char *, long) (instance 1)]>(at::TensorIteratorBase &, c10::ArrayRef<long>, c10::ArrayRef<long>, const T1 &, bool)::[lambda(int) (instance 1)]>(long, T3)",
     "index_elementwise_kernel", (128, 1, 1), (128, 1, 1), 26, 0, 0, 5_000),
]
ATEN = ["aten::rms_norm", "aten::mm", "aten::add", "aten::silu", "aten::mul", "aten::softmax"]


class Writer:
    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.strings: dict[str, int] = {}
        self.corr = {pid: 1 for pid in PIDS}
        self.rng = random.Random(SEED)

    def sid(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
            self.con.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[text], text))
        return self.strings[text]

    def next_corr(self, pid: int) -> int:
        self.corr[pid] += 1
        return self.corr[pid]

    def api(self, pid: int, name: str, start: int, dur: int, corr: int, event_class: int = 0) -> int:
        self.con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, 0, NULL)",
                         (start, start + dur, event_class, gtid(pid), corr, self.sid(name)))
        return start + dur

    def kernel(self, pid: int, spec: tuple, start: int, corr: int, node: int | None, grid_id: int) -> int:
        demangled, short, grid, block, regs, smem_s, smem_d, mean = spec
        dur = int(mean * self.rng.uniform(0.9, 1.15))
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, NULL, 7, ?, ?, ?, ?, NULL, 1, 0, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?, 0, 0, ?, ?, ?, NULL)",
            (start, start + dur, corr, gpid(pid), self.sid(demangled), self.sid(short), regs, *grid, *block,
             smem_s, smem_d, grid_id, smem_s + smem_d, node))
        return start + dur

    def nvtx(self, pid: int, text: str | None, start: int, end: int | None, *, event_type: int = 59,
             text_id: int | None = None, domain: int = 0) -> None:
        self.con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (start, end, event_type, text, gtid(pid), text_id, domain))


def gpid(pid: int) -> int:
    """nsys's serialized global process id: host id 1 << 48 | pid << 24, as in the real exports."""
    return (1 << 48) | (pid << 24)


def gtid(pid: int, tid: int | None = None) -> int:
    return gpid(pid) | (tid if tid is not None else pid)


def write(out: Path, engine: str = "vllm") -> None:
    """The sample at ``out``; ``engine`` names the step ranges: ``vllm`` (the committed sample) or
    ``trtllm`` (TensorRT-LLM's ``[Executor] _forward_step`` ranges in its own NVTX domain)."""
    out.unlink(missing_ok=True)
    con = sqlite3.connect(out)
    con.execute("PRAGMA page_size = 1024")
    con.executescript(DDL.read_text())
    w = Writer(con)
    meta = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", "2024.6.2.25 (synthetic)"),
            ("EXPORT_SCHEMA_VERSION", "3.16.1"), ("EXPORT_PARAM_INPUT_FILE", "synthetic.nsys-rep"),
            ("SYNTHETIC", "tools/make_nsys_sample.py: invented rows on the real 2024.6 table definitions")]
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta)
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '2026-12-07T08:00:00', '2026-12-07T08:00:00')",
                (SESSION_START_UTC_NS,))
    for gpu, bus in enumerate(("0000:18:00.0", "0000:2a:00.0")):
        con.execute("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 'GH100', ?, '', '', 161, 0, "
                    "65536, 0, 65536, 49152, 232448, 233472, 65536, 32, 3, 64, 32, 1024, 1024, 1024, 64, 2147483647, "
                    "65535, 65535, 9, 0, 9, 0)",
                    (VM, gpu, H100[0], bus, *H100[1:], gpu, f"00000000-0000-0000-0000-00000000000{gpu}", gpu))
    for pid, gpu in zip(PIDS, (0, 1)):
        con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, 0, ?)", (gpu, pid))  # each rank's device 0
    for pid in (*PIDS, LAUNCHER_PID):
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (gpid(pid), pid, "python3"))
    w.api(LAUNCHER_PID, "cudaGetDeviceCount_v3020", 1_000_000, 40_000, 1)
    w.api(LAUNCHER_PID, "cudaGetDeviceProperties_v2_v12000", 1_100_000, 25_000, 2)
    for pid in PIDS:
        w.nvtx(pid, "NCCL", 2_000_000, None, event_type=75, domain=1)  # NvtxDomainCreate
        if engine == "trtllm":
            w.nvtx(pid, "TensorRT-LLM", 2_000_100, None, event_type=75, domain=2)
        t = 5_000_000 + (pid % 2) * 3_000
        grid_id = 1
        # prefill: eager launches inside the step range
        step_start = t
        t += 20_000
        for k, spec in enumerate(PREFILL_EXTRA + KERNELS):
            corr = w.next_corr(pid)
            op = ATEN[k % len(ATEN)]
            op_start = t
            t = w.api(pid, "cudaLaunchKernel_v7000", t + 2_000, 4_000, corr)
            kernel_end = w.kernel(pid, spec, t + 3_000, corr, None, grid_id)
            grid_id += 1
            w.nvtx(pid, f"{op}, seq = {100 + k}, op_id = {1000 + k}, sizes = [[512, 4096], [4096, 4096]]", op_start,
                   t + 500)
            if spec[1].startswith("ncclDev"):
                w.nvtx(pid, None, op_start + 100, t, text_id=w.sid("ncclAllReduce"), domain=1)
            t = max(t + 1_000, kernel_end - 8_000)
        sync_corr = w.next_corr(pid)
        end = w.api(pid, "cudaStreamSynchronize_v3020", t, 30_000, sync_corr)
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?, ?, 0, 1, NULL, 7, ?, ?, 3, 4294967295)",
                    (t + 1_000, end - 500, sync_corr, gpid(pid)))
        if engine == "trtllm":  # tensorrt_llm/_torch/pyexecutor/py_executor.py's range, TensorRT-LLM domain
            w.nvtx(pid, "[Executor] _forward_step 1: 1 ctx reqs, 512 ctx tokens, 0 gen reqs", step_start,
                   end + 5_000, domain=2)
        else:
            w.nvtx(pid, "execute_context_1(512)_generation_0(0), op_id = 7", step_start, end + 5_000)
        t = end + 40_000
        # decode: one graph launch per step
        for step in range(N_DECODE):
            step_start = t
            copy_corr = w.next_corr(pid)
            t = w.api(pid, "cudaMemcpyAsync_v3020", t + 3_000, 6_000, copy_corr)
            if step == 0 and pid == PIDS[0]:  # a 2022-style backtrace row sharing the copy's correlation id
                w.api(pid, "cudaMemcpyAsync", t - 6_000, 6_000, copy_corr, event_class=67)
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, NULL, 7, ?, ?, 64, 1, NULL, 1, 2, "
                        "NULL, NULL, 0, 1, NULL, NULL, NULL)", (t + 2_000, t + 3_800, copy_corr, gpid(pid)))
            graph_corr = w.next_corr(pid)
            launch_start = t + 5_000
            t = w.api(pid, "cudaGraphLaunch_v10000", launch_start, 12_000, graph_corr)
            k_t = t + 4_000
            for node, spec in enumerate(KERNELS):
                k_t = w.kernel(pid, spec, k_t, graph_corr, 100 + node, grid_id) + 1_200
                grid_id += 1
            sync_corr = w.next_corr(pid)
            end = w.api(pid, "cudaStreamSynchronize_v3020", t + 1_000, k_t - t, sync_corr)
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?, ?, 0, 1, NULL, 7, ?, ?, 3, "
                        "4294967295)", (t + 2_000, end - 300, sync_corr, gpid(pid)))
            if engine == "trtllm":
                w.nvtx(pid, f"[Executor] _forward_step {step + 2}: 0 ctx reqs, 0 ctx tokens, 8 gen reqs", step_start,
                       end + 2_000, domain=2)
            else:
                w.nvtx(pid, f"execute_context_0(0)_generation_8(sq1sk{640 + step}sqsq8sqsk{5120 + 8 * step}), op_id = "
                            f"{50 + step}", step_start, end + 2_000)
            t = end + 30_000
        w.nvtx(pid, "sampler (never closed)", t, None)  # a push without its pop: no end
    con.commit()
    con.execute("VACUUM")
    con.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--engine", choices=("vllm", "trtllm"), default="vllm", help="whose NVTX step ranges")
    args = p.parse_args()
    write(args.out, args.engine)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
