"""The message of ``tracekit check``: markdown for a PR comment (and Slack), JSON for scripts.

Both are made from :meth:`tracekit.check.CheckResult.as_dict`, so they carry the same content:
the gated metrics (baseline, candidate, change, verdict) or the change points of a history, then
per regression the kernel categories and kernels that moved, new kernels, launch-count changes,
new findings and a link to the dashboard's compare view. The markdown starts with a hidden
marker (:func:`marker`) by which the GitHub poster finds its previous comment.

Every string that comes from a trace, the store or the configuration (labels, workload names,
kernel names, run ids, metric names, finding titles, notes, URLs) is escaped where it is put:
in markdown by :func:`md_text` (``&``, ``<``, ``>`` as HTML entities, so no raw HTML reaches a PR
comment; markdown punctuation that could start emphasis, a link, a code span, strikethrough or a
table cell backslash-escaped; ``@name`` made inert, so a label cannot notify anyone), in code
spans by :func:`md_code` (a backtick fence longer than any backtick run inside, CommonMark's rule),
in links by :func:`md_url`; in Slack mrkdwn by :func:`slack_text` (``&``, ``<``, ``>`` as Slack
documents). Line breaks and other control characters become spaces.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from tracekit.check import CheckResult
from tracekit.names import short_kernel_name, short_kernel_names

MARKER_PREFIX = "<!-- tracekit-check"


def marker(key: str | None = None) -> str:
    """Hidden HTML comment that identifies a tracekit comment (per ``key``, e.g. a workload)."""
    return f"{MARKER_PREFIX}{':' + _comment_safe(key) if key else ''} -->"


def _comment_safe(key: str) -> str:
    """``key`` as it may stand inside an HTML comment: ``<``, ``>``, ``!``, ``%``, whitespace and
    control characters percent-encoded, so that it cannot end the comment (``-->``, ``--!>``)."""
    return "".join(f"%{ord(ch):02X}" if ch in "<>!%" or ord(ch) <= 32 or ord(ch) == 127 else ch for ch in key)


def _flat(text: Any) -> str:
    """``text`` on one line: line breaks and other unprintable characters as spaces."""
    return "".join(ch if ch.isprintable() else " " for ch in str(text))


_MD_BACKSLASH = frozenset("\\`*[]|~")


def md_text(text: Any) -> str:
    """``text`` as literal markdown text (also inside a GFM table cell): ``&``, ``<``, ``>`` as
    HTML entities; ``\\ ` * [ ] | ~`` and a ``_`` that is not between two letters or digits
    backslash-escaped; ``@`` before a name followed by a zero-width space (``@&#8203;name``), so a
    mention does not notify."""
    t = _flat(text)
    out = []
    for i, ch in enumerate(t):
        if ch == "&":
            out.append("&amp;")
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch in _MD_BACKSLASH:
            out.append("\\" + ch)
        elif ch == "_":
            inner = 0 < i < len(t) - 1 and t[i - 1].isalnum() and t[i + 1].isalnum()
            out.append("_" if inner else "\\_")
        elif ch == "@" and i + 1 < len(t) and (t[i + 1].isalnum() or t[i + 1] in "_-"):
            out.append("@&#8203;")
        else:
            out.append(ch)
    return "".join(out)


def md_code(text: Any, *, table: bool = False) -> str:
    """``text`` as a markdown code span: fenced by one backtick more than its longest run of
    backticks, padded with a space when it starts or ends with a backtick or a space (CommonMark
    strips one space from each side). In a GFM table cell (``table``) ``|`` is escaped as ``\\|``,
    which the table parser turns back into ``|``."""
    t = _flat(text)
    longest = max((len(run) for run in re.findall(r"`+", t)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if not t or t[0] in "` " or t[-1] in "` " else ""
    if table:
        t = t.replace("|", "\\|")
    return f"{fence}{pad}{t}{pad}{fence}"


_URL_SAFE = "-._~:/?#[]@!$&'*+,;=%"


