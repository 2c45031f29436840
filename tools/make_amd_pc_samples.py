#!/usr/bin/env python
"""Write the SYNTHETIC AMD PC-sampling samples: the synthetic MI300X decode workload of
``make_amd_samples.py`` with made-up rocprofv3 PC samples, as rocpd and as CSV.

Run from the repository root (Python standard library only, nothing is downloaded)::

    python tools/make_amd_pc_samples.py                 # -> sample_traces/
    python tools/make_amd_pc_samples.py --outdir /tmp/x

**Nothing here was measured**: we cannot capture on AMD hardware here. The files have the layout
``rocprofv3 --pc-sampling-beta-enabled --pc-sampling-method stochastic|host_trap --kernel-trace``
writes, from rocprofiler-sdk's sources (ROCm/rocm-systems ``projects/rocprofiler-sdk``):

=============================================  ===================================================
``amd_synthetic_pc_rocpd/<pid>_results.db``    the rocpd database of ``make_amd_samples.py`` plus
                                               PC samples: ``rocpd_sample`` rows on a
                                               ``rocpd_track`` named ``pc_sample``, one
                                               ``rocpd_pmc_event`` per field, the field named by
                                               ``rocpd_info_pmc.name`` (``sampling_method``,
                                               ``dispatch_id``, ``exec_mask``, ``instruction``,
                                               ``instruction_comment``, ``wave_issued``,
                                               ``inst_type``, ``stall_reason``, ``wave_count``)
                                               and the SDK's ``pc_sampling`` view over them
                                               (``share/rocprofiler-sdk-rocpd/data_views.sql``;
                                               the arbiter-state and memory-counter columns of
                                               that view are left out)
``amd_synthetic_pc_csv/<pid>_*.csv``           the CSV folder of ``make_amd_samples.py`` plus
                                               ``<pid>_pc_sampling_stochastic.csv`` and
                                               ``<pid>_pc_sampling_host_trap.csv`` (columns of
                                               ``generateCSV.cpp``, as in the corpus's
                                               ``rocprofv3-docs-samples/pc_sampling_*.csv``)
=============================================  ===================================================

Values: ``sampling_method`` 1 = stochastic, 2 = host trap (``rocprofiler_pc_sampling_method_t``);
``inst_type`` and ``stall_reason`` are the enum values of ``rocprofiler_pc_sampling_instruction_type_t``
and ``..._not_issued_reason_t`` (``include/rocprofiler-sdk/pc_sampling.h``); the CSV writes their
names (``ROCPROFILER_PC_SAMPLING_INSTRUCTION_NOT_ISSUED_REASON_WAITCNT``). In rocpd the
``instruction`` and ``instruction_comment`` values are ``rocpd_string`` ids (the pmc_event value
column is numeric; this id encoding is an assumption of this generator, stated in docs/schema.md).
The ``rocpd_event`` category of a sample is ``PC_SAMPLING_STOCHASTIC`` / ``PC_SAMPLING_HOST_TRAP``
(made up; nothing reads it).

Content (seeded, :data:`SEED`): every dispatch gets ``max(2, dur // STOCHASTIC_NS)`` stochastic
samples at uniform times inside it and ``max(1, dur // HOST_TRAP_NS)`` host-trap samples. A
stochastic sample's outcome is drawn from its kernel's profile (:data:`PROFILES`): the MFMA GEMMs
mostly issue matrix instructions or are pushed back by the busy matrix pipe
(``ARBITER_WIN_EX_STALL``), memory-bound kernels (paged attention, lm_head GEMV, norms and
elementwise kernels) mostly wait in ``s_waitcnt`` (``WAITCNT``). Both formats hold the same samples.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sqlite3
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SEED = 5150
STOCHASTIC_NS = 1000  # one stochastic sample per this much dispatch time
HOST_TRAP_NS = 4000  # one host-trap sample per this much dispatch time
ALL_LANES = 2**64 - 1

TYPES = ("NONE", "VALU", "MATRIX", "SCALAR", "TEX", "LDS", "LDS_DIRECT", "FLAT", "EXPORT", "MESSAGE",
         "BARRIER", "BRANCH_NOT_TAKEN", "BRANCH_TAKEN", "JUMP", "OTHER", "NO_INST", "DUAL_VALU")
REASONS = ("NONE", "NO_INSTRUCTION_AVAILABLE", "ALU_DEPENDENCY", "WAITCNT", "INTERNAL_INSTRUCTION",
           "BARRIER_WAIT", "ARBITER_NOT_WIN", "ARBITER_WIN_EX_STALL", "OTHER_WAIT", "SLEEP_WAIT")
TYPE_PREFIX = "ROCPROFILER_PC_SAMPLING_INSTRUCTION_TYPE_"
REASON_PREFIX = "ROCPROFILER_PC_SAMPLING_INSTRUCTION_NOT_ISSUED_REASON_"

#: outcome -> (wave issued, instruction type, stall reason, instruction)
OUTCOMES: dict[str, tuple[int, str, str, str]] = {
    "issue_matrix": (1, "MATRIX", "NONE", "v_mfma_f32_16x16x32_fp8_fp8 a[0:3], v[10:11], v[12:13], a[0:3]"),
    "issue_valu": (1, "VALU", "NONE", "v_fma_f32 v4, v2, v3, v4"),
    "issue_lds": (1, "LDS", "NONE", "ds_read_b128 v[20:23], v6 offset:512"),
    "issue_flat": (1, "FLAT", "NONE", "global_load_dwordx4 v[4:7], v[2:3], off"),
    "issue_scalar": (1, "SCALAR", "NONE", "s_load_dwordx4 s[4:7], s[0:1], 0x0"),
    "waitcnt": (0, "NO_INST", "WAITCNT", "s_waitcnt vmcnt(0)"),
    "alu_dependency": (0, "VALU", "ALU_DEPENDENCY", "v_add_f32_e32 v0, v1, v0"),
    "ex_stall": (0, "MATRIX", "ARBITER_WIN_EX_STALL",
                 "v_mfma_f32_16x16x32_fp8_fp8 a[4:7], v[14:15], v[16:17], a[4:7]"),
    "arbiter_not_win": (0, "VALU", "ARBITER_NOT_WIN", "v_mul_f32_e32 v8, v9, v8"),
    "barrier": (0, "BARRIER", "BARRIER_WAIT", "s_barrier"),
    "no_instruction": (0, "BRANCH_NOT_TAKEN", "NO_INSTRUCTION_AVAILABLE", "s_cbranch_scc1 65"),
    "other_wait": (0, "VALU", "OTHER_WAIT", "v_max_f32_e32 v1, v2, v1"),
}
#: kernel profile -> outcome weights (relative)
PROFILES: dict[str, dict[str, int]] = {
    "mfma_gemm": {"issue_matrix": 30, "issue_valu": 8, "issue_lds": 7, "ex_stall": 22, "alu_dependency": 13,
                  "waitcnt": 14, "barrier": 6},
    "memory_bound": {"issue_flat": 8, "issue_valu": 7, "waitcnt": 62, "arbiter_not_win": 10,
                     "alu_dependency": 8, "no_instruction": 5},
    "elementwise": {"issue_valu": 14, "issue_flat": 6, "issue_scalar": 2, "waitcnt": 52, "alu_dependency": 10,
                    "barrier": 11, "other_wait": 5},
}


def profile_of(kernel_alias: str) -> str:
    if kernel_alias.startswith("gemm_"):
        return "mfma_gemm"
    if kernel_alias in ("paged_attention", "paged_attention_reduce", "lm_head"):
        return "memory_bound"
    return "elementwise"


def _base() -> ModuleType:
    """``make_amd_samples.py`` next to this file (the workload and the writers)."""
    path = Path(__file__).resolve().parent / "make_amd_samples.py"
    spec = importlib.util.spec_from_file_location("make_amd_samples", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_amd_samples"] = mod
    spec.loader.exec_module(mod)
    return mod


def make_samples(w: Any, seed: int = SEED) -> list[dict[str, Any]]:
    """The PC samples of the workload, in time order (stochastic and host-trap)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for d in sorted(w.dispatches, key=lambda d: d.start):
        dur = d.end - d.start
        weights = PROFILES[profile_of(d.kernel.alias)]
        names = list(weights)
        comment = "" if d.kernel.formatted.startswith("Cijk_") else f"csrc/{d.kernel.alias}.cu"
        for method, every, least in (("stochastic", STOCHASTIC_NS, 2), ("host_trap", HOST_TRAP_NS, 1)):
            for _ in range(max(least, dur // every)):
                outcome = rng.choices(names, weights=[weights[n] for n in names])[0]
                issued, itype, reason, inst = OUTCOMES[outcome]
                out.append({
                    "method": method, "timestamp": d.start + rng.randrange(dur), "dispatch_id": d.dispatch_id,
                    "corr": d.corr, "instruction": inst,
                    "comment": f"{comment}:{rng.randrange(40, 220)}" if comment else "",
                    "exec_mask": ALL_LANES if rng.random() < 0.9 else (1 << 32) - 1,
                    "wave_issued": issued, "inst_type": itype, "stall_reason": reason,
                    "wave_count": rng.randrange(1, 33),
                })
    out.sort(key=lambda s: (s["timestamp"], s["dispatch_id"]))
    return out


# --------------------------------------------------------------------------------------------------


def write_csv(base: ModuleType, w: Any, samples: list[dict[str, Any]], outdir: Path) -> None:
    base.write_csv(w, outdir)
    field = base._csv_field
    head = '"Sample_Timestamp","Exec_Mask","Dispatch_Id","Instruction","Instruction_Comment","Correlation_Id"'
    extra = ',"Wave_Issued_Instruction","Instruction_Type","Stall_Reason","Wave_Count"'
    for method in ("stochastic", "host_trap"):
        lines = [head + (extra if method == "stochastic" else "")]
        for s in samples:
            if s["method"] != method:
                continue
            row: list[object] = [s["timestamp"], s["exec_mask"], s["dispatch_id"], s["instruction"], s["comment"],
                                 s["corr"]]
            if method == "stochastic":
                row += [s["wave_issued"], TYPE_PREFIX + s["inst_type"], REASON_PREFIX + s["stall_reason"],
                        s["wave_count"]]
            lines.append(",".join(field(v) for v in row))
        (outdir / f"{base.PID}_pc_sampling_{method}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


_PC_FIELDS = ("sampling_method", "dispatch_id", "exec_mask", "instruction", "instruction_comment", "wave_issued",
              "inst_type", "stall_reason", "wave_count")

#: The SDK's pc_sampling view (data_views.sql), without its arbiter-state and memory-counter columns.
_PC_VIEW = """CREATE VIEW IF NOT EXISTS pc_sampling AS
SELECT S.id, S.guid, S.timestamp, T.nid, P.pid, TH.tid, S.track_id, S.event_id, E.stack_id, E.correlation_id,
{fields}
FROM rocpd_sample{uuid} S
    JOIN rocpd_event{uuid} E ON E.id = S.event_id
    JOIN rocpd_track{uuid} T ON T.id = S.track_id
    JOIN rocpd_info_process{uuid} P ON P.id = T.pid
    JOIN rocpd_info_thread{uuid} TH ON TH.id = T.tid
    JOIN rocpd_pmc_event{uuid} PE ON PE.event_id = E.id
    JOIN rocpd_info_pmc{uuid} PMC ON PMC.id = PE.pmc_id
WHERE T.name_id = (SELECT id FROM rocpd_string{uuid} WHERE string = 'pc_sample')
GROUP BY S.id, S.guid, S.timestamp, T.nid, P.pid, TH.tid, S.track_id, S.event_id, E.stack_id, E.correlation_id"""


def write_rocpd(base: ModuleType, w: Any, samples: list[dict[str, Any]], path: Path) -> None:
    base.write_rocpd(w, path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    [(uuid,)] = con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'uuid'").fetchall()
    [(guid,)] = con.execute("SELECT value FROM rocpd_metadata WHERE tag = 'guid'").fetchall()
    [(nid,)] = con.execute("SELECT id FROM rocpd_info_node").fetchall()

    def table(name: str) -> str:
        return f'"rocpd_{name}{uuid}"'

    def next_id(name: str) -> int:
        return int(con.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table(name)}").fetchall()[0][0])

    texts = sorted({"pc_sample", "PC_SAMPLING_STOCHASTIC", "PC_SAMPLING_HOST_TRAP"}
                   | {s["instruction"] for s in samples} | {s["comment"] for s in samples if s["comment"]})
    have = dict(con.execute(f"SELECT string, id FROM {table('string')}").fetchall())
    sid = dict(have)
    nxt = next_id("string")
    for t in texts:
        if t not in sid:
            sid[t] = nxt
            con.execute(f"INSERT INTO {table('string')} (id, guid, string) VALUES (?, ?, ?)", (nxt, guid, t))
            nxt += 1
    track = next_id("track")
    con.execute(f"INSERT INTO {table('track')} (id, guid, nid, pid, tid, name_id, extdata) VALUES (?, ?, ?, ?, ?, ?, '{{}}')",
                (track, guid, nid, base.PID, base.PID, sid["pc_sample"]))
    pmc_id = next_id("info_pmc")
    field_id = {}
    for f in _PC_FIELDS:
        field_id[f] = pmc_id
        con.execute(
            f"""INSERT INTO {table('info_pmc')} (id, guid, nid, pid, agent_id, target_arch, name, symbol,
                description, component, value_type, block, is_constant, is_derived, extdata)
                VALUES (?, ?, ?, ?, ?, 'GPU', ?, ?, ?, 'pc_sampling', 'ABS', 'PC_SAMPLING', 0, 0, '{{}}')""",
            (pmc_id, guid, nid, base.PID, base.GPU_NODE, f, f, f"PC sample field {f}"))
        pmc_id += 1
    event = next_id("event")
    sample = next_id("sample")
    for s in samples:
        stochastic = s["method"] == "stochastic"
        con.execute(f"""INSERT INTO {table('event')} (id, guid, category_id, stack_id, parent_stack_id,
                        correlation_id, call_stack, line_info, extdata) VALUES (?, ?, ?, ?, ?, 0, '{{}}', '{{}}', '{{}}')""",
                    (event, guid, sid["PC_SAMPLING_STOCHASTIC" if stochastic else "PC_SAMPLING_HOST_TRAP"],
                     s["corr"], s["corr"]))
        con.execute(f"INSERT INTO {table('sample')} (id, guid, track_id, timestamp, event_id, extdata) "
                    "VALUES (?, ?, ?, ?, ?, '{}')", (sample, guid, track, s["timestamp"], event))
        values: dict[str, float] = {
            "sampling_method": 1 if stochastic else 2, "dispatch_id": s["dispatch_id"],
            "exec_mask": float(s["exec_mask"]), "instruction": sid[s["instruction"]],
        }
        if s["comment"]:
            values["instruction_comment"] = sid[s["comment"]]
        if stochastic:
            values.update(wave_issued=s["wave_issued"], inst_type=TYPES.index(s["inst_type"]),
                          stall_reason=REASONS.index(s["stall_reason"]), wave_count=s["wave_count"])
        con.executemany(f"INSERT INTO {table('pmc_event')} (guid, event_id, pmc_id, value, extdata) "
                        "VALUES (?, ?, ?, ?, '{}')", [(guid, event, field_id[f], v) for f, v in values.items()])
        event += 1
        sample += 1
    fields = ",\n".join(f"    MAX(CASE WHEN PMC.name = '{f}' THEN PE.value END) AS {f}" for f in _PC_FIELDS)
    con.execute(_PC_VIEW.format(fields=fields, uuid=uuid))
    con.commit()
    con.execute("VACUUM")
    con.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the SYNTHETIC AMD PC-sampling samples (rocpd + CSV)")
    parser.add_argument("--outdir", type=Path, default=Path(__file__).resolve().parents[1] / "sample_traces",
                        help="output directory (default: the repository's sample_traces/)")
    args = parser.parse_args(argv)
    base = _base()
    w = base.make_workload()
    samples = make_samples(w)
    write_rocpd(base, w, samples, args.outdir / "amd_synthetic_pc_rocpd" / f"{base.PID}_results.db")
    write_csv(base, w, samples, args.outdir / "amd_synthetic_pc_csv")
    n = sum(s["method"] == "stochastic" for s in samples)
    print(f"{n} stochastic and {len(samples) - n} host-trap samples over {len(w.dispatches)} dispatches")


if __name__ == "__main__":
    main()
