"""compile_churn: compilations inside the capture window, and which argument shape caused them.

Inputs (views): ``compiles`` (one row per compile), ``xla_modules`` (the compiled variants of each
jitted function with their entry signatures), ``ops`` (for torch.compile: the input shapes of the
first op executed in each compiled region), ``ranks`` (the capture window).

Math:
* compile wall time = the union of a function's compile intervals (compiles running at the same
  time on several threads — e.g. two request threads of a server — count once); compile share =
  compile wall time ÷ the longest rank span (``last_ns − first_ns``), so it never exceeds 100 %;
  ``compile_time`` (metric, evidence ``compile_time_ns``) stays the plain Σ ``dur_ns``;
* a function compiled ≥ 2 times in the window recompiles: its variants' argument shapes are
  compared position by position, and every (argument, dimension) whose size differs between
  variants is named with the sizes in compile order;
* suggested buckets: the varying sizes rounded up to powers of two (the usual bucketing; a
  warm-up that compiles each bucket once before serving removes the compiles from the hot path).

Thresholds: recompiles (≥ 2 compiles of one function) are a ``warning``, ``critical`` when the
compiles take ≥ 20 % of the window; a single compile in the window is ``info`` (a cold start
inside the measurement) when it takes ≥ 5 % of the window. A run whose compiles all happened
before the window has no compile rows and gets no finding.
"""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb

from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding, Metric, Severity

RECOMPILE_CRITICAL_SHARE = 0.20  # fraction of the capture window
COLD_START_INFO_SHARE = 0.05  # fraction of the capture window

_DIMS = re.compile(r"\[([0-9,]*)\]")


def parse_shape(text: str) -> list[int] | None:
    """``"s32[1,12]"`` → ``[1, 12]``; ``"f32[]"`` → ``[]``; tuples and tokens → None."""
    m = _DIMS.search(text)
    if m is None or text.startswith("("):
        return None
    return [int(d) for d in m.group(1).split(",") if d]


def changed_dimensions(variants: list[list[list[int] | None]]) -> list[dict[str, Any]]:
    """(argument, dimension, sizes in order) for every dimension whose size differs between the
    variants (each variant: one shape per argument, None where unknown)."""
    out: list[dict[str, Any]] = []
    if len(variants) < 2:
        return out
    n_args = min(len(v) for v in variants)
    for arg in range(n_args):
        shapes = [v[arg] for v in variants]
        if any(s is None for s in shapes):
            continue
        known = [s for s in shapes if s is not None]
        if len({len(s) for s in known}) != 1:
            out.append({"argument": arg, "dimension": None, "shapes": known})
            continue
        for dim in range(len(known[0])):
            sizes = [s[dim] for s in known]
            if len(set(sizes)) > 1:
                out.append({"argument": arg, "dimension": dim, "sizes": sizes})
    return out


def buckets(sizes: list[int]) -> list[int]:
    """Powers of two covering the observed sizes."""
    return sorted({1 << max(0, (s - 1).bit_length()) for s in sizes if s > 0})