def md_url(url: Any) -> str | None:
    """``url`` fit for a markdown link destination or a Slack ``<url|text>`` link (characters
    outside RFC 3986's set, ``(``, ``)``, ``<``, ``>`` and ``|`` percent-encoded), or None unless
    it is an http(s) URL with a host."""
    if not isinstance(url, str):
        return None
    try:
        parts = urllib.parse.urlsplit(url.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        return None
    return urllib.parse.quote(url.strip(), safe=_URL_SAFE) if ok else None


def slack_text(text: Any) -> str:
    """``text`` for Slack mrkdwn: ``&``, ``<``, ``>`` as ``&amp;``, ``&lt;``, ``&gt;`` (what Slack
    documents: no link, mention or ``<!channel>`` can be formed), on one line."""
    return _flat(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_code(text: Any) -> str:
    """``text`` as Slack inline code. mrkdwn has no escape for a backtick, so one inside becomes
    ``ˋ`` (U+02CB) rather than end the code early."""
    return "`" + slack_text(text).replace("`", "\u02cb") + "`"


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


def _run(rid: str, runs: dict[str, Any], table: bool = False) -> str:
    label = (runs.get(rid) or {}).get("label")
    return md_code(rid, table=table) + (f" ({md_text(label)})" if label else "")


def _md_pr(d: dict[str, Any]) -> list[str]:
    """The PR tier's heading, runs, test and verdict table."""
    cfg, runs = d["config"], d["runs"]
    lines: list[str] = []
    warnings = [n for n in d["notes"] if n.startswith("warning:")]
    n_reg = sum(v["verdict"] == "regression" for v in d["verdicts"])
    n_unconfirmed = sum(v["verdict"] == "not significant" for v in d["verdicts"])
    head = (f"🔴 {n_reg} regression{'s' if n_reg != 1 else ''}" if n_reg
            else f"⚪ no significant regression ({n_unconfirmed} change{'s' if n_unconfirmed != 1 else ''} "
            "above the minimum not confirmed)" if n_unconfirmed else "✅ no regression")
    lines += [f"## tracekit check: {head}", ""]
    lines += [f"> ⚠️ {md_text(w.removeprefix('warning: '))}" for w in warnings] + ([""] if warnings else [])
    lines.append(f"Candidate: {len(d['candidate_runs'])} run(s) "
                 f"{', '.join(_run(r, runs) for r in d['candidate_runs'])} · Baseline: "
                 f"{len(d['baseline_runs'])} run(s) {', '.join(_run(r, runs) for r in d['baseline_runs'])}")
    lines.append(f"Test: {md_text(cfg['test'])} (one-sided) at α = {cfg['alpha']:g}, and a change of the medians "
                 f"≥ the metric's minimum (default {md_text(cfg['min_change'])}).")
    lines.append("")
    if d["verdicts"]:
        lines += ["| metric | better | baseline (median) | candidate (median) | change | p | min change | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        for v in d["verdicts"]:
            lines.append(
                f"| {md_text(v['metric'])} | {md_text(v['better'] or '—')} | {_num(v['baseline_median'], v['unit'])} "
                f"(n={len(v['baseline_values'])}) | {_num(v['candidate_median'], v['unit'])} "
                f"(n={len(v['candidate_values'])}) | {_pct(v['change'])} | {_p(v['p_value'])} | "
                f"{md_text(v['min_change'])} | {_ICON[v['verdict']]} |")
        notes = [f"- {md_text(v['metric'])}: {md_text(v['note'])}" for v in d["verdicts"] if v["note"]]
        if notes:
            lines += ["", *dict.fromkeys(notes)]
    return lines


def _md_history(d: dict[str, Any]) -> list[str]:
    """The history tier's heading, change-point method and change table."""
    cfg, runs = d["config"], d["runs"]
    lines: list[str] = []
    h = d["history"]
    alerts = [c for c in d["changes"] if c["alert"]]
    head = (f"🔴 {len(alerts)} new regression{'s' if len(alerts) != 1 else ''}" if alerts
            else "✅ no new regression")
    lines += [f"## tracekit check: {head} in {md_code(h['workload'])}", ""]
    lines.append(f"History: {len(h['runs'])} run(s) by capture time, newest {_run(h['runs'][-1], runs)}. "
                 f"Change points: {md_text(cfg['detector'])} (permutation test, p ≤ {cfg['p_value']:g}, "
                 f"{cfg['permutations']} permutations, ≥ {cfg['min_size']} runs per segment); an alert is a "
                 f"regression ≥ the metric's minimum change (default {md_text(cfg['min_change'])}) that began within "
                 f"the newest {cfg['alert_window']} runs and was not found before the newest run (each change alerts once).")
    lines.append("")
    if d["changes"]:
        lines += [("| metric | first run of the change | runs after | before (median) | after (median) "
                   "| change | p | verdict |"), "|---|---|---|---|---|---|---|---|"]
        for c in d["changes"]:
            verdict = _ICON[c["verdict"]] + (" (new: alert)" if c["alert"] else
                                              " (known: found before the newest run)" if c["known"] else "")
            lines.append(
                f"| {md_text(c['metric'])} | {_run(c['first_run'], runs, table=True)} | {c['n_runs'] - c['index']} | "
                f"{_num(c['before_median'], c['unit'])} | {_num(c['after_median'], c['unit'])} | "
                f"{_pct(c['change'])} | {_p(c['p_value'])} | {verdict} |")
    quiet = [m for m in h["metrics"] if not m["change_points"]]
    if quiet:
        lines += ["", "No change point: " + ", ".join(
            f"{md_text(m['metric'])} ({m['runs']} runs{', ' + md_text(m['note']) if m['note'] else ''})" for m in quiet) + "."]
    return lines


def _md_explanation(e: dict[str, Any], runs: dict[str, Any]) -> list[str]:
    """What moved between the baseline and the candidate run the check explains."""
    lines: list[str] = []
    lines += ["", f"### What moved: {', '.join(md_text(m) for m in e['metrics'])}", ""]
    lines.append(f"Baseline {_run(e['baseline_run'], runs)} → candidate {_run(e['candidate_run'], runs)} "
                 f"({md_text(e['chosen'])}).")
    if e["compare_url"]:
        link = md_url(e["compare_url"])
        lines.append(f"[Open the comparison in the dashboard]({link})" if link else
                     f"Comparison in the dashboard: {md_code(e['compare_url'])}")
    if e["slower_kernels"]:
        lines += ["", "Kernels that got slower (summed device time):", "",
                  "| kernel | category | baseline ms | candidate ms | Δ ms | launches |", "|---|---|---|---|---|---|"]
        shorts = short_kernel_names([k["name"] for k in e["slower_kernels"]], 90)
        for k, short in zip(e["slower_kernels"], shorts):
            lines.append(f"| {md_code(short, table=True)} | {md_text(k['category'])} | {k['a_ms']:.3f} | {k['b_ms']:.3f} | "
                         f"{k['delta_ms']:+.3f} | {k['a_kernels']} → {k['b_kernels']} |")
    else:
        lines += ["", "No kernel shared by both runs got slower."]
    if e["new_kernels"]:
        lines += ["", "New kernels: " + ", ".join(
            f"{md_code(short_kernel_name(k['name'], 60))} ({k['b_kernels']}×, {k['b_ms']:.3f} ms)" for k in e["new_kernels"])]
    if e["gone_kernels"]:
        lines += ["", "Kernels no longer launched: " + ", ".join(
            f"{md_code(short_kernel_name(k['name'], 60))} ({k['a_kernels']}×, {k['a_ms']:.3f} ms)" for k in e["gone_kernels"])]
    if e["launch_count_changes"]:
        lines += ["", "Launch count changes: " + ", ".join(
            f"{md_code(short_kernel_name(k['name'], 60))} {k['a_kernels']} → {k['b_kernels']}" for k in e["launch_count_changes"])]
    moved = [c for c in e["categories"] if c["delta_ms"]]
    if moved:
        lines += ["", "By kernel category: " + ", ".join(
            f"{md_text(c['category'])} {c['a_ms']:.3f} → {c['b_ms']:.3f} ms ({c['delta_ms']:+.3f})" for c in moved)]
    if e["new_findings"]:
        lines += ["", "New findings:"] + [f"- **{md_text(f['severity'])}** ({md_text(f['analyzer'])}) {md_text(f['title'])}"
                                          for f in e["new_findings"]]
    return lines


def to_markdown(result: CheckResult, key: str | None = None) -> str:
    """The check as GitHub-flavoured markdown, headed by the hidden :func:`marker`."""
    d = result.as_dict()
    lines = [marker(key)]
    lines += _md_pr(d) if d["tier"] == "pr" else _md_history(d)
    for e in d["explanations"]:
        lines += _md_explanation(e, d["runs"])
    others = [n for n in d["notes"] if not n.startswith("warning:") or d["tier"] != "pr"]
    if others:
        lines += ["", *(f"_{md_text(n)}_" for n in others)]
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
            lines.append(f"*{slack_text(v['metric'])}* {_num(v['baseline_median'], v['unit'])} → "
                         f"{_num(v['candidate_median'], v['unit'])} ({_pct(v['change'])}, p {_p(v['p_value'])})")
    else:
        alerts = [c for c in d["changes"] if c["alert"]]
        workload = slack_text(d["history"]["workload"])
        title = (f":red_circle: tracekit check: {len(alerts)} new regression(s) in {workload}"
                 if alerts else f":white_check_mark: tracekit check: no new regression in {workload}")
        for c in alerts:
            label = (runs.get(c["first_run"]) or {}).get("label")
            lines.append(f"*{slack_text(c['metric'])}* {_num(c['before_median'], c['unit'])} → {_num(c['after_median'], c['unit'])} "
                         f"({_pct(c['change'])}) from run {slack_code(c['first_run'])}"
                         f"{' (' + slack_text(label) + ')' if label else ''}")
    for e in d["explanations"]:
        top = e["slower_kernels"][:3]
        if top:
            lines.append("slower: " + ", ".join(f"{slack_code(short_kernel_name(k['name'], 60))} {k['delta_ms']:+.3f} ms" for k in top))
        link = md_url(e["compare_url"]) if e["compare_url"] else None
        if link:
            lines.append(f"<{link}|compare {slack_text(e['baseline_run'])} → {slack_text(e['candidate_run'])}>")
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
