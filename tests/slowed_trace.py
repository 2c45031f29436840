"""Rewrite a real Kineto trace as if one kernel ran slower: the test input of ``tracekit check``.

Every instance of the kernel (``cat`` ``kernel``, exact ``name``) takes ``factor`` × its duration;
everything that happens after an instance ends moves later by the time added so far (host spans
that contain an instance stretch), and every other device row (kernel, memcpy, memset) keeps its
duration. ``scale`` multiplies every device row's duration as well (run-to-run noise of a copy).
"""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path
from typing import Any

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def slow_kernel(src: Path, dst: Path, kernel: str, factor: float, scale: float = 1.0) -> dict[str, Any]:
    """Write the rewritten trace to ``dst`` (gzip); return {"instances", "added_us"}."""
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]

    def slowed(e: dict[str, Any]) -> bool:
        return e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("name") == kernel

    def dev_factor(e: dict[str, Any]) -> float:
        return (factor if slowed(e) else 1.0) * scale

    # time added by every device row, at its (original) end; later events shift by the sum so far
    added = sorted((float(e["ts"]) + float(e["dur"]), float(e["dur"]) * (dev_factor(e) - 1.0))
                   for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS and "dur" in e)
    ends = [a[0] for a in added]
    cum = [0.0]
    for _, extra in added:
        cum.append(cum[-1] + extra)

    def shift(t: float, inclusive: bool) -> float:
        i = bisect.bisect_right(ends, t) if inclusive else bisect.bisect_left(ends, t)
        return cum[i]

    n = 0
    for e in events:
        if not isinstance(e.get("ts"), (int, float)):
            continue
        ts = float(e["ts"])
        new_ts = ts + shift(ts, inclusive=True)
        if e.get("ph") == "X" and "dur" in e:
            dur = float(e["dur"])
            if e.get("cat") in DEVICE_CATS:
                new_dur = dur * dev_factor(e)
                n += slowed(e)
            else:
                end = ts + dur
                new_dur = end + shift(end, inclusive=True) - new_ts
            e["dur"] = round(new_dur, 3)
        e["ts"] = round(new_ts, 3)
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return {"instances": n, "added_us": cum[-1]}
