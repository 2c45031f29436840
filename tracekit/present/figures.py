"""The report's Plotly figures, shared by the HTML report and the dashboard's Run page: device
time by kernel class (:func:`class_figure`) and the roofline (:func:`roofline_figure`). Plotly is
imported when a figure is built."""

from __future__ import annotations

import math
from typing import Any

from tracekit import formatting as fmt
from tracekit.names import short_kernel_names
from tracekit.report_data import Report, RooflinePoint


def class_figure(rep: Report) -> Any:
    """Device time by kernel class: one horizontal bar per class, longest on top, in ms."""
    import plotly.graph_objects as go

    rows = [(c, t) for c, t, _ in rep.overview.classes if t > 0][::-1]
    total = rep.overview.kernel_time_ns or 1
    top = max((t for _, t in rows), default=0)
    unit, scale = next(((u, k) for u, k in (("min", 60e9), ("s", 1e9), ("ms", 1e6)) if top >= k), ("µs", 1e3))
    fig = go.Figure(go.Bar(
        x=[t / scale for _, t in rows], y=[c for c, _ in rows], orientation="h",
        text=[f"{fmt.duration_ns(t)} · {fmt.percent(t / total)}" for _, t in rows], textposition="auto",
        hovertemplate="%{y}: %{text}<extra></extra>", marker={"color": "#3b6ea8"}))
    fig.update_layout(
        title={"text": "Device time by kernel class", "y": 0.97},
        xaxis={"title": f"device time ({unit}, summed over streams and ranks)", "rangemode": "tozero"},
        height=120 + 32 * len(rows), margin={"l": 110, "r": 30, "t": 50, "b": 50}, template="plotly_white")
    return fig


def roofline_figure(rep: Report) -> Any:
    """The Plotly roofline: trace ``ops`` (one labelled marker per costable op name; x in
    FLOP/byte, y in TFLOP/s) plus the roof lines."""
    import plotly.graph_objects as go

    pts = rep.points
    labels = _point_labels(pts)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name="ops",
            x=[p.intensity for p in pts],
            y=[p.flops_per_s / 1e12 for p in pts],
            mode="markers+text" if len(pts) <= 12 else "markers",
            marker={"size": 10, "opacity": 0.8},
            text=[p.name for p in pts],
            texttemplate="%{customdata[3]}",
            textposition="top center",
            customdata=[[p.hlo_category or "", p.calls, fmt.duration_ns(p.time_ns), lab] for p, lab in zip(pts, labels)],
            hovertemplate="%{text}<br>%{customdata[0]}<br>calls %{customdata[1]}<br>time %{customdata[2]}"
            "<br>%{x:.3g} FLOP/byte<br>%{y:.3g} TFLOP/s<extra></extra>",
        )
    )
    xs = [p.intensity for p in pts]
    lo, hi = min(xs) / 10, max(xs) * 10
    if rep.ridge is not None:
        lo, hi = min(lo, rep.ridge / 10), max(hi, rep.ridge * 10)
    peak = rep.peak_flops / 1e12 if rep.peak_flops else None
    hbm = rep.hbm_bps / 1e12 if rep.hbm_bps else None  # TFLOP/s per FLOP/byte
    if hbm and peak and rep.ridge:
        fig.add_trace(
            go.Scatter(name=f"roof ({rep.device_label})", x=[lo, rep.ridge, hi], y=[hbm * lo, peak, peak],
                       mode="lines", line={"color": "#b00020"}, hoverinfo="skip")
        )
    elif peak:
        fig.add_trace(go.Scatter(name="compute peak", x=[lo, hi], y=[peak] * 2, mode="lines", hoverinfo="skip"))
    elif hbm:
        fig.add_trace(go.Scatter(name="HBM roof", x=[lo, hi], y=[hbm * lo, hbm * hi], mode="lines", hoverinfo="skip"))
    source = ("XLA cost model" if all(p.hlo_category != "torch op (shapes)" for p in pts)
              else "PyTorch op shapes")
    fig.update_layout(
        title={"text": f"Roofline: {len(pts)} ops ({source} FLOPs and bytes, device time)", "y": 0.97},
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "achieved TFLOP/s", "exponentformat": "power"},
        height=540, template="plotly_white", margin={"t": 70},
        legend={"orientation": "h", "y": -0.18},
    )
    return fig


def _point_labels(pts: list[RooflinePoint]) -> list[str]:
    """A short label per point; points that land on one spot (within 5 % on both log axes) share
    one label, on the first, that says how many lie there (the hover names each)."""
    shorts = short_kernel_names([p.name for p in pts], 28)
    labels = list(shorts)
    spots: dict[tuple[int, int], list[int]] = {}
    for i, p in enumerate(pts):
        key = (round(math.log10(p.intensity) / 0.02), round(math.log10(p.flops_per_s) / 0.02))
        spots.setdefault(key, []).append(i)
    for members in spots.values():
        if len(members) > 1:
            labels[members[0]] = f"{shorts[members[0]]} (+{len(members) - 1} here)"
            for i in members[1:]:
                labels[i] = ""
    return labels

