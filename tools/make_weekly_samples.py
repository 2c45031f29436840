#!/usr/bin/env python
"""Weekly-review samples: real CPU captures of the bundled tiny decoder at several serving
settings, each with the request log of the same run, and the ingest of them with capture dates
spread over past weeks.

Two commands, from the repository root::

    python tools/make_weekly_samples.py capture [--outdir D]  # needs torch; re-captures
    python tools/make_weekly_samples.py ingest [--store S]  # tracekit only

``capture`` runs the tiny decoder of ``make_samples.py`` (same model, seeded weights, CPU, one
thread) once per entry of :data:`WEEKS`: two requests batches ("rounds") of ``batch`` prompts
each, prompt lengths :data:`PROMPT_LENS`; with bucketing on, every prompt is left-padded to the
bucket length (the padding tokens are computed like real ones). Each round is one prefill,
annotated ``prefill_len<real>_T<padded>`` (the name ``padding_waste`` reads sequence-bucket
padding from), then :data:`DECODE_STEPS` KV-cached decode steps ``decode_step_<i>``. Every trace
is a real capture (``tracekit.collectors.torch_profile``).

Each prompt of a round is one request served in that round's batch, and the capture measures it
(:func:`round_requests`): ``start_ns`` = Unix time (``time.time_ns()``) when the round starts;
``ttft_ns`` = until the prefill's first token is available (prefill forward + argmax; on the CPU
a tensor op returns only once its result is computed, so no further synchronisation is needed);
``itl_ns`` = the gaps between successive tokens (one per decode step); ``e2e_ns`` = until the
last token; ``prompt_tokens`` = the real prompt length (not the padded one); ``output_tokens`` =
1 + :data:`DECODE_STEPS`; status 200, no error, ``token_count_source`` ``"counted"``. Durations are
``time.perf_counter_ns()`` differences. These are real measurements of the profiled run, so they
include the profiler's overhead (the recording of every op and ``TorchCapture.step``).

Each run is written as a directory ``sample_traces/weekly/<name>/`` holding the trace and its
request log ``tracekit-requests.jsonl`` (:data:`tracekit.ingest.REQUESTS_FILE`), and
``manifest.json`` lists the directories (capture date, workload, label, tags).

``ingest`` ingests the directories (one run each; ``tracekit ingest DIR`` stores the request log
with the run) into the store (default ``$TRACEKIT_STORE`` or ./tracekit.duckdb) with the
manifest's workload, label, tags and ``captured_at`` (``tracekit ingest --captured-at``), then runs
the analyzers on them (``serving`` turns the requests into TTFT/TPOT/tokens-per-second metrics).
The captures were all made on the day the script ran; the capture *dates* are assigned from
:data:`WEEKS` so that the dashboard's weekly page has weeks to show. Every measured number (times,
FLOPs, padding, request latencies) is the capture's own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracekit.collectors.load import RequestRecord

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE.parent / "sample_traces" / "weekly"
MANIFEST = OUT_DIR / "manifest.json"
WORKLOAD = "tiny-decoder-cpu"
PROMPT_LENS = (37, 45)  # real prompt tokens of the two rounds
DECODE_STEPS = 6
#: (capture date assigned, batch size, bucket length or None for exact-length prompts)
WEEKS: tuple[tuple[str, int, int | None], ...] = (
    ("2026-10-19T10:00:00", 1, None),
    ("2026-10-26T10:00:00", 2, None),
    ("2026-11-02T10:00:00", 4, None),
    ("2026-11-09T10:00:00", 4, 64),
    ("2026-11-16T10:00:00", 8, 64),
    ("2026-11-23T10:00:00", 8, None),
)


def run_name(batch: int, bucket: int | None) -> str:
    """The run's directory name, also the stem of its trace file."""
    return f"tiny_decoder_bs{batch}_{'bucket' + str(bucket) if bucket else 'exact'}"


def round_requests(start_ns: int, token_ns: Sequence[int], *, batch: int, prompt_tokens: int,
                   first_id: int) -> list[RequestRecord]:
    """The ``batch`` requests of one round (ids ``first_id`` …), which share its timings:
    ``start_ns`` Unix ns at the round's start, ``token_ns`` the time of each token from that start
    (the prefill's first, then one per decode step)."""
    from tracekit.collectors.load import RequestRecord

    gaps = [b - a for a, b in itertools.pairwise(token_ns)]
    return [RequestRecord(request_id=first_id + j, start_ns=start_ns, ttft_ns=token_ns[0], itl_ns=gaps,
                          e2e_ns=token_ns[-1], prompt_tokens=prompt_tokens, output_tokens=len(token_ns),
                          status=200, error=None, token_count_source="counted")
            for j in range(batch)]


