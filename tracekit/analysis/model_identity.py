"""model_identity: which catalog model a serving trace looks like, and how sure that is, when no
model is attached. Never assumed: the finding tells the user what to pass as ``--model``.

Inputs (views): ``run_models`` (nothing to do when a model is attached), ``steps`` (the first
decode step, else the first step with a phase), ``runtime_calls`` and ``device_work`` (the kernel
classes one step launches), ``ops`` (linear-layer input shapes, when recorded), ``ranks``
(world size), and the model catalog (:mod:`tracekit.analysis.models`).

Evidence, strongest first:

* **Op shapes** (eager traces with ``record_shapes``): the hidden size H = the most common inner
  dimension of ``aten::linear``/``mm``/``addmm`` inputs; the vocabulary V = the output width of the
  one GEMM per step with K = H and N ∉ the per-layer widths (the LM head), × the world size when
  the head is split over tensor-parallel ranks; the layer count L = occurrences of the most
  repeated linear input shape ÷ steps.
* **Kernel counts of one step** (graph replays carry no shapes): the normalization kernels n of a
  step are 2 per layer + 1 (4 with QK-norm), its GEMMs g are 4 per dense layer + the LM head (2
  attention GEMMs per MoE layer), its attention kernels 1 or 2 per layer; MoE kernels say MoE;
  ``mxfp4``/``fp8`` in GEMM names say the weight format.

Each catalog model scores one point per fact it matches. The best score wins when it is unique:
"matches" with H, V and L all matching, "likely" otherwise; a tie lists the candidates.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import duckdb

from tracekit.analysis import models
from tracekit.analysis.base import Analyzer, AnalyzerResult, Finding
from tracekit.analysis.step_costing import formats_from_names

LINEAR_OPS = ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul")


class ModelIdentity(Analyzer, name="model_identity"):
    summary = "which catalog model a serving trace looks like (vocab, hidden size, layers), when none is attached"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        if con.execute("SELECT count(*) FROM run_models WHERE run_id = ?", [run_id]).fetchall()[0][0]:
            return AnalyzerResult()
        steps = con.execute(
            """SELECT rank, host_start_ns, host_end_ns, phase FROM steps
               WHERE run_id = ? AND phase IN ('decode', 'prefill', 'mixed')
               ORDER BY phase = 'decode' DESC, step LIMIT 1""", [run_id]).fetchall()
        n_steps = con.execute("SELECT count(*) FROM steps WHERE run_id = ? AND phase IN ('decode', 'prefill', "
                              "'mixed')", [run_id]).fetchall()[0][0]
        if not steps:
            return AnalyzerResult()  # not a serving trace with steps: no LLM to recognise
        ws = con.execute("SELECT max(world_size) FROM ranks WHERE run_id = ?", [run_id]).fetchall()[0][0]
        world = int(ws) if ws else 1
        shape = self._shape_facts(con, run_id, int(n_steps), world)
        kern = self._kernel_facts(con, run_id, steps[0])
        facts: dict[str, Any] = {
            "world_size": world, "hidden_size": shape.get("hidden_size"), "vocab_size": shape.get("vocab_size"),
            "layers": shape.get("layers") or kern.get("layers", ()), "moe": kern.get("moe"),
            "weight_format": kern.get("weight_format"), "said": shape.get("said", []) + kern.get("said", [])}
        scored = []
        for key, spec in sorted({s.key: s for s in models.catalog().values()}.items()):
            matched = self._matches(spec, facts)
            scored.append((len(matched), key, matched))
        scored.sort(key=lambda t: (-t[0], t[1]))
        best = scored[0][0]
        if best == 0:
            return AnalyzerResult()
        top = [s for s in scored if s[0] == best]
        said = "; ".join(facts["said"])
        costable = con.execute(
            "SELECT count(*) FROM steps WHERE run_id = ? AND phase IN ('decode', 'prefill', 'mixed') AND new_tokens > 0",
            [run_id]).fetchall()[0][0] > 0
        fmts = formats_from_names(kern.get("names", []))  # the step's kernels: no scan of the whole run
        flags = "".join(f" --{'kv-cache' if k == 'kv_cache' else k} {v}" for k, v in sorted(fmts.items())
                        if not (k == "weights" and v == "mxfp4"))  # mxfp4 experts are the catalog's own
        stated = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(fmts.items()))
        what = ("to cost its steps" if costable else
                "to attach it (its step markers state no token counts, so even then no step is costed)")
        if len(top) == 1:
            _, key, matched = top[0]
            strong = {"hidden_size", "vocab_size", "layers"} <= set(matched)
            sure = "matches" if strong else "likely"
            title = (f"the trace {'matches' if strong else 'looks like'} {key} ({', '.join(matched)}); "
                     f"not assumed: pass --model {key}{flags} {what}")
        else:
            keys = [k for _, k, _ in top]
            sure = "ambiguous"
            title = (f"the trace could be {', '.join(keys[:-1])} or {keys[-1]} ({', '.join(top[0][2])}); "
                     f"pass --model NAME{flags} (or a config.json) {what}")
        detail = (f"No model is attached to this run, so no step is costed by what it must move (decode MBU, "
                  f"prefill MFU). What the trace says: {said}"
                  + (f"; kernel names state {stated}" if fmts else "")
                  + ". Catalog models scored by the facts they match: "
                  + ", ".join(f"{k} {n}" for n, k, _ in scored[:4])
                  + f". Confidence: {sure}. tracekit does not pick a model by itself: attach one with "
                  "`tracekit analyze RUN --model NAME|config.json` (docs/models.md)"
                  + ("" if costable else "; costing needs step markers that state tokens per step (vLLM's "
                     "execute_… hook as TraceLens adds it, SGLang step[DECODE bs=N] / step[EXTEND bs=N toks=T])")
                  + ".")
        ev = {"facts": {k: v for k, v in facts.items() if k != "said"}, "candidates": [
            {"model": k, "score": n, "matched": m} for n, k, m in scored[:5]], "confidence": sure}
        return AnalyzerResult(findings=[Finding("info", title, detail, ev)])

    @staticmethod
    def _matches(spec: models.ModelSpec, f: dict[str, Any]) -> list[str]:
        out = []
        if f.get("hidden_size") == spec.hidden_size:
            out.append("hidden_size")
        if f.get("vocab_size") == spec.vocab_size:
            out.append("vocab_size")
        if spec.num_hidden_layers in f.get("layers", ()):
            out.append("layers")
        if f.get("moe") is not None and f["moe"] == spec.is_moe:
            out.append("moe" if spec.is_moe else "dense")
        fmt = f.get("weight_format")
        moe_ok = f.get("moe") is None or f["moe"] == spec.is_moe
        if fmt and moe_ok and fmt in (spec.expert_weights_dtype, spec.weights_dtype):  # a format alone says little
            out.append(fmt)
        return out

    @staticmethod
    def _shape_facts(con: duckdb.DuckDBPyConnection, run_id: str, n_steps: int, world: int) -> dict[str, Any]:
        # aten::linear calls aten::matmul / mm / addmm: count one level only (linear when recorded)
        rows = con.execute(
            """WITH o AS (SELECT name, input_dims FROM ops WHERE run_id = ? AND name IN ? AND input_dims IS NOT NULL)
               SELECT input_dims, count(*) FROM o
               WHERE name = 'aten::linear' OR NOT EXISTS (SELECT 1 FROM o WHERE name = 'aten::linear')
                 AND name IN ('aten::mm', 'aten::addmm')
               GROUP BY ALL""", [run_id, list(LINEAR_OPS)]).fetchall()
        shapes: Counter[tuple[int, int]] = Counter()  # (K, N) of x[..., K] · W
        for dims, n in rows:
            try:
                d = json.loads(dims)
            except ValueError:
                continue
            mats = [x for x in d if isinstance(x, list) and len(x) >= 2 and all(isinstance(v, int) for v in x)]
            if len(mats) < 2:
                continue
            a, b = mats[0], mats[1]
            if a[-1] == b[-1] and len(b) == 2:  # linear: W is [N, K]
                shapes[(a[-1], b[0])] += int(n)
            elif a[-1] == b[0] and len(b) == 2:  # mm: W is [K, N]
                shapes[(a[-1], b[1])] += int(n)
        if not shapes:
            return {"said": []}
        ks: Counter[int] = Counter()
        for (k, _), n in shapes.items():
            ks[k] += n
        hidden = ks.most_common(1)[0][0]
        per_layer = max(shapes.values())
        layers = max(1, round(per_layer / max(1, n_steps)))
        known_vocab = {s.vocab_size for s in models.catalog().values()}
        heads = [(nn, n) for (k, nn), n in shapes.items() if k == hidden and n <= n_steps * 2]
        vocab = None
        for nn, _ in sorted(heads, key=lambda t: -t[0]):
            for tp in sorted({1, world}):
                if nn * tp in known_vocab:
                    vocab = nn * tp
                    break
            if vocab:
                break
        said = [f"linear layers have inner size {hidden} (the hidden size)",
                (f"the most repeated linear shape runs {per_layer}× in {n_steps} step(s) ({layers} layers)"
                 if per_layer >= 8 * n_steps else f"too few linear shapes ({per_layer}× the most repeated) for a layer "
                 "count")]
        if vocab:
            said.append(f"an LM-head GEMM gives a vocabulary of {vocab:,}"
                        + (f" (its width × the world size {world})" if vocab not in {nn for nn, _ in heads} else ""))
        # a few recorded shapes (piecewise graphs hide most layers) say nothing about the depth
        return {"hidden_size": hidden, "vocab_size": vocab, "layers": (layers,) if per_layer >= 8 * n_steps else (),
                "said": said}

    @staticmethod
    def _kernel_facts(con: duckdb.DuckDBPyConnection, run_id: str, step: tuple[Any, ...]) -> dict[str, Any]:
        rank, start, end, phase = step
        rows = con.execute(
            """WITH c AS (SELECT DISTINCT correlation_id FROM runtime_calls
                          WHERE run_id = ? AND rank = ? AND start_ns >= ? AND start_ns < ? AND correlation_id IS NOT NULL)
               SELECT kernel_class, name FROM device_work w
               WHERE w.run_id = ? AND w.rank = ? AND w.correlation_id IN (SELECT correlation_id FROM c)
                 AND w.category = 'kernel'""", [run_id, rank, start, end, run_id, rank]).fetchall()
        if not rows:
            return {}
        cls = Counter(str(c) for c, _ in rows)
        names = " ".join(str(n) for c, n in rows if c in ("gemm", "moe"))
        everything = " ".join(str(n) for _, n in rows)
        moe = cls.get("moe", 0) > 0 or bool(re.search(r"(?i)fused_moe|moe_|moe::|expert", everything))
        n_norm, n_gemm, n_attn = cls.get("norm", 0), cls.get("gemm", 0), cls.get("attention", 0)
        votes: Counter[int] = Counter()
        per_layer = ((n_norm, (2, 4)), (n_gemm, (2, 3) if moe else (4, 7)), (n_attn, (1, 2)))
        for n, per in per_layer:
            cands = {(n - extra) // p for p in per for extra in (0, 1) if n > extra and (n - extra) % p == 0}
            votes.update(cands)
        layers = tuple(sorted(v for v, c in votes.items() if c >= 2))
        said = [f"one {phase} step launches {n_norm} norm, {n_gemm} GEMM, {n_attn} attention and "
                f"{cls.get('moe', 0)} MoE-class kernels"
                + (f", consistent with {' or '.join(map(str, layers))} layers" if layers else "")]
        fmt = ("mxfp4" if re.search(r"(?i)mxfp4|E2m1", names)
               else "fp8" if re.search(r"(?i)fp8|F8HS|F8F8|e4m3", names) else None)
        said.append(("MoE kernels" + ("" if cls.get("moe", 0) else " by name (expert routing)")
                     + ": a mixture-of-experts model" if moe else "no MoE kernels: a dense model")
                    + (f"; {fmt} GEMMs" if fmt else ""))
        return {"moe": moe, "weight_format": fmt, "layers": layers, "said": said,
                "names": sorted({(str(c), str(n)) for c, n in rows})}
