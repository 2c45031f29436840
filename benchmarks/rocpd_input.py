"""The large rocpd database the rocpd, analyze and dashboard benchmarks share: the corpus sample's
timeline replicated inside SQLite with shifted ids and times (how: ``bench_rocpd.py``'s docstring),
generated once and cached in a work directory."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from harness import MB, cache_key

DEFAULT_SOURCE = Path("/work/shared/corpus/rocprof/rocpd-v3-sample/vllm_mi300x_decode_results.db")
DEFAULT_WORKDIR = Path("/tmp/tracekit-bench")
GENERATOR_VERSION = 1
TARGET_DISPATCHES = 1_000_000  # the database bench_analyze / bench_dashboard share (454 copies)
#: this benchmark's default: 227 copies of the sample, 500,535 dispatches (the issue-18 RSS budget)
INGEST_DISPATCHES = 500_000
GAP_NS = 1_000_000

#: Per table: which columns hold which id space ("time" = a timestamp).
ID_COLUMNS: dict[str, dict[str, str]] = {
    "rocpd_event": {"id": "event", "stack_id": "stack", "parent_stack_id": "stack"},
    "rocpd_kernel_dispatch": {"id": "dispatch", "dispatch_id": "dispatch", "event_id": "event",
                              "start": "time", "end": "time"},
    "rocpd_memory_copy": {"id": "copy", "event_id": "event", "start": "time", "end": "time"},
    "rocpd_region": {"id": "stack", "event_id": "event", "start": "time", "end": "time"},
    "rocpd_pmc_event": {"id": "pmc", "event_id": "event"},
}


def _tables(con: sqlite3.Connection) -> dict[str, str]:
    """Base name -> the UUID-suffixed physical table."""
    out: dict[str, str] = {}
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for base in ID_COLUMNS:
        hits = [n for n in names if n.startswith(base + "_") and len(n) == len(base) + 37]
        if len(hits) != 1:
            raise SystemExit(f"{base}: expected one UUID-suffixed table, found {hits}")
        out[base] = hits[0]
    return out


def _span(con: sqlite3.Connection, t: dict[str, str]) -> tuple[int, int]:
    lo, hi = con.execute(
        f'''SELECT min(s), max(e) FROM (
              SELECT start s, "end" e FROM "{t['rocpd_kernel_dispatch']}"
              UNION ALL SELECT start, "end" FROM "{t['rocpd_memory_copy']}"
              UNION ALL SELECT start, "end" FROM "{t['rocpd_region']}")'''
    ).fetchone()
    return int(lo), int(hi)


def _id_range(con: sqlite3.Connection, t: dict[str, str], space: str) -> tuple[int, int]:
    parts = [f'SELECT "{c}" v FROM "{t[table]}"' for table, cols in ID_COLUMNS.items()
             for c, s in cols.items() if s == space]
    lo, hi = con.execute(f"SELECT min(v), max(v) FROM ({' UNION ALL '.join(parts)}) WHERE v > 0").fetchone()
    return int(lo), int(hi)


def copies_for(source: Path, copies: int = 0, target: int = TARGET_DISPATCHES) -> int:
    """``copies``, or when ≤ 0 the number of copies of ``source`` that reaches ``target`` dispatches."""
    if copies > 0:
        return copies
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        n = src.execute(f'SELECT count(*) FROM "{_tables(src)["rocpd_kernel_dispatch"]}"').fetchone()[0]
    finally:
        src.close()
    return -(-target // n)


def cached_meta(store: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The metadata saved beside a benchmark's cached ``store`` if it was built for ``key`` (the
    input database's cache key and the versions), else None after removing the stale files."""
    meta_path = store.with_name(store.name + ".meta.json")
    if store.exists() and meta_path.exists():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if meta.get("key") == key:
            return meta
    for p in store.parent.glob(store.name + "*"):
        p.unlink()
    return None


def generate(source: Path, workdir: Path, copies: int, pmc_every: int) -> tuple[Path, dict[str, Any]]:
    out = workdir / f"rocpd-big-x{copies}-pmc{pmc_every}_results.db"
    meta_path = out.with_name(out.name + ".meta.json")
    params = {"source": cache_key(source), "copies": copies, "pmc_every": pmc_every,
              "generator": GENERATOR_VERSION}
    if out.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("params") == params and meta.get("key") == cache_key(out):
            print(f"[gen] reusing {out} ({meta['db_bytes'] / MB:.0f} MB, {meta['rows']})", flush=True)
            return out, meta

    print(f"[gen] generating {out}: {copies} copies of {source.name}, counters in every "
          f"{pmc_every}th copy ...", flush=True)
    t0 = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.copyfile(source, tmp)
    os.chmod(tmp, 0o644)
    con = sqlite3.connect(tmp, isolation_level=None)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -262144")
    t = _tables(con)
    lo, hi = _span(con, t)
    shift_time = hi - lo + GAP_NS
    spaces = {s for cols in ID_COLUMNS.values() for s in cols.values() if s != "time"}
    ranges = {s: _id_range(con, t, s) for s in spaces}
    stride = {s: hi_ - lo_ + 1 for s, (lo_, hi_) in ranges.items()}
    orig_max = {s: hi_ for s, (_, hi_) in ranges.items()}
    for base, id_cols in ID_COLUMNS.items():
        table = t[base]
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        key = next(c for c, s in id_cols.items() if c == "id")
        key_space = id_cols[key]
        n_src = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        ks = [k for k in range(1, copies) if base != "rocpd_pmc_event" or k % pmc_every == 0]
        con.execute("BEGIN")
        for k in ks:
            exprs = []
            for c in cols:
                space = id_cols.get(c)
                if space == "time":
                    exprs.append(f'"{c}" + {k * shift_time}')
                elif space is not None:
                    # 0 / NULL (no parent, no event) stay as they are
                    exprs.append(f'CASE WHEN "{c}" > 0 THEN "{c}" + {k * stride[space]} ELSE "{c}" END')
                else:
                    exprs.append(f'"{c}"')
            con.execute(
                f'INSERT INTO "{table}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                f'SELECT {", ".join(exprs)} FROM "{table}" WHERE "{key}" <= {orig_max[key_space]}'
            )
        con.execute("COMMIT")
        print(f"[gen]   {base}: {n_src:,} rows x {1 + len(ks)} copies", flush=True)
    rows = {base: con.execute(f'SELECT count(*) FROM "{t[base]}"').fetchone()[0] for base in ID_COLUMNS}
    n_counted = con.execute(
        f'SELECT count(DISTINCT event_id) FROM "{t["rocpd_pmc_event"]}"').fetchone()[0]
    con.close()
    os.replace(tmp, out)
    gen_s = time.perf_counter() - t0
    meta = {"params": params, "key": cache_key(out), "source": str(source), "copies": copies,
            "pmc_every": pmc_every, "rows": rows, "dispatches_with_counters": n_counted,
            "db_bytes": out.stat().st_size, "generation_s": round(gen_s, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"[gen] wrote {out}: {meta['db_bytes'] / MB:.0f} MB, {rows} in {gen_s:.1f} s", flush=True)
    return out, meta
