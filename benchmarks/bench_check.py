"""Simulation benchmark of `tracekit check`: false alerts on noise-only histories and detection of
a step, with the default settings (tracekit.check.gate.CheckConfig). The results go to docs/MATH.md.

    .venv/bin/python benchmarks/bench_check.py            # default size: ~2 minutes on 2 cores
    .venv/bin/python benchmarks/bench_check.py --scale 0.2 --seed 7 --out check.json

Main-branch tier (`--history`): a history of 60 runs is checked after every new run from the 20th
(41 checks per history, as CI on main does); a false alert is a check that alerts although every
run is noise. Detection: 30 runs, then every run 5 % slower; checked after each of the next 5 runs;
detected = a check alerts on a change point within 5 runs of the step's first run. The location
of the change point is reported separately (exact, ±1, ±2). PR tier: 5 (and 10) runs per side.
Noise models and outliers: benchmarks/check_simulation.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from check_simulation import Rate, detection_rate, false_alert_rate, pr_rates
from harness import new_parser, write_report

from tracekit.check.gate import CheckConfig


def fmt(r: Rate) -> str:
    lo, hi = r.interval()
    return f"{r.rate * 100:6.2f} %  ({r.hits}/{r.n}; 95 % CI {lo * 100:.2f}–{hi * 100:.2f} %)"


def main() -> None:
    ap = new_parser(__doc__)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every trial count")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", "--json", type=Path, default=None, help="also write the results here (JSON)")
    args = ap.parse_args()
    cfg = CheckConfig()
    n = lambda k: max(1, int(k * args.scale))
    rng = np.random.default_rng(args.seed)
    out: dict[str, object] = {"config": cfg.summary()}
    t0 = time.perf_counter()
    print(f"settings: {json.dumps(cfg.summary())}")
    print("\nmain-branch tier, noise only (share of checks that alert):")
    for label, model, sigma in [("lognormal σ 2 %", "lognormal", 0.02), ("lognormal σ 1 %", "lognormal", 0.01),
                                ("lognormal σ 5 %", "lognormal", 0.05), ("bimodal 3 % + σ 1 %", "bimodal", 0.02),
                                ("Student t3, sd 2 %", "student_t3", 0.02)]:
        r = false_alert_rate(rng, cfg, histories=n(150), sigma=sigma, model=model)
        print(f"  {label:22s} + 3 % slow outliers: {fmt(r)}")
        out[f"false_alerts/{model}/{sigma}"] = [r.hits, r.n]
    r = false_alert_rate(rng, cfg, histories=n(100), sigma=0.02, outlier_rate=0.10)
    print(f"  {'lognormal σ 2 %':22s} + 10 % slow outliers: {fmt(r)}")
    out["false_alerts/lognormal/0.02/outliers0.10"] = [r.hits, r.n]
    print("\nmain-branch tier, 5 % step, σ 2 % lognormal + 3 % slow outliers, checked after runs 1..5:")
    for tol, label in [(5, "alert within 5 runs"), (0, "  …at the step's first run"), (1, "  …within ±1 run"),
                       (2, "  …within ±2 runs")]:
        r, needed = detection_rate(np.random.default_rng(args.seed + 1), cfg, trials=n(1000), tolerance=tol)
        print(f"  {label:28s} {fmt(r)}")
        out[f"detection/tol{tol}"] = [r.hits, r.n]
        if tol == 5:
            counts = np.bincount(needed, minlength=6)
            cum = np.cumsum(counts[1:]) / len(needed)
            print("  detected by run k after the step: " + ", ".join(f"k={k} {c * 100:.1f} %" for k, c in
                                                                  enumerate(cum, 1)))
            out["detection/by_run"] = [float(c) for c in cum]
    for step, sigma in [(0.03, 0.01), (0.10, 0.02), (0.05, 0.05)]:
        r, _ = detection_rate(np.random.default_rng(args.seed + 2), cfg, trials=n(300), step=step, sigma=sigma,
                              tolerance=5)
        print(f"  step {step * 100:.0f} %, σ {sigma * 100:.0f} %: {fmt(r)}")
        out[f"detection/step{step}/sigma{sigma}"] = [r.hits, r.n]
    print("\nPR tier (Mann–Whitney, one-sided α 0.01, min change 2 %), σ 2 % + 3 % slow outliers:")
    for runs in (5, 10):
        f = pr_rates(np.random.default_rng(args.seed + 3), cfg, trials=n(4000), runs=runs)
        p = pr_rates(np.random.default_rng(args.seed + 4), cfg, trials=n(2000), runs=runs, step=0.05)
        print(f"  {runs} vs {runs} runs: false alerts {fmt(f)}; 5 % step detected {fmt(p)}")
        out[f"pr/{runs}/false"] = [f.hits, f.n]
        out[f"pr/{runs}/step0.05"] = [p.hits, p.n]
    welch = CheckConfig(test="welch")
    for runs in (5,):
        f = pr_rates(np.random.default_rng(args.seed + 3), welch, trials=n(4000), runs=runs)
        p = pr_rates(np.random.default_rng(args.seed + 4), welch, trials=n(2000), runs=runs, step=0.05)
        print(f"  Welch, {runs} vs {runs} runs: false alerts {fmt(f)}; 5 % step detected {fmt(p)}")
        out[f"pr_welch/{runs}/false"] = [f.hits, f.n]
        out[f"pr_welch/{runs}/step0.05"] = [p.hits, p.n]
    out["seconds"] = time.perf_counter() - t0
    print(f"\n{out['seconds']:.0f} s")
    write_report(args.out, out)


if __name__ == "__main__":
    main()
