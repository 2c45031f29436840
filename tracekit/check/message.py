"""The message of ``tracekit check``: markdown for a PR comment (and Slack), JSON for scripts.

Both are made from :meth:`tracekit.check.CheckResult.as_dict`, so they carry the same content:
the gated metrics (baseline, candidate, change, verdict) or the change points of a history, then
per regression the kernel categories and kernels that moved, new kernels, launch-count changes,
new findings and a link to the dashboard's compare view. The markdown starts with a hidden
marker (:func:`marker`) by which the GitHub poster finds its previous comment.
"""

from __future__ import annotations

import json
from typing import Any

from tracekit.check import CheckResult
from tracekit.names import short_kernel_name, short_kernel_names

MARKER_PREFIX = "<!-- tracekit-check"


def marker(key: str | None = None) -> str:
    """Hidden HTML comment that identifies a tracekit comment (per ``key``, e.g. a workload)."""
    return f"{MARKER_PREFIX}{':' + key if key else ''} -->"


def to_json(result: CheckResult) -> str:
    """The check as a JSON document (the ``--format json`` output)."""
    return json.dumps(result.as_dict(), indent=2, default=str) + "\n"


def _num(v: float | None, unit: str | None = None) -> str:
    if v is None:
        return "—"
    a = abs(v)
    text = f"{v:,.0f}" if a >= 1000 else f"{v:.4g}" if a >= 0.01 or a == 0 else f"{v:.3g}"
    return f"{text} {unit}" if unit and unit not in ("count", "fraction") else text


def _pct(change: float | None) -> str:
    if change is None:
        return "—"
    return f"{change * 100:+.1f} %"


def _p(p: float | None) -> str:
    return "—" if p is None else f"{p:.3g}"


_ICON = {"regression": "🔴 regression", "improvement": "🟢 improvement", "unchanged": "unchanged",
         "not significant": "⚪ not significant", "missing": "missing"}


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")





def _run(rid: str, runs: dict[str, Any]) -> str:
    label = (runs.get(rid) or {}).get("label")
    return f"`{rid}`" + (f" ({_esc(label)})" if label else "")


def to_markdown(result: CheckResult, key: str | None = None) -> str:
    """The check as GitHub-flavoured markdown, headed by the hidden :func:`marker`."""
    d = result.as_dict()
    cfg = d["config"]
    runs = d["runs"]
    lines = [marker(key)]
    warnings = [n for n in d["notes"] if n.startswith("warning:")]
    if d["tier"] == "pr":
        n_reg = sum(v["verdict"] == "regression" for v in d["verdicts"])
        n_unconfirmed = sum(v["verdict"] == "not significant" for v in d["verdicts"])
        head = (f"🔴 {n_reg} regression{'s' if n_reg != 1 else ''}" if n_reg
                else f"⚪ no significant regression ({n_unconfirmed} change{'s' if n_unconfirmed != 1 else ''} "
                "above the minimum not confirmed)" if n_unconfirmed else "✅ no regression")
        lines += [f"## tracekit check: {head}", ""]
        lines += [f"> ⚠️ {_esc(w.removeprefix('warning: '))}" for w in warnings] + ([""] if warnings else [])
        lines.append(f"Candidate: {len(d['candidate_runs'])} run(s) "
                     f"{', '.join(_run(r, runs) for r in d['candidate_runs'])} · Baseline: "
                     f"{len(d['baseline_runs'])} run(s) {', '.join(_run(r, runs) for r in d['baseline_runs'])}")
        lines.append(f"Test: {cfg['test']} (one-sided) at α = {cfg['alpha']:g}, and a change of the medians "
                     f"≥ the metric's minimum (default {cfg['min_change']}).")
        lines.append("")
        if d["verdicts"]:
            lines += ["| metric | better | baseline (median) | candidate (median) | change | p | min change | verdict |",
                      "|---|---|---|---|---|---|---|---|"]
            for v in d["verdicts"]:
                lines.append(
                    f"| {v['metric']} | {v['better'] or '—'} | {_num(v['baseline_median'], v['unit'])} "
                    f"(n={len(v['baseline_values'])}) | {_num(v['candidate_median'], v['unit'])} "
                    f"(n={len(v['candidate_values'])}) | {_pct(v['change'])} | {_p(v['p_value'])} | "
                    f"{v['min_change']} | {_ICON[v['verdict']]} |")
            notes = [f"- {v['metric']}: {v['note']}" for v in d["verdicts"] if v["note"]]
            if notes:
                lines += ["", *dict.fromkeys(notes)]
    else:
        h = d["history"]
        alerts = [c for c in d["changes"] if c["alert"]]
        head = (f"🔴 {len(alerts)} new regression{'s' if len(alerts) != 1 else ''}" if alerts
                else "✅ no new regression")
        lines += [f"## tracekit check: {head} in `{_esc(h['workload'])}`", ""]
        lines.append(f"History: {len(h['runs'])} run(s) by capture time, newest {_run(h['runs'][-1], runs)}. "
                     f"Change points: {cfg['detector']} (permutation test, p ≤ {cfg['p_value']:g}, "
                     f"{cfg['permutations']} permutations, ≥ {cfg['min_size']} runs per segment); an alert is a "
                     f"regression ≥ the metric's minimum change (default {cfg['min_change']}) that began within "
                     f"the newest {cfg['alert_window']} runs and was not found before the newest run (each change alerts once).")
        lines.append("")
        if d["changes"]:
            lines += [("| metric | first run of the change | runs after | before (median) | after (median) "
                       "| change | p | verdict |"), "|---|---|---|---|---|---|---|---|"]
            for c in d["changes"]:
                verdict = _ICON[c["verdict"]] + (" (new: alert)" if c["alert"] else
                                                  " (known: found before the newest run)" if c["known"] else "")
                lines.append(
                    f"| {c['metric']} | {_run(c['first_run'], runs)} | {c['n_runs'] - c['index']} | "
                    f"{_num(c['before_median'], c['unit'])} | {_num(c['after_median'], c['unit'])} | "
                    f"{_pct(c['change'])} | {_p(c['p_value'])} | {verdict} |")
        quiet = [m for m in h["metrics"] if not m["change_points"]]
        if quiet:
            lines += ["", "No change point: " + ", ".join(
                f"{m['metric']} ({m['runs']} runs{', ' + m['note'] if m['note'] else ''})" for m in quiet) + "."]
    for e in d["explanations"]:
        lines += ["", f"### What moved: {', '.join(e['metrics'])}", ""]
        lines.append(f"Baseline {_run(e['baseline_run'], runs)} → candidate {_run(e['candidate_run'], runs)} "
                     f"({e['chosen']}).")
        if e["compare_url"]:
            lines.append(f"[Open the comparison in the dashboard]({e['compare_url']})")
        if e["slower_kernels"]:
            lines += ["", "Kernels that got slower (summed device time):", "",
                      "| kernel | category | baseline ms | candidate ms | Δ ms | launches |", "|---|---|---|---|---|---|"]
            shorts = short_kernel_names([k["name"] for k in e["slower_kernels"]], 90)
            for k, short in zip(e["slower_kernels"], shorts):
                lines.append(f"| `{_esc(short)}` | {k['category']} | {k['a_ms']:.3f} | {k['b_ms']:.3f} | "
                             f"{k['delta_ms']:+.3f} | {k['a_kernels']} → {k['b_kernels']} |")
        else:
            lines += ["", "No kernel shared by both runs got slower."]
        if e["new_kernels"]:
            lines += ["", "New kernels: " + ", ".join(
                f"`{_esc(short_kernel_name(k['name'], 60))}` ({k['b_kernels']}×, {k['b_ms']:.3f} ms)" for k in e["new_kernels"])]
        if e["gone_kernels"]:
            lines += ["", "Kernels no longer launched: " + ", ".join(
                f"`{_esc(short_kernel_name(k['name'], 60))}` ({k['a_kernels']}×, {k['a_ms']:.3f} ms)" for k in e["gone_kernels"])]
        if e["launch_count_changes"]:
            lines += ["", "Launch count changes: " + ", ".join(
                f"`{_esc(short_kernel_name(k['name'], 60))}` {k['a_kernels']} → {k['b_kernels']}" for k in e["launch_count_changes"])]
        moved = [c for c in e["categories"] if c["delta_ms"]]
        if moved:
            lines += ["", "By kernel category: " + ", ".join(
                f"{c['category']} {c['a_ms']:.3f} → {c['b_ms']:.3f} ms ({c['delta_ms']:+.3f})" for c in moved)]
        if e["new_findings"]:
            lines += ["", "New findings:"] + [f"- **{f['severity']}** ({f['analyzer']}) {_esc(f['title'])}"
                                              for f in e["new_findings"]]
    others = [n for n in d["notes"] if not n.startswith("warning:") or d["tier"] != "pr"]
    if others:
        lines += ["", *(f"_{_esc(n)}_" for n in others)]
    return "\n".join(lines) + "\n"


