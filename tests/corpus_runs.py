"""The real corpus runs of ``../shared/corpus`` as tracekit runs: one entry per run, with a short
label. Used by the corpus-wide analyzer tests and by ``benchmarks/corpus_findings.py`` (the expert
review's table in docs/findings.md is made from the same list)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import CORPUS

K = CORPUS / "kineto"
M = CORPUS / "more"
X = CORPUS / "xplane"
R = CORPUS / "rocprof"
N = CORPUS / "nsys"

#: label → path(s) of one run (a file or directory). Labels are stable test ids.
CORPUS_RUNS: dict[str, Path] = {
    **({d.name: d for d in sorted(K.iterdir()) if d.is_dir() and d.name != "expected"} if K.is_dir() else {}),
    **({d.name: d for d in sorted(M.iterdir()) if d.is_dir() and d.name.startswith("tracelens-mi300x")}
       if M.is_dir() else {}),
    "tracelens-mi350x-rocprofv3-json-train": M / "tracelens-mi350x-rocprofv3-json-train" / "908_results.json.gz",
    **({f"xplane-{p.name.split('.xplane')[0]}": p for p in sorted(X.glob("*/*.xplane.pb"))} if X.is_dir() else {}),
    "rocpd-vllm-mi300x-decode": R / "rocpd-v3-sample" / "vllm_mi300x_decode_results.db",
    "rocprofv3-csv-vllm-mi300x-decode": R / "rocpd-v3-sample" / "vllm_mi300x_decode_csv",
    "rocprofv3-json-vllm-mi300x-decode": R / "rocpd-v3-sample" / "482913_results.json",
    "rpd-matmul": R / "rpd" / "matmul_result.rpd",
    "rpd-vllm-mi300": R / "rpd" / "vllm_mi300_mytrace.rpd.gz",
    # the docs folder holds unrelated samples (refused as one directory): its kernel trace alone
    "rocprofv3-docs-kernel-trace": R / "rocprofv3-docs-samples" / "kernel_trace.csv",
    "rocprofv3-docs-pc-sampling-stochastic": R / "rocprofv3-docs-samples" / "pc_sampling_stochastic_debug.csv",
    "rocprofv3-llamacpp-gfx1151-prefill": R / "rocprofv3-llamacpp-gfx1151" / "prefill_kernel_trace.csv",
    "rocprofv3-llamacpp-gfx1151-decode": R / "rocprofv3-llamacpp-gfx1151",  # decode_* (copied, see below)
    # Nsight Systems SQLite exports, one run per export (the mfu folder holds a before/after pair)
    **({f"nsys-{p.parent.name}" + (f"-{p.stem.split('_')[-1]}" if p.parent.name.startswith("nsysai-h100x2-mfu") else ""): p
        for p in sorted(N.glob("*/*.sqlite"))} if N.is_dir() else {}),
}


def run_path(label: str, tmp: Path) -> Path:
    """The path to ingest for ``label`` (a folder of one rocprofv3 capture is assembled in ``tmp``)."""
    p = CORPUS_RUNS[label]
    if label == "rocprofv3-llamacpp-gfx1151-decode":
        d = tmp / "llamacpp_decode"
        d.mkdir(parents=True, exist_ok=True)
        for name in ("kernel_trace", "hip_api_trace", "stall_counter_collection", "fetch_counter_collection"):
            shutil.copy(p / f"decode_{name}.csv", d / f"decode_{name}.csv")
        return d
    return p