def capture(out_dir: Path = OUT_DIR) -> None:
    """Re-capture the six runs into ``out_dir`` (one directory each, and ``manifest.json``)."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import torch
    from make_samples import SEED, Config, KVCache, TinyDecoder

    from tracekit.collectors import torch_profile
    from tracekit.collectors.load import write_requests
    from tracekit.ingest import REQUESTS_FILE

    def rounds(model: TinyDecoder, prompts: Sequence[torch.Tensor], real: Sequence[int],
               cap: Any) -> list[RequestRecord]:
        """Serve the rounds; each token's time is taken before the profiler step, whose cost
        lands in the next token's gap (as a serving loop's own overhead would)."""
        records: list[RequestRecord] = []
        for prompt, n in zip(prompts, real):
            cache = KVCache(model.cfg, prompt.shape[0])
            start_ns, t0 = time.time_ns(), time.perf_counter_ns()
            with torch.profiler.record_function(f"prefill_len{n}_T{prompt.shape[1]}"):
                tok = model(prompt, cache).argmax(-1, keepdim=True)
            token_ns = [time.perf_counter_ns() - t0]  # CPU: the result exists once the op returns
            if cap is not None:
                cap.step()
            for i in range(DECODE_STEPS):
                with torch.profiler.record_function(f"decode_step_{i}"):
                    tok = model(tok, cache).argmax(-1, keepdim=True)
                token_ns.append(time.perf_counter_ns() - t0)
                if cap is not None:
                    cap.step()
            records += round_requests(start_ns, token_ns, batch=prompt.shape[0], prompt_tokens=n,
                                      first_id=len(records))
        return records

    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    entries = []
    for when, batch, bucket in WEEKS:
        torch.manual_seed(SEED)
        cfg = Config()
        model = TinyDecoder(cfg).eval()
        prompts = []
        for n in PROMPT_LENS:
            p = torch.randint(1, cfg.vocab_size, (batch, n))
            if bucket:
                assert n <= bucket and bucket + DECODE_STEPS + 1 <= cfg.max_seq_len
                p = torch.cat([torch.zeros(batch, bucket - n, dtype=p.dtype), p], dim=1)  # left padding
            prompts.append(p)
        name = run_name(batch, bucket)
        run_dir = out_dir / name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir()
        with torch.inference_mode():
            rounds(model, prompts, PROMPT_LENS, None)  # warm-up, not captured
            with tempfile.TemporaryDirectory() as tmp:
                with torch_profile(tmp, activities="auto", with_stack=False) as cap:
                    records = rounds(model, prompts, PROMPT_LENS, cap)
                assert cap.path is not None
                shutil.move(str(cap.path), run_dir / f"{name}.pt.trace.json.gz")
        write_requests(records, run_dir / REQUESTS_FILE)
        entries.append({
            "dir": name, "captured_at": when, "workload": WORKLOAD,
            "label": f"bs{batch} {'bucket' + str(bucket) if bucket else 'exact lengths'}",
            "tags": {"batch": str(batch), "bucket": str(bucket) if bucket else "off",
                     "prompt_lens": ",".join(map(str, PROMPT_LENS)), "decode_steps": str(DECODE_STEPS)},
        })
        ttft = sorted(r.ttft_ns for r in records if r.ttft_ns is not None)
        size = sum(f.stat().st_size for f in run_dir.iterdir())
        print(f"wrote {run_dir} ({size:,} bytes; {len(records)} requests, TTFT {ttft[0] / 1e6:.2f}"
              f"…{ttft[-1] / 1e6:.2f} ms)")
    doc = {"note": "Real CPU captures made by make_weekly_samples.py capture (torch "
                   f"{torch.__version__}), each a directory with the trace and the request log of the same "
                   "run; captured_at is assigned per entry for the weekly review.",
           "runs": entries}
    (out_dir / MANIFEST.name).write_text(json.dumps(doc, indent=1) + "\n")


def ingest(store: Path | None) -> list[str]:
    """Ingest the manifest's run directories (with their assigned dates) and analyze them; run ids."""
    import tracekit
    from tracekit.api import analyze_runs

    doc = json.loads(MANIFEST.read_text())
    ids = []
    for e in doc["runs"]:
        [res] = tracekit.ingest([OUT_DIR / e["dir"]], store=store, workload=e["workload"], label=e["label"],
                                tags=e["tags"], captured_at=dt.datetime.fromisoformat(e["captured_at"]))
        ids.append(res.run_id)
    analyze_runs(ids, store)
    return ids


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = p.add_subparsers(dest="cmd", required=True)
    cap = sub.add_parser("capture", help="re-capture the weekly samples (needs torch)")
    cap.add_argument("--outdir", type=Path, default=OUT_DIR, help="where to write them [default: sample_traces/weekly]")
    ing = sub.add_parser("ingest", help="ingest the weekly samples with their capture dates and analyze them")
    ing.add_argument("--store", type=Path, default=None, help="store [default: $TRACEKIT_STORE or ./tracekit.duckdb]")
    args = p.parse_args(argv)
    if args.cmd == "capture":
        capture(args.outdir)
    else:
        for rid in ingest(args.store):
            print(rid)


if __name__ == "__main__":
    main()
