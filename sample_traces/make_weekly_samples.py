#!/usr/bin/env python
"""Weekly-review samples: real CPU captures of the bundled tiny decoder at several serving
settings, and the ingest of them with capture dates spread over past weeks.

Two commands, from the repository root::

    python sample_traces/make_weekly_samples.py capture          # needs torch; re-captures
    python sample_traces/make_weekly_samples.py ingest [--store S]  # tracekit only

``capture`` runs the tiny decoder of ``make_samples.py`` (same model, seeded weights, CPU, one
thread) once per entry of :data:`WEEKS`: two requests batches ("rounds") of ``batch`` prompts
each, prompt lengths :data:`PROMPT_LENS`; with bucketing on, every prompt is left-padded to the
bucket length (the padding tokens are computed like real ones). Each round is one prefill,
annotated ``prefill_len<real>_T<padded>`` (the name ``padding_waste`` reads sequence-bucket
padding from), then :data:`DECODE_STEPS` KV-cached decode steps ``decode_step_<i>``. Every file
is a real capture (``tracekit.collectors.torch_profile``) written to ``sample_traces/weekly/``
with ``manifest.json`` (file, capture date, workload, label, tags).

``ingest`` ingests the files into the store (default ``$TRACEKIT_STORE`` or ./tracekit.duckdb)
with the manifest's workload, label, tags and ``captured_at`` (``tracekit ingest
--captured-at``), then runs the analyzers on them. The captures were all made on the day the
script ran; the capture *dates* are assigned from :data:`WEEKS` so that the dashboard's weekly
page has weeks to show. Every measured number (times, FLOPs, padding) is the capture's own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "weekly"
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


def _file_name(batch: int, bucket: int | None) -> str:
    return f"tiny_decoder_bs{batch}_{'bucket' + str(bucket) if bucket else 'exact'}.pt.trace.json.gz"


def capture() -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import torch
    from make_samples import SEED, Config, KVCache, TinyDecoder

    from tracekit.collectors import torch_profile

    def rounds(model: TinyDecoder, prompts: list[torch.Tensor], real: tuple[int, ...], cap: object) -> None:
        for prompt, n in zip(prompts, real):
            cache = KVCache(model.cfg, prompt.shape[0])
            with torch.profiler.record_function(f"prefill_len{n}_T{prompt.shape[1]}"):
                tok = model(prompt, cache).argmax(-1, keepdim=True)
            if cap is not None:
                cap.step()  # type: ignore[attr-defined]
            for i in range(DECODE_STEPS):
                with torch.profiler.record_function(f"decode_step_{i}"):
                    tok = model(tok, cache).argmax(-1, keepdim=True)
                if cap is not None:
                    cap.step()  # type: ignore[attr-defined]

    OUT_DIR.mkdir(exist_ok=True)
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
        out = OUT_DIR / _file_name(batch, bucket)
        with torch.inference_mode():
            rounds(model, prompts, PROMPT_LENS, None)  # warm-up, not captured
            with tempfile.TemporaryDirectory() as tmp:
                with torch_profile(tmp, activities="auto", with_stack=False) as cap:
                    rounds(model, prompts, PROMPT_LENS, cap)
                assert cap.path is not None
                shutil.move(str(cap.path), out)
        entries.append({
            "file": out.name, "captured_at": when, "workload": WORKLOAD,
            "label": f"bs{batch} {'bucket' + str(bucket) if bucket else 'exact lengths'}",
            "tags": {"batch": str(batch), "bucket": str(bucket) if bucket else "off",
                     "prompt_lens": ",".join(map(str, PROMPT_LENS)), "decode_steps": str(DECODE_STEPS)},
        })
        print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    doc = {"note": "Real CPU captures made by make_weekly_samples.py capture (torch "
                   f"{torch.__version__}); captured_at is assigned per entry for the weekly review.",
           "runs": entries}
    MANIFEST.write_text(json.dumps(doc, indent=1) + "\n")


def ingest(store: Path | None) -> list[str]:
    """Ingest the manifest's captures (with their assigned dates) and analyze them; run ids."""
    import tracekit
    from tracekit.api import analyze_runs

    doc = json.loads(MANIFEST.read_text())
    ids = []
    for e in doc["runs"]:
        [res] = tracekit.ingest([OUT_DIR / e["file"]], store=store, workload=e["workload"], label=e["label"],
                                tags=e["tags"], captured_at=dt.datetime.fromisoformat(e["captured_at"]))
        ids.append(res.run_id)
    analyze_runs(ids, store)
    return ids


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("capture", help="re-capture the weekly samples (needs torch)")
    ing = sub.add_parser("ingest", help="ingest the weekly samples with their capture dates and analyze them")
    ing.add_argument("--store", type=Path, default=None, help="store [default: $TRACEKIT_STORE or ./tracekit.duckdb]")
    args = p.parse_args(argv)
    if args.cmd == "capture":
        capture()
    else:
        for rid in ingest(args.store):
            print(rid)


if __name__ == "__main__":
    main()
