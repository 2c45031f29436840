"""Markdown and Slack injection in `tracekit check` messages: labels, workload names, kernel
names, run ids, metric names and finding titles come from traces, the store and the
configuration, and must render as the literal text in a PR comment (no raw HTML, no broken code
span or table, no link, no mention) and in Slack mrkdwn (no link, no ``<!channel>``).

The markdown is rendered with markdown-it-py (CommonMark plus GFM tables, installed with Rich)
and the rendered HTML and tokens are checked, not only the source text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import distinct_copies

from tracekit.check import CheckResult, Explanation, run_check
from tracekit.check.gate import ChangeReport, MetricVerdict
from tracekit.check.message import marker, md_code, md_text, md_url, to_markdown, to_slack
from tracekit.ingest import ingest
from tracekit.names import short_kernel_name, short_kernel_names

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (a Rich dependency) renders the markdown")

XSS = "<img src=x onerror=alert(1)>"
KERNEL = "evil`kernel``|name|`"  # backticks, a double backtick run, pipes, ends with a backtick
METRIC = "lat_ms <b>|x|</b>"
FINDING = "[click](javascript:alert(1)) **bold** @octocat & <script>x</script>"


def _render(text: str) -> tuple[str, list[Any]]:
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    tokens = md.parse(text)
    return md.renderer.render(tokens, md.options, {}), tokens


def _inline(tokens: list[Any], kind: str) -> list[str]:
    return [c.content for t in tokens if t.type == "inline" for c in (t.children or []) if c.type == kind]


def _result(tier: str = "pr") -> CheckResult:
    runs = {"b1": {"label": XSS, "workload": "w"}, "c1": {"label": "pr | `x` @team", "workload": "w"}}
    verdict = MetricVerdict(metric=METRIC, analyzer="a", unit="ms", better="lower", baseline_runs=["b1"],
                            candidate_runs=["c1"], baseline_values=[1.0], candidate_values=[2.0],
                            baseline_median=1.0, candidate_median=2.0, change=1.0, p_value=0.001, method="m",
                            min_change="2%", verdict="regression", note=f"note {XSS}")
    change = ChangeReport(metric=METRIC, analyzer="a", unit="ms", better="lower", first_run="c1", index=1,
                          n_runs=2, before_runs=["b1"], after_runs=["c1"], before_median=1.0, after_median=2.0,
                          change=1.0, p_value=0.001, min_change="2%", verdict="regression", alert=True)
    kernel = {"name": KERNEL, "category": "gemm|<i>", "a_ms": 1.0, "b_ms": 2.0, "delta_ms": 1.0,
              "a_kernels": 1, "b_kernels": 2}
    expl = Explanation(metrics=[METRIC], baseline_run="b1", candidate_run="c1", chosen="closest",
                       categories=[kernel], slower_kernels=[kernel], new_kernels=[kernel], gone_kernels=[kernel],
                       launch_count_changes=[kernel],
                       new_findings=[{"severity": "warn", "analyzer": "a", "title": FINDING}],
                       compare_url="http://dash:8050/compare?a=b1&b=c1) [x](javascript:1) <b>|")
    history = {"workload": f"wl`{XSS}", "runs": ["b1", "c1"], "metrics": []}
    return CheckResult(tier=tier, regression=True, candidate_runs=["c1"], baseline_runs=["b1"],
                       config={"test": "mann-whitney", "alpha": 0.01, "min_change": "2%", "detector": "d",
                               "p_value": 0.01, "permutations": 10, "min_size": 1, "alert_window": 2},
                       verdicts=[verdict] if tier == "pr" else [], changes=[change] if tier == "history" else [],
                       history=history if tier == "history" else None, explanations=[expl], runs=runs,
                       notes=[f"warning: {XSS}", f"plain {XSS}"])


@pytest.mark.parametrize("tier", ["pr", "history"])
def test_markdown_renders_hostile_strings_literally(tier: str) -> None:
    md = to_markdown(_result(tier))
    html, tokens = _render(md)
    # no HTML from the data: every tag in the rendered page is one the markdown itself makes
    assert "<img" not in html and "<script" not in html and "<b>" not in html and "<i>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert _inline(tokens, "html_inline") == [] and not [t for t in tokens if t.type == "html_block"][1:]
    # the only link is the dashboard's, with its special characters percent-encoded
    links = [c.attrGet("href") for t in tokens if t.type == "inline" for c in (t.children or [])
             if c.type == "link_open"]
    assert links == ["http://dash:8050/compare?a=b1&b=c1%29%20%5Bx%5D%28javascript:1%29%20%3Cb%3E%7C"]
    # every kernel name is one code span holding exactly its (shortened) text, backticks and pipes included
    code = _inline(tokens, "code_inline")
    long, short = short_kernel_names([KERNEL], 90)[0], short_kernel_name(KERNEL, 60)
    assert "``" in long and "|" in long and "``" in short and "|" in short  # the names still carry them
    assert sum(c in (long, short) for c in code) == 4  # slower, new, gone, launch-count
    assert "c1" in code and "b1" in code  # run ids are code spans too
    # the tables keep their shape: the pipes in the data did not add cells
    rows = [t for t in tokens if t.type == "tr_open"]
    cells: list[int] = []
    for i, t in enumerate(tokens):
        if t.type == "tr_open":
            cells.append(0)
        elif t.type in ("td_open", "th_open"):
            cells[-1] += 1
    assert rows and set(cells) <= {8, 6} and cells.count(6) == 2  # header and one kernel row of 6
    # the text survives as text: metric name, finding title, labels
    text = "".join(_inline(tokens, "text"))
    assert "lat_ms <b>|x|</b>" in text and "[click](javascript:alert(1)) **bold** @" in text
    assert "octocat & <script>x</script>" in text
    assert "\u200b" in text.split("**bold** @")[1][:1]  # the mention is broken by a zero-width space


def test_markdown_escaping_rules() -> None:
    """The exact rules, for the cases the renderer test does not reach."""
    assert md_text(XSS) == "&lt;img src=x onerror=alert(1)&gt;"
    assert md_text("a|b\nc\\d") == "a\\|b c\\\\d"
    assert md_text("snake_case _emph_ *b* ~s~ [l](u) `c`") == \
        "snake_case \\_emph\\_ \\*b\\* \\~s\\~ \\[l\\](u) \\`c\\`"
    assert md_text("@team mail@example.com & &amp;") == "@&#8203;team mail@&#8203;example.com &amp; &amp;amp;"
    assert md_code("plain") == "`plain`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("a``b`") == "``` a``b` ```"
    assert md_code("`x") == "`` `x ``"
    assert md_code("a|b", table=True) == "`a\\|b`" and md_code("a|b") == "`a|b`"
    assert md_url("javascript:alert(1)") is None and md_url("http://[::1") is None
    assert md_url("https://d/x?a=1&b=(2)") == "https://d/x?a=1&b=%282%29"
    # a comment key cannot close the hidden marker early
    assert marker("k --> <script>") == "<!-- tracekit-check:k%20--%3E%20%3Cscript%3E -->"
    assert marker("decode-bs8") == "<!-- tracekit-check:decode-bs8 -->"


def test_slack_mrkdwn_escapes_control_characters() -> None:
    for tier in ("pr", "history"):
        doc = to_slack(_result(tier))
        texts = [doc["text"]] + [b["text"]["text"] for b in doc["blocks"]]
        joined = "\n".join(texts)
        # the only "<" is the compare link Slack must parse; its URL has no raw | or >
        opens = [i for i, ch in enumerate(joined) if ch == "<"]
        assert len(opens) == 1
        link = joined[opens[0]:joined.index(">", opens[0]) + 1]
        assert link.startswith("<http://dash:8050/compare?a=b1&b=c1%29%20[x]%28javascript:1%29%20%3Cb%3E%7C|") and link.count("|") == 1
        assert "`evilˋkernelˋˋ|name|ˋ`" in joined  # a backtick cannot end the code early
        if tier == "history":
            assert doc["text"].endswith("in wl`&lt;img src=x onerror=alert(1)&gt;")
            assert "from run `c1` (pr | `x` @team)" in joined
        else:
            assert "*lat_ms &lt;b&gt;|x|&lt;/b&gt;*" in joined


def test_a_stored_label_reaches_the_comment_escaped(tmp_path: Path) -> None:
    """End to end from the store: a run labelled with an XSS payload, checked, rendered."""
    store = tmp_path / "s.duckdb"
    ids = [ingest([p], store, label=XSS)[0].run_id for p in distinct_copies(tmp_path, 2)]
    md = to_markdown(run_check(store, candidates=[ids[1]], baselines=[ids[0]]))
    assert f"`{ids[1]}` (&lt;img src=x onerror=alert(1)&gt;)" in md and "<img" not in md
    html, _ = _render(md)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
