"""Cross-vendor kernel categories: one SQL ``CASE`` over the ``kernels`` view that puts every device
activity row of a CUDA, ROCm or TPU run into one of :data:`CATEGORIES`.

Rules, first match wins:

1. ``category`` is ``memcpy`` or ``memset`` → ``memcpy``.
2. XPlane rows carry XProf's op class ``hlo_category``; when it names a class it decides:
   ``copy*`` (``copy-start``, ``copy-done``, ``copy``) → ``memcpy``; collectives (``all-reduce``,
   ``all-gather``, ``reduce-scatter``, ``all-to-all``, ``collective-permute``, ``send``,
   ``recv``, ...) → ``communication``; ``convolution``, ``convolution fusion``, ``dot``,
   ``output fusion`` (XLA's kOutput fusion: a dot/convolution with fused epilogue) → ``gemm``;
   ``loop fusion``, ``input fusion``, ``non-fusion elementwise``, ``broadcast``,
   ``data formatting`` → ``elementwise``. Other classes (``custom-call``, unknown, NULL) fall
   through to the name rules, so a Pallas ``ragged_paged_attention`` custom call is attention.
3. The kernel name, case-insensitive regexes, in this order (order matters: a
   ``fused_add_rms_norm`` kernel is norm, not elementwise; a ``flash_fwd`` kernel whose template
   arguments mention cutlass is attention, not gemm; a Triton ``_matmul_ogs`` MoE GEMM or a
   ``fused_moe`` kernel is moe, not gemm): memcpy blit kernels (``rocclr_copyBuffer``/``fillBuffer``),
   communication, moe, attention, norm, gemm, reduction (reduce kernels, softmax, argmax/top-k,
   sorts, Triton reductions), elementwise, else ``other``.

Communication is matched before every compute class: the B200 ``multimem_all_reduce_kernel``
(symmetric-memory all-reduce) is communication even though it runs on the SMs.
"""

from __future__ import annotations

from tracekit.sql_text import quote as _lit

CATEGORIES = ("gemm", "attention", "moe", "norm", "elementwise", "reduction", "communication", "memcpy", "other")

# XProf hlo_category classes (lower-cased).
_HLO_MEMCPY = r"^copy"
_HLO_COMMUNICATION = r"all-reduce|all-gather|reduce-scatter|all-to-all|collective|^send|^recv|async-collective"
_HLO_GEMM = r"convolution|^dot|output fusion"
_HLO_ELEMENTWISE = r"^(loop fusion|input fusion|non-fusion elementwise|elementwise|broadcast|data formatting)$"

# Kernel-name regexes (matched against the lower-cased name).
NAME_PATTERNS: dict[str, str] = {
    "memcpy": r"^(memcpy|memset)|rocclr_(copy|fill)buffer",
    "communication": (
        r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|multimem|cross_device_reduce"
        r"|all_?to_?all|sendrecv"
    ),
    # not a bare "moe": Inductor names pointwise kernels after the module (triton_poi_…_moe_forward)
    "moe": (
        r"fused_moe|moe_(align|sum|gemm|kernel|mlp|wna16|permute|unpermute|topk)|matmul_ogs|topk_softmax"
        r"|_experts?_|expert_|grouped_gemm"
    ),
    # gated_delta_net: the linear attention of Qwen3-Next-style hybrid models (llama.cpp)
    "attention": r"flash(_|attn|::)|fmha|attention|attn|(^|[^a-z])mha|sdpa|paged_?attention|unified_attention"
                 r"|gated_delta_net|delta_rule",
    "norm": r"rms_?norm|layer_?norm|norm_kernel|group_?norm|batch_?norm",
    "gemm": (
        r"gemm|gemv|^cijk_|^_?matmul|_matmul_kernel|sm[0-9]+_xmma|wvspl?i?tk|hipblaslt|tensile"
        r"|nvjet|^bmm_|^mm_|mul_mat|splitkreduce"
    ),
    "reduction": r"reduce_kernel|softmax|argmax|argmin|topk|sort|(^|[^a-z])sum_|cross_?entropy|scan_kernel|triton_(red|per)_",
    "elementwise": (
        r"elementwise|silu|gelu|act_and_mul|triton_poi|(^|[^a-z])(add|mul)_|copy_kernel|fill|cast"
        r"|catarray|neg_kernel|rsqrt|pow_tensor|rotary"
    ),
}


def category_case_sql(name: str = "name", category: str = "category", hlo_category: str = "hlo_category") -> str:
    """A DuckDB ``CASE`` expression (VARCHAR, one of :data:`CATEGORIES`) over the given columns of
    the ``kernels`` view (pass qualified names such as ``k.name`` when joining)."""
    hlo = f"lower(coalesce({hlo_category}, ''))"
    nm = f"lower(coalesce({name}, ''))"
    whens = [
        f"WHEN {category} IN ('memcpy', 'memset') THEN 'memcpy'",
        f"WHEN regexp_matches({hlo}, {_lit(_HLO_MEMCPY)}) THEN 'memcpy'",
        f"WHEN regexp_matches({hlo}, {_lit(_HLO_COMMUNICATION)}) THEN 'communication'",
        f"WHEN regexp_matches({hlo}, {_lit(_HLO_GEMM)}) THEN 'gemm'",
        f"WHEN regexp_matches({hlo}, {_lit(_HLO_ELEMENTWISE)}) THEN 'elementwise'",
    ]
    whens += [f"WHEN regexp_matches({nm}, {_lit(p)}) THEN '{c}'" for c, p in NAME_PATTERNS.items()]
    return "CASE " + " ".join(whens) + " ELSE 'other' END"