def to_slack(result: CheckResult) -> dict[str, Any]:
    """Slack incoming-webhook payload: a summary line and the regressed metrics and kernels, in
    mrkdwn sections of at most 3,000 characters (Slack's limit per text block)."""
    d = result.as_dict()
    runs = d["runs"]
    lines: list[str] = []
    if d["tier"] == "pr":
        regs = [v for v in d["verdicts"] if v["verdict"] == "regression"]
        title = (f":red_circle: tracekit check: {len(regs)} regression(s)" if regs
                 else ":white_check_mark: tracekit check: no regression")
        for v in regs:
            lines.append(f"*{v['metric']}* {_num(v['baseline_median'], v['unit'])} → "
                         f"{_num(v['candidate_median'], v['unit'])} ({_pct(v['change'])}, p {_p(v['p_value'])})")
    else:
        alerts = [c for c in d["changes"] if c["alert"]]
        title = (f":red_circle: tracekit check: {len(alerts)} new regression(s) in {d['history']['workload']}"
                 if alerts else f":white_check_mark: tracekit check: no new regression in {d['history']['workload']}")
        for c in alerts:
            lines.append(f"*{c['metric']}* {_num(c['before_median'], c['unit'])} → {_num(c['after_median'], c['unit'])} "
                         f"({_pct(c['change'])}) from run `{c['first_run']}`"
                         f"{' (' + runs[c['first_run']]['label'] + ')' if (runs.get(c['first_run']) or {}).get('label') else ''}")
    for e in d["explanations"]:
        top = e["slower_kernels"][:3]
        if top:
            lines.append("slower: " + ", ".join(f"`{short_kernel_name(k['name'], 60)}` {k['delta_ms']:+.3f} ms" for k in top))
        if e["compare_url"]:
            lines.append(f"<{e['compare_url']}|compare {e['baseline_run']} → {e['candidate_run']}>")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": title}}]
    chunk = ""
    for line in lines:
        line = line[:2900]
        if len(chunk) + len(line) + 1 > 2900:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": chunk}})
            chunk = ""
        chunk += line + "\n"
    if chunk:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": chunk}})
    return {"text": title, "blocks": blocks[:50]}
