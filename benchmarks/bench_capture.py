#!/usr/bin/env python3
"""Capture overhead benchmark (issue 6): the example server's throughput with and without capture.

What it measures
----------------
The workload is ``examples/serve_tiny_decoder.py`` (the samples' CPU decoder behind a streaming
completions server) driven by tracekit's load driver with the same settings each time
(``--concurrency``, ``--max-tokens``, generated prompts of ``--prompt-tokens``, seed 0):

* **baseline**: the server runs alone; the load driver runs for ``--duration`` s after a
  ``--warmup`` s warm-up load (its requests discarded) — output tokens/s, TTFT and TPOT p50 of
  the measured window;
* **captured**: ``tracekit capture --backend torch --duration D --warmup W --load URL -- python
  examples/serve_tiny_decoder.py`` — the same numbers for the requests inside the capture window
  (the PyTorch profiler records CPU ops with shapes and FLOPs on every thread), plus the time
  from the window's end to the run being stored (trace export + ingest) and the trace size.

Runs alternate (baseline, captured, baseline, …) ``--repeat`` times; the report gives medians and
the overhead = 1 − captured/baseline throughput. ``--out`` writes the raw numbers as JSON.

How to run
----------
::

    .venv/bin/python benchmarks/bench_capture.py --repeat 3 --out capture.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import REPO_ROOT, add_common_args, add_load_args, median, new_parser, write_report

EXAMPLE = REPO_ROOT / "examples" / "serve_tiny_decoder.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def baseline(args: argparse.Namespace) -> dict[str, Any]:
    from tracekit.collectors.load import LoadSpec, run_load

    port = free_port()
    server = subprocess.Popen([sys.executable, str(EXAMPLE), "--port", str(port)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().startswith("listening on")
        url = f"http://127.0.0.1:{port}"
        spec = LoadSpec(url, duration_s=args.warmup + args.duration, concurrency=args.concurrency,
                        max_tokens=args.max_tokens, prompt_tokens=args.prompt_tokens)
        t0 = time.time_ns()
        result = run_load(spec, stop=threading.Event())
        w0 = t0 + int(args.warmup * 1e9)
        w1 = w0 + int(args.duration * 1e9)
        from dataclasses import replace

        window = replace(result, records=[r for r in result.records if w0 <= r.start_ns <= w1])
        s = window.summary()
        return {"output_tokens_per_s": s.output_tokens_per_s, "ttft_p50_ms": s.ttft_ms.p50,
                "tpot_p50_ms": s.tpot_ms.p50, "requests": s.requests}
    finally:
        server.terminate()
        server.wait()


def captured(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "from tracekit.cli.main import main; main()", "capture", "--json",
               "--no-analyze", "--backend", "torch", "--duration", str(args.duration), "--warmup",
               str(args.warmup), "--out", f"{tmp}/cap", "--store", f"{tmp}/s.duckdb",
               "--load", f"http://127.0.0.1:{port}", "--concurrency", str(args.concurrency),
               "--max-tokens", str(args.max_tokens), "--prompt-tokens", args.prompt_tokens, "--",
               sys.executable, str(EXAMPLE), "--port", str(port)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        done_ns = time.time_ns()
        res = json.loads(proc.stdout)
        req = res["requests"]
        size = sum(Path(p).stat().st_size for p in res["trace_files"])
        return {"output_tokens_per_s": req["output_tokens_per_s"], "ttft_p50_ms": req["ttft_p50_ms"],
                "tpot_p50_ms": req["tpot_p50_ms"], "requests": req["requests"],
                "window_end_to_stored_s": (done_ns - res["window_end_ns"]) / 1e9,
                "trace_mb": size / 1e6, "host_events": res["run"]["n_host_events"]}


def main() -> None:
    ap = new_parser(__doc__)
    add_load_args(ap, duration=3.0)
    add_common_args(ap, tracekit=False, workdir=False, timeout=False)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "captured": []}
    for i in range(args.repeat):
        for name, fn in (("baseline", baseline), ("captured", captured)):
            r = fn(args)
            runs[name].append(r)
            print(f"[{i + 1}/{args.repeat}] {name}: {json.dumps(r)}", file=sys.stderr)

    def med(name: str, key: str) -> float:
        return median(r[key] for r in runs[name])

    report = {
        "machine": f"{os.cpu_count()} CPU {platform.machine()}, Python {platform.python_version()}",
        "settings": vars(args) | {"out": str(args.out) if args.out else None},
        "median": {name: {k: med(name, k) for k in runs[name][0]} for name in runs},
        "throughput_overhead": 1 - med("captured", "output_tokens_per_s") / med("baseline", "output_tokens_per_s"),
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))
    write_report(args.out, report)


if __name__ == "__main__":
    main()
