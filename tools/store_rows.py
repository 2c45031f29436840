#!/usr/bin/env python3
"""Fingerprint every row tracekit stores for a set of traces, to prove a refactoring changed none.

``snapshot`` ingests each input into its own store (one run, ``one_run=True``) and writes, per
input and per table, the row count and an order-independent digest of every column of every row
(``sum(hash(row))`` in DuckDB, over HUGEINT so it cannot overflow), leaving out only the columns
that change on every ingest (``ingested_at``, ``tracekit_version``, timestamps of analysis). A
refused input records its one-line error instead. ``compare`` prints what differs between two
snapshots and exits 1 when anything does; the stores are kept (``--keep``) so a difference can be
read row by row with ``EXCEPT ALL``.

Inputs are found under the given roots: every file whose format tracekit recognizes, and every
directory that directly holds such files (multi-file formats such as rocprofv3 CSV, multi-rank
runs).

Usage::

    .venv/bin/python tools/store_rows.py snapshot /tmp/before.json sample_traces ../shared/corpus
    .venv/bin/python tools/store_rows.py compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

#: Columns whose value is the time or version of the ingest, not the trace's content.
VOLATILE = {"ingested_at", "tracekit_version", "migrated_at", "analyzed_at", "attached_at"}


def discover(roots: list[Path]) -> list[Path]:
    """Recognized trace files under ``roots`` and the directories that directly hold them."""
    from tracekit.ingest import _sniff

    files: list[Path] = []
    for root in roots:
        candidates = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in candidates:
            try:
                if _sniff(f, None):
                    files.append(f)
            except Exception:  # noqa: BLE001, S112 - not a trace tracekit reads: not an input
                continue
    dirs = sorted({f.parent for f in files if sum(1 for g in files if g.parent == f.parent) > 1})
    return sorted(files) + dirs


def digest(store: Path) -> dict[str, list[Any]]:
    """table -> [rows, sum of the row hashes as a decimal string] over the non-volatile columns."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        out: dict[str, list[Any]] = {}
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE table_name <> 'tracekit_schema' ORDER BY 1").fetchall()]
        for t in tables:
            cols = [r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index", [t]).fetchall()
                if r[0] not in VOLATILE]
            row = ", ".join(f'"{c}"' for c in cols)
            n, h = con.execute(f'SELECT count(*), sum(hash(({row}))::HUGEINT)::VARCHAR FROM "{t}"').fetchone()  # type: ignore[misc]
            out[t] = [n, h or "0"]
        return out
    finally:
        con.close()


def snapshot(out: Path, roots: list[Path], keep: Path | None) -> None:
    import tracekit
    from tracekit.errors import TracekitError

    inputs = discover(roots)
    result: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="store-rows-"))
    t0 = time.monotonic()
    try:
        for i, p in enumerate(inputs):
            store = (keep or work) / f"{i:04d}.duckdb"
            t1 = time.monotonic()
            try:
                tracekit.ingest([p], store=store, one_run=True)
                entry: dict[str, Any] = {"tables": digest(store)}
            except TracekitError as exc:
                entry = {"refused": str(exc).splitlines()[0]}
            entry["store"] = store.name
            result[str(p)] = entry
            print(f"{i + 1}/{len(inputs)} {time.monotonic() - t1:6.1f} s  {p}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"{len(inputs)} inputs in {time.monotonic() - t0:.0f} s -> {out}")


def compare(a: Path, b: Path) -> int:
    before, after = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for key in sorted(set(before) | set(after)):
        x, y = before.get(key), after.get(key)
        if x is None or y is None:
            print(f"only in {'after' if x is None else 'before'}: {key}")
            bad += 1
            continue
        x.pop("store", None), y.pop("store", None)
        if x != y:
            bad += 1
            print(f"DIFFERS: {key}")
            for t in sorted(set(x.get("tables", {})) | set(y.get("tables", {}))):
                if x.get("tables", {}).get(t) != y.get("tables", {}).get(t):
                    print(f"  {t}: {x.get('tables', {}).get(t)} -> {y.get('tables', {}).get(t)}")
            if x.get("refused") != y.get("refused"):
                print(f"  refused: {x.get('refused')!r} -> {y.get('refused')!r}")
    n_tables = sum(len(v.get("tables", {})) for v in after.values())
    print(f"{len(after)} inputs, {n_tables} tables compared: {bad} differ")
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("out", type=Path)
    s.add_argument("roots", type=Path, nargs="+")
    s.add_argument("--keep", type=Path, help="keep the stores in this folder")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "snapshot":
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
        snapshot(args.out, args.roots, args.keep)
    else:
        sys.exit(compare(args.a, args.b))


if __name__ == "__main__":
    main()