class CompileChurn(Analyzer, name="compile_churn"):
    summary = "compiles inside the capture window, per function, and the argument dimension that changed"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        window = con.execute(
            "SELECT max(last_ns - first_ns) FROM ranks WHERE run_id = ?", [run_id]
        ).fetchall()[0][0]
        rows = con.execute(
            """SELECT coalesce(function, name) AS fn, backend, count(*), sum(dur_ns),
                      list(compile_id ORDER BY start_ns), list(dur_ns ORDER BY start_ns)
               FROM compiles WHERE run_id = ? GROUP BY ALL ORDER BY sum(dur_ns) DESC""",
            [run_id],
        ).fetchall()
        total_ns = sum(int(r[3]) for r in rows)
        wall = self._wall_ns(con, run_id)
        res = AnalyzerResult(
            metrics=[
                Metric("compiles", float(sum(int(r[2]) for r in rows)), "count", "lower"),
                Metric("compile_time", total_ns / 1e9, "s", "lower"),
                Metric("compile_time_fraction", wall.get(None, 0) / window if window else None, "fraction",
                       "lower"),
            ]
        )
        for fn, backend, n, fn_ns, compile_ids, durations in rows:
            fn_wall = wall.get((fn, backend), int(fn_ns))
            share = fn_wall / window if window else 0.0
            variants, labels = self._variants(con, run_id, fn, backend, compile_ids)
            changes = changed_dimensions(variants)
            evidence: dict[str, Any] = {
                "function": fn,
                "backend": backend,
                "compiles_in_window": int(n),
                "compile_time_ns": int(fn_ns),
                "compile_wall_ns": int(fn_wall),
                "window_ns": int(window) if window else None,
                "share_of_window": share,
                "durations_ns": [int(d) for d in durations],
                "variants": labels,
                "changed_dimensions": changes,
            }
            if n >= 2:
                res.findings.append(self._recompile_finding(fn, backend, int(n), int(fn_ns), share, changes, evidence))
            elif share >= COLD_START_INFO_SHARE:
                res.findings.append(
                    Finding(
                        severity="info",
                        title=f"{fn} compiled during the capture ({fn_wall / 1e9:.2f} s, {share:.0%} of it)",
                        detail=(
                            f"The first call of {fn} compiled inside the measured window. Warm it up "
                            "before measuring so that the capture shows steady-state serving."
                        ),
                        evidence=evidence,
                        saving_ns=int(fn_wall),
                        saving_fraction=share,
                    )
                )
        return res

    @staticmethod
    def _recompile_finding(
        fn: str, backend: str, n: int, fn_ns: int, share: float, changes: list[dict[str, Any]],
        evidence: dict[str, Any],
    ) -> Finding:
        described = []
        for c in changes:
            if c.get("dimension") is None:
                described.append(f"argument {c['argument']} changed rank: {c['shapes']}")
                continue
            described.append(
                f"argument {c['argument']} dimension {c['dimension']}: " + " → ".join(str(s) for s in c["sizes"])
            )
        why = "; ".join(described) if described else "the changed argument shapes are not recorded in the trace"
        sized = [c for c in changes if c.get("dimension") is not None]
        if sized:
            # the dimension that took the most distinct sizes is the one to bucket
            top = max(sized, key=lambda c: (len(set(c["sizes"])), max(c["sizes"])))
            suggestion = (
                f" Pad argument {top['argument']} dimension {top['dimension']} to buckets such as "
                f"{buckets(top['sizes'])} and compile each bucket once in a warm-up before serving."
            )
        else:
            suggestion = " Pad the varying inputs to a few fixed sizes and warm them up before serving."
        severity: Severity = "critical" if share >= RECOMPILE_CRITICAL_SHARE else "warning"
        # every compile after the first of each bucket is avoidable once the buckets are warmed up
        wall = evidence["compile_wall_ns"]
        avoidable = max(0, wall - min(evidence["durations_ns"]))
        overlap = (f" ({fn_ns / 1e9:.2f} s of compile time summed over threads compiling at the same time)"
                   if fn_ns > 1.05 * wall else "")
        return Finding(
            severity=severity,
            title=f"{fn} recompiled: {n} compiles in the window ({wall / 1e9:.2f} s, {share:.0%} of it)",
            detail=f"{backend} compiled {fn} {n} times while serving{overlap}. What changed: {why}.{suggestion}",
            evidence=evidence,
            saving_ns=avoidable,
            saving_fraction=avoidable / evidence["window_ns"] if evidence["window_ns"] else None,
        )

    @staticmethod
    def _wall_ns(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[Any, int]:
        """Union length (ns) of the compile intervals per (function, backend), and of all of them
        under the key ``None``: overlapping compiles on several threads count once."""
        rows = con.execute(
            """WITH c AS (SELECT coalesce(function, name) AS fn, backend, start_ns AS s, start_ns + dur_ns AS e
                          FROM compiles WHERE run_id = ?),
                    keyed AS (SELECT fn, backend, s, e FROM c UNION ALL SELECT NULL, NULL, s, e FROM c),
                    o AS (SELECT *, max(e) OVER (PARTITION BY fn, backend ORDER BY s, e
                                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
                          FROM keyed),
                    g AS (SELECT *, sum(CASE WHEN prev_end IS NULL OR s > prev_end THEN 1 ELSE 0 END)
                                        OVER (PARTITION BY fn, backend ORDER BY s, e) AS island
                          FROM o),
                    islands AS (SELECT fn, backend, max(e) - min(s) AS ns FROM g GROUP BY fn, backend, island)
               SELECT fn, backend, sum(ns) FROM islands GROUP BY ALL""",
            [run_id],
        ).fetchall()
        return {(None if fn is None and be is None else (fn, be)): int(ns) for fn, be, ns in rows}

    @staticmethod
    def _variants(
        con: duckdb.DuckDBPyConnection, run_id: str, fn: str, backend: str, compile_ids: list[str | None]
    ) -> tuple[list[list[list[int] | None]], list[dict[str, Any]]]:
        """Argument shapes of each compiled variant, in compile order, and labels for evidence."""
        if backend == "torch.compile":
            # The profiler records no shapes on the compiled region itself: the input shapes of
            # the first op each region variant executes stand for the region's inputs.
            rows = con.execute(
                """WITH regions AS (
                     SELECT name, start_ns, end_ns, tid,
                            row_number() OVER (PARTITION BY name ORDER BY start_ns) AS k
                     FROM ops WHERE run_id = ? AND name LIKE 'Torch-Compiled Region:%')
                   SELECT r.name,
                          (SELECT o.input_dims FROM ops o
                            WHERE o.run_id = ? AND o.tid = r.tid AND o.start_ns > r.start_ns
                              AND o.end_ns <= r.end_ns AND o.input_dims IS NOT NULL
                              AND o.input_dims <> '[]'
                            ORDER BY o.start_ns LIMIT 1)
                   FROM regions r WHERE k = 1""",
                [run_id, run_id],
            ).fetchall()
            by_id = {name.split(": ", 1)[1]: dims for name, dims in rows}
            variants: list[list[list[int] | None]] = []
            labels: list[dict[str, Any]] = []
            for cid in compile_ids:
                dims = by_id.get(cid or "")
                shapes = json.loads(dims) if dims else None
                if shapes is not None:
                    variants.append([s if isinstance(s, list) else None for s in shapes])
                labels.append({"compile_id": cid, "first_op_input_dims": shapes})
            return variants, labels
        mods = con.execute(
            """SELECT module_name, entry_signature, param_shapes FROM xla_modules
               WHERE run_id = ? AND function = ? AND compiled_in_window ORDER BY module_id""",
            [run_id, fn],
        ).fetchall()
        variants = [[parse_shape(p) for p in json.loads(params)] for _, _, params in mods if params]
        labels = [{"module": m, "signature": sig} for m, sig, _ in mods]
        return variants, labels
