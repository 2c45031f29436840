"""Numbers for people: one place that turns stored values into the text the CLI, the reports, the
dashboard and the CI messages show.

The rules: fractions as percentages; durations scaled to ns / µs / ms / s / min / h; counts as
integers with thousands separators; everything else to three significant digits (``0.222``,
``729``, ``1,234``); a unit written once, after the number; and a missing value (unknown, not
measured, not applicable) shown as ``—``, never as 0 or an empty cell that reads like 0.

Stored values keep full precision; only what is shown is rounded. Machine outputs (``--format
csv|json``) are never formatted.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

#: How a missing value is shown (a 0 is shown as 0).
UNKNOWN = "—"

#: Significant digits of a shown measurement.
DIGITS = 3

_DURATION_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9, "h": 3600e9}


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def significant(x: float, digits: int = DIGITS, *, trim: bool = False) -> str:
    """``x`` to ``digits`` significant digits, thousands separated, no exponent below 10¹⁵;
    trailing zeros are kept, so one column reads with one precision (``0.9186`` → ``0.919``,
    ``15.0`` → ``15.0``, ``77773.2`` → ``77,773``: integer digits are never dropped); ``trim``
    drops trailing zeros (``5.78200`` → ``5.782``)."""
    if _missing(x):
        return UNKNOWN
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    if mag >= 15 or mag < -6:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - mag)
    rounded = round(x, decimals)
    if rounded and math.floor(math.log10(abs(rounded))) > mag:  # 9.996 → 10.0, not 10.00
        decimals = max(0, decimals - 1)
    text = f"{rounded:,.{decimals}f}"
    if trim and "." in text:  # a lone value (a query cell), not a column of measurements
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def count(n: float | None) -> str:
    """A count: an integer with thousands separators (``1,707``); a fractional count (a mean per
    step) keeps three significant digits."""
    if _missing(n):
        return UNKNOWN
    assert n is not None
    return f"{round(n):,}" if float(n).is_integer() or abs(n) >= 1000 else significant(n)


def percent(fraction: float | None) -> str:
    """A fraction as a percentage to three significant digits (``0.91860`` → ``91.9%``,
    ``0.000123`` → ``0.0123%``, ``1.0`` → ``100%``; below 0.001 % ``<0.001%``)."""
    if _missing(fraction):
        return UNKNOWN
    assert fraction is not None
    if 0 < abs(fraction) < 1e-5:  # a share this small is "almost none", not 7.04e-07%
        return ("-" if fraction < 0 else "") + "<0.001%"
    return significant(100 * fraction) + "%"


def duration_ns(ns: float | None) -> str:
    """A duration given in nanoseconds, in the largest unit that keeps it ≥ 1 (``412 ns``,
    ``3.21 µs``, ``6.61 ms``, ``77.8 s``, ``2.5 min``, ``1.2 h``)."""
    if _missing(ns):
        return UNKNOWN
    assert ns is not None
    a = abs(ns)
    if a == 0:
        return "0 s"
    for unit, scale in (("h", 3600e9), ("min", 60e9), ("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if a >= scale and not (unit in ("h", "min") and a < 2 * scale):
            return f"{significant(ns / scale)} {unit}"
    return f"{significant(ns)} ns"


def duration(value: float | None, unit: str) -> str:
    """A duration stored in ``unit`` (``ns``, ``us``/``µs``, ``ms``, ``s``, ``min``, ``h``), scaled."""
    if _missing(value):
        return UNKNOWN
    assert value is not None
    return duration_ns(value * _DURATION_NS[unit])


def size_bytes(n: float | None) -> str:
    """Bytes in decimal units, as datasheets give bandwidth and memory (``8.03 GB``, ``512 kB``)."""
    if _missing(n):
        return UNKNOWN
    assert n is not None
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{significant(n / scale)} {unit}"
    return f"{count(n)} B"


def saving(ns: float | None, fraction: float | None) -> str:
    """What a fix would save: ``463 ms, 97.8% of the run`` (either part when only one is known;
    empty when neither is)."""
    parts = []
    if not _missing(ns):
        parts.append(duration_ns(ns))
    if not _missing(fraction):
        parts.append(f"{percent(fraction)} of the run")
    return ", ".join(parts)


def usd(x: float | None) -> str:
    """A price in US dollars: cents for amounts from $1, three significant digits below."""
    if _missing(x):
        return UNKNOWN
    assert x is not None
    return f"${x:,.2f}" if abs(x) >= 1 else f"${significant(x)}"


def value(v: Any, unit: str | None = None) -> str:
    """``v`` in ``unit`` as people read it: the stored metric units of tracekit (``fraction``,
    ``ns``/``us``/``ms``/``s``, ``count``, ``bytes``, ``x``, ``flag``, ``USD…``, rates such as
    ``GB/s``, ``TFLOP/s``, ``tokens/s``) each have their rule; other units get three
    significant digits and the unit after them."""
    if _missing(v):
        return UNKNOWN
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (dt.datetime, dt.date)):
        return v.strftime("%Y-%m-%d %H:%M") if isinstance(v, dt.datetime) else v.isoformat()
    if not isinstance(v, (int, float)):
        return str(v)
    u = (unit or "").strip()
    if u == "fraction":
        return percent(v)
    if u in _DURATION_NS:
        return duration(v, u)
    if u == "count":
        return count(v)
    if u == "bytes":
        return size_bytes(v)
    if u == "flag":
        return "yes" if v else "no"
    if u == "x":
        return f"{significant(v)}×"
    if u.upper().startswith("USD"):
        rest = u[3:].strip()
        per = rest.lstrip("/ ")
        return usd(v) + (f" per {per}" if per else "")
    if not u:
        return count(v) if isinstance(v, int) or float(v).is_integer() else significant(v)
    return f"{significant(v)} {u}"


#: Words that stay as written in labels.
_KEEP = {"mbu": "MBU", "mfu": "MFU", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "hbm": "HBM",
         "gpu": "GPU", "tpu": "TPU", "kv": "KV", "usd": "USD", "pc": "PC", "tp": "TP", "dp": "DP", "id": "id",
         "busbw": "bus bandwidth", "gbps": "GB/s", "tflops": "TFLOP/s", "1m": "1M", "lds": "LDS", "dma": "DMA",
         "xla": "XLA", "hlo": "HLO", "sm": "SM", "cu": "CU", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
#: Unit suffixes a label drops (the unit is shown with the value).
_UNIT_SUFFIX = re.compile(r"_(?:ns|us|ms|s|fraction|count|bytes|gbps|tflops)$")


def label(name: str) -> str:
    """A snake_case metric or column name as words, its unit suffix dropped (the value carries the
    unit): ``device_busy_fraction`` → ``Device busy``, ``ttft_p95_ms`` → ``TTFT p95``,
    ``usd_per_1m_output_tokens`` → ``USD per 1M output tokens``."""
    base = _UNIT_SUFFIX.sub("", name) if _UNIT_SUFFIX.search(name) and name.count("_") else name
    words = [_KEEP.get(w.lower(), w) for w in base.split("_") if w]
    if not words:
        return name
    first = words[0]
    words[0] = first[:1].upper() + first[1:] if first == first.lower() else first
    return " ".join(words)
