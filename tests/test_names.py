"""Kernel names shortened the way people say them (tracekit.names): real names from the corpus's
traces, and every distinct kernel name of the corpus kept distinct."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from conftest import needs_shared
from corpus_runs import CORPUS_RUNS, run_path

import tracekit
from tracekit.names import ellipsize, short_kernel_name, short_kernel_names

# Names as the corpus traces spell them (B200 Kineto, MI300X rocprofv3/RPD, V100/A100 HTA traces).
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
FILL_INT = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >"
            "(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)")
FILL_LONG = FILL_INT.replace("<int>", "<long>")
CUTLASS = ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>"
           "(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)")
NORM = ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
        "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, "
        "c10::BFloat16 const*, float, int, int)")
PAGED = "_Z32paged_attention_ll4mi_QKV_kernelIDF16_hLN4vllm18Fp8KVCacheDataTypeE1ELi16ELi128ELi512ELi4EEvPKT_PKT0_S7_ifPKiS9_iPKfiiiPfSC_PS2_SD_iff"
CK = ("_ZN7ck_tile6kentryILi256ELi2ENS_13FmhaFwdKernelINS_26FmhaFwdTilePartitioner_HBSINS_13TileFmhaShapeINS_8"
      "sequenceIJLi128ELi128ELi32ELi128ELi32ELi128EEEENS4_IJLi4ELi1ELi1EEEE")
CK_950 = ("void ck_tile::kentry<ck_tile::gfx950_t, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<"
          "ck_tile::BlockFmhaPipelineProblem<std::bfloat16_t, float> > > >(ck_tile::FmhaFwdKernel<int>::Kargs)")
TENSILE = ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
           "CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMBSK_GLS0_ISA942_IU1_K1_LDSTI0_LBSPPA512")
BN_128 = ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float, "
          "cudnnTensorStruct, float const*)")
BN_32 = BN_128.replace(", 128,", ", 32,")
BMM = ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_"
       "schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f")


@pytest.mark.parametrize(("name", "short"), [
    (ADD, "vectorized_elementwise_kernel<add>"),
    (CUTLASS, "cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1"),
    (NORM, "fused_add_rms_norm_kernel"),
    (PAGED, "paged_attention_ll4mi_QKV_kernel"),
    (CK, "FmhaFwdKernel"),  # the template literal Li256E is not read as a 256-character name
    (CK_950, "FmhaFwdKernel"),  # the kernel, not the gfx950_t architecture tag
    (TENSILE, "Cijk_Alik_Bljk_BBS…MT256x32x64_MI16x16x1"),  # the macro tile that tells GEMMs apart
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),  # not a C++ signature
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
     "multimem_all_reduce_kernel"),
    ("all-reduce", "all-reduce"),
    ("fusion.123", "fusion.123"),
])
def test_short_names_of_real_kernels(name: str, short: str) -> None:
    assert short_kernel_name(name) == short


def test_a_long_name_loses_its_middle_not_its_end() -> None:
    s = short_kernel_name(BMM, 48)
    assert len(s) == 48
    assert s.startswith("bmm_MxE4m3_MxE2m1") and s.endswith("dynBatch_sm100f") and "…" in s
    assert ellipsize("abcdef", 4) == "a…ef" and ellipsize("short", 60) == "short"


def test_a_listing_keeps_names_apart() -> None:
    # the short forms collide; the listing gets back what differs
    assert short_kernel_names([BN_128, BN_32], 60) == [
        "bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>",
        "bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>"]
    narrow = short_kernel_names([BN_128, BN_32], 30)
    assert len(set(narrow)) == 2 and all(len(s) <= 30 for s in narrow)
    assert short_kernel_names([FILL_INT, FILL_LONG]) == [
        "vectorized_elementwise_kernel<Fill<int>>", "vectorized_elementwise_kernel<Fill<long>>"]
    # the same name twice is one kernel: one form
    assert short_kernel_names([ADD, ADD]) == ["vectorized_elementwise_kernel<add>"] * 2
    # two Tensile kernels with one macro tile: a differing parameter is appended
    t2 = TENSILE.replace("LBSPPA512", "LBSPPA1024")
    a, b = short_kernel_names([TENSILE, t2], 48)
    assert a != b and a.startswith("Cijk_Alik_Bljk_BBS…MT256x32x64") and b.endswith("LBSPPA1024")


@needs_shared
def test_every_corpus_kernel_name_stays_distinct(tmp_path: Path) -> None:
    """The distinct kernel names of seven corpus runs (≈ 200, three vendors) shortened as one
    listing: as many short forms as names, none longer than the width."""
    tmp = tmp_path
    store = tmp / "s.duckdb"
    labels = ["rocpd-vllm-mi300x-decode", "rpd-vllm-mi300", "tracelens-mi300x-sglang-qwen3-8b-decode",
              "tracelens-b200-vllm-eager-inference-rank0of8", "hta-v100-train-ns-resolution",
              "xplane-34.83.195.179_6003", "rocprofv3-llamacpp-gfx1151-decode"]
    tracekit.ingest([run_path(lb, tmp) for lb in labels if lb in CORPUS_RUNS], store)
    con = duckdb.connect(str(store), read_only=True)
    names = [r[0] for r in con.execute("SELECT DISTINCT name FROM kernels").fetchall()]
    con.close()
    assert len(names) > 150
    shorts = short_kernel_names(names, 60)
    assert len(set(shorts)) == len(names)
    assert max(len(s) for s in shorts) <= 60
    assert sum(len(s) for s in shorts) < 0.5 * sum(len(n) for n in names)
