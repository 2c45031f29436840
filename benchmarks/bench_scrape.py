#!/usr/bin/env python3
"""Prometheus scrape cost (issue 21): what ``tracekit capture --load`` scraping ``/metrics`` costs the server.

What it measures
----------------
``tracekit capture --load URL`` scrapes the server's ``GET /metrics`` every 0.5 s while the load
runs (:class:`tracekit.collectors.load.prometheus.Scraper`). The workload is
``examples/serve_tiny_decoder.py`` (the samples' CPU decoder behind a streaming completions server
with vLLM's metric names), a fresh server per measurement, driven by tracekit's load driver with
the same settings each time (``--concurrency`` closed-loop clients, ``--max-tokens``, generated
prompts of ``--prompt-tokens``; the seed differs per repeat so that no run hits the prefix cache
with an earlier run's prompts):

* **anchor**: the server with no scraper;
* **0.5 s**: the scraper at tracekit's interval;
* **0.05 s**: ten times as often, to make a cost visible if there is one.

Each reports output tokens/s, TTFT p50 and TPOT p50 of the requests that started in the
``--duration`` s after a ``--warmup`` s warm-up. Modes alternate within each repeat; the report
gives medians, and the overhead = 1 − mode/anchor throughput. Separately, with the server idle,
``--scrapes`` scrapes one after another give the cost of one scrape on the client (GET, read and
parse: median ms) and the size of the exposition text (bytes).

How to run
----------
::

    .venv/bin/python benchmarks/bench_scrape.py --repeat 3 --out scrape.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from harness import REPO_ROOT, add_common_args, add_load_args, median, new_parser, write_report

EXAMPLE = REPO_ROOT / "examples" / "serve_tiny_decoder.py"
MODES: dict[str, float | None] = {"anchor": None, "0.5 s": 0.5, "0.05 s": 0.05}


@contextmanager
def server() -> Iterator[str]:
    """A fresh example server on a free port; its base URL."""
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait()


def measure(args: argparse.Namespace, interval_s: float | None, seed: int) -> dict[str, Any]:
    """One measurement: the load for warm-up + duration, scraped every ``interval_s`` (None: not)."""
    from tracekit.collectors.load import LoadSpec, run_load
    from tracekit.collectors.load.prometheus import Scraper, metrics_url

    with server() as url:
        spec = LoadSpec(url, duration_s=args.warmup + args.duration, concurrency=args.concurrency,
                        max_tokens=args.max_tokens, prompt_tokens=args.prompt_tokens, seed=seed)
        scraper = Scraper(metrics_url(url), interval_s=interval_s).start() if interval_s else None
        t0 = time.time_ns()
        result = run_load(spec, stop=threading.Event())
        log = scraper.stop() if scraper is not None else None
    w0 = t0 + int(args.warmup * 1e9)
    w1 = w0 + int(args.duration * 1e9)
    s = replace(result, records=[r for r in result.records if w0 <= r.start_ns <= w1]).summary()
    return {"output_tokens_per_s": s.output_tokens_per_s, "ttft_p50_ms": s.ttft_ms.p50,
            "tpot_p50_ms": s.tpot_ms.p50, "requests": s.requests,
            "scrapes": 0 if log is None else len(log.scrapes), "scrape_errors": [] if log is None else log.errors}


def one_scrape(n: int) -> dict[str, Any]:
    """``n`` scrapes of an idle server one after another: median ms per scrape and the text's size."""
    from tracekit.collectors.load.prometheus import _fetch, metrics_url, parse_metrics

    with server() as url:
        target = metrics_url(url)
        times, size, samples = [], 0, 0
        for _ in range(n):
            t0 = time.perf_counter()
            text = _fetch(target, 5.0)
            samples = len(parse_metrics(text, target))
            times.append((time.perf_counter() - t0) * 1e3)
            size = len(text.encode())
    return {"scrape_ms_p50": median(times), "scrape_ms_max": max(times), "bytes": size, "samples": samples}


def main() -> None:
    ap = new_parser(__doc__)
    add_load_args(ap, duration=5.0)
    ap.add_argument("--scrapes", type=int, default=200, help="scrapes of an idle server for the per-scrape cost")
    add_common_args(ap, tracekit=False, workdir=False, timeout=False)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in MODES}
    for i in range(args.repeat):
        for name, interval in MODES.items():
            r = measure(args, interval, seed=i)
            runs[name].append(r)
            print(f"[{i + 1}/{args.repeat}] {name}: {json.dumps(r)}", file=sys.stderr)
    single = one_scrape(args.scrapes)

    def med(name: str, key: str) -> float:
        return median(r[key] for r in runs[name])

    base = med("anchor", "output_tokens_per_s")
    report = {
        "machine": f"{os.cpu_count()} CPU {platform.machine()}, Python {platform.python_version()}",
        "settings": vars(args) | {"out": str(args.out) if args.out else None},
        "median": {name: {k: med(name, k) for k in ("output_tokens_per_s", "ttft_p50_ms", "tpot_p50_ms",
                                                    "requests", "scrapes")} for name in runs},
        "throughput_overhead": {name: 1 - med(name, "output_tokens_per_s") / base for name in runs if name != "anchor"},
        "one_scrape": single,
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))
    write_report(args.out, report)


if __name__ == "__main__":
    main()
