"""Seeded mutators for the AMD trace formats (rocpd, RPD, rocprofv3 JSON and CSV) and, with the
same SQLite mutator, the Nsight Systems SQLite export (``nsys``).

``mutations(kind, seed)`` yields an endless, reproducible stream of :class:`Mutation` objects
for one format (``kind`` in :data:`KINDS`); take as many as needed with ``itertools.islice``.
Each mutation writes one hostile input, derived from the real samples in ``sample_traces/``
(or from ``base`` when given), into an empty directory and returns the path to ingest. The same
(kind, seed) gives the same mutations, byte for byte.

What is mutated:

* SQLite files (``rocpd``, ``rpd``, ``nsys``): corrupt pages, byte flips, truncation; tables dropped,
  columns renamed; values replaced by NULL, text, blobs, floats, huge and negative integers;
  negative ids; string ids that do not exist; ``rpd`` files also as ``.rpd.gz`` (some truncated).
* JSON (``rocprofv3_json``): truncation, byte flips, values of the wrong type, nesting
  100,000 levels deep, huge numbers, long strings; some as ``.json.gz``.
* CSV folders (``rocprofv3_csv``): truncated files (mid-row), missing files, empty files,
  swapped columns, bad numbers, duplicate rows, byte flips.

Used by ``tests/test_amd_hostile.py`` (a short run in CI) and by the fuzz suite (long runs).
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"

#: format -> the sample it mutates by default
BASES: dict[str, Path] = {
    "rocpd": SAMPLES / "amd_synthetic_rocpd" / "27182_results.db",
    "rpd": SAMPLES / "amd_synthetic.rpd",
    "rocprofv3_json": SAMPLES / "amd_synthetic_results.json",
    "rocprofv3_csv": SAMPLES / "amd_synthetic_csv",
    "nsys": SAMPLES / "nsys_synthetic_tp2_graphs.sqlite",
}
KINDS = tuple(BASES)

#: Deep nesting used by the JSON mutator (levels).
DEEP = 100_000


@dataclass(frozen=True)
class Mutation:
    """One hostile input: ``build(empty_dir)`` writes it and returns the path to ingest."""

    kind: str
    name: str
    build: Callable[[Path], Path]


# ---------------------------------------------------------------------------------------------
# Values that trace columns should never hold

_BAD_SQL_VALUES: tuple[Any, ...] = (
    None, "text", "", "12abc", 2**63 - 1, -(2**63), -1, 0, 1.5, -1e300, 1e300, float("nan"),
    b"\x00\xff\x10", "x" * 5000, 2**62, -(10**15),
)
_BAD_JSON_VALUES: tuple[Any, ...] = (
    None, "text", "", True, -1, 0, 2**64, -(2**63) - 1, 10**30, 1.5, 1e308, -1e308, [], {}, [1, 2],
    {"handle": "x"}, "y" * 200_000,
)
_BAD_CSV_CELLS = ("", "abc", "-1", "18446744073709551616", "-9223372036854775809", "1e30", "nan",
                  "1.5", "0x10", '"', "9" * 40, "Agent 99999999999999999999")


# ---------------------------------------------------------------------------------------------
# Byte-level mutations (any file)


def _flip_bytes(data: bytes, rng: random.Random, lo: int = 0) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 32)):
        i = rng.randrange(min(lo, len(b) - 1), len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def _corrupt_page(data: bytes, rng: random.Random, page: int = 4096) -> bytes:
    b = bytearray(data)
    n_pages = max(1, len(b) // page)
    p = rng.randrange(n_pages)
    start = p * page + (100 if p == 0 else 0)  # keep the 100-byte file header on page 1
    end = min(len(b), (p + 1) * page)
    b[start:end] = rng.randbytes(end - start)
    return bytes(b)


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(0, max(1, len(data)))]


# ---------------------------------------------------------------------------------------------
# SQLite (rocpd, RPD)


def _tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]


def _views(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'view' ORDER BY name")]


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in con.execute(f'PRAGMA table_info("{table}")')]


def _nonempty_tables(con: sqlite3.Connection) -> list[str]:
    out = []
    for t in _tables(con):
        if con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone():
            out.append(t)
    return out


def _sql_mutation(con: sqlite3.Connection, rng: random.Random) -> str:
    """Apply one schema/value mutation to an open (writable) SQLite copy; returns its name."""
    op = rng.choice(("drop_table", "drop_view", "rename_column", "set_value", "set_value", "set_value",
                     "negative_ids", "missing_string", "delete_rows", "duplicate_row"))
    tables = _nonempty_tables(con) or _tables(con)
    t = rng.choice(tables)
    cols = _columns(con, t)
    if op == "drop_view" and _views(con):
        v = rng.choice(_views(con))
        con.execute(f'DROP VIEW "{v}"')
        return f"drop_view:{v}"
    if op in ("drop_table", "drop_view"):
        con.execute(f'DROP TABLE "{t}"')
        return f"drop_table:{t}"
    if op == "rename_column" and cols:
        c = rng.choice(cols)
        con.execute("PRAGMA legacy_alter_table = ON")  # leave the views naming the old column
        try:
            con.execute(f'ALTER TABLE "{t}" RENAME COLUMN "{c}" TO "{c}_renamed"')
        except sqlite3.Error:
            con.execute(f'DROP TABLE "{t}"')
            return f"drop_table:{t}"
        return f"rename_column:{t}.{c}"
    if op == "negative_ids" and "id" in cols:
        con.execute(f'UPDATE OR IGNORE "{t}" SET id = -id - 1')
        return f"negative_ids:{t}"
    if op == "missing_string":
        strings = [x for x in _tables(con) if x.startswith("rocpd_string") or x == "StringIds"]
        if strings:
            s = rng.choice(strings)
            con.execute(f'DELETE FROM "{s}" WHERE rowid % 2 = ?', (rng.randrange(2),))
            return f"missing_strings:{s}"
    if op == "delete_rows":
        con.execute(f'DELETE FROM "{t}" WHERE rowid % 3 = ?', (rng.randrange(3),))
        return f"delete_rows:{t}"
    if op == "duplicate_row" and cols:
        names = ", ".join(f'"{c}"' for c in cols)
        try:
            con.execute(f'INSERT INTO "{t}" ({names}) SELECT {names} FROM "{t}" LIMIT 1')
            return f"duplicate_row:{t}"
        except sqlite3.Error:
            pass
    if not cols:
        con.execute(f'DROP TABLE "{t}"')
        return f"drop_table:{t}"
    c = rng.choice(cols)
    value = rng.choice(_BAD_SQL_VALUES)
    where = rng.choice(("", f" WHERE rowid % 4 = {rng.randrange(4)}", f' WHERE rowid = (SELECT min(rowid) FROM "{t}")'))
    con.execute("PRAGMA ignore_check_constraints = ON")
    for v in (value, "text", -1):
        try:
            con.execute(f'UPDATE OR IGNORE "{t}" SET "{c}" = ?{where}', (v,))
            value = v
            break
        except sqlite3.Error:  # an INTEGER PRIMARY KEY takes integers only
            continue
    shown = repr(value)[:20]
    return f"set:{t}.{c}={shown}"


def _sqlite_mutations(kind: str, base: Path, rng: random.Random) -> Iterator[Mutation]:
    data = base.read_bytes()
    stem, suffix = {"rocpd": ("27182", "_results.db"), "rpd": ("trace", ".rpd"), "nsys": ("report1", ".sqlite")}[kind]
    i = 0
    while True:
        i += 1
        op = rng.choice(("sql", "sql", "sql", "sql2", "flip", "page", "truncate"))
        gz = kind == "rpd" and rng.random() < 0.25
        sub = random.Random(rng.getrandbits(64))

        def build(d: Path, op: str = op, gz: bool = gz, sub: random.Random = sub) -> Path:
            out = d / (stem + suffix)
            if op in ("sql", "sql2"):
                out.write_bytes(data)
                con = sqlite3.connect(out)
                try:
                    for _ in range(1 if op == "sql" else sub.randint(2, 4)):
                        _sql_mutation(con, sub)
                    con.commit()
                finally:
                    con.close()
            elif op == "flip":
                out.write_bytes(_flip_bytes(data, sub, lo=100))
            elif op == "page":
                out.write_bytes(_corrupt_page(data, sub))
            else:
                out.write_bytes(_truncate(data, sub))
            if gz:
                raw = out.read_bytes()
                out.unlink()
                out = d / (stem + suffix + ".gz")
                packed = gzip.compress(raw, mtime=0)
                if sub.random() < 0.3:
                    packed = packed[: sub.randrange(10, len(packed))]
                out.write_bytes(packed)
            return out

        yield Mutation(kind, f"{kind}#{i}:{op}{'+gz' if gz else ''}", build)


# ---------------------------------------------------------------------------------------------
# JSON


def _json_paths(doc: Any, rng: random.Random) -> list[Any]:
    """A random path (list of keys/indexes) to a node of ``doc``, walking down from the root."""
    path: list[Any] = []
    node = doc
    while True:
        if isinstance(node, dict) and node and rng.random() < 0.85:
            k = rng.choice(list(node))
            path.append(k)
            node = node[k]
        elif isinstance(node, list) and node and rng.random() < 0.85:
            k = rng.randrange(len(node))
            path.append(k)
            node = node[k]
        else:
            return path


def _set(doc: Any, path: list[Any], value: Any) -> Any:
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


def _json_mutations(base: Path, rng: random.Random) -> Iterator[Mutation]:
    text = base.read_bytes()
    doc = json.loads(text)
    i = 0
    while True:
        i += 1
        op = rng.choice(("truncate", "flip", "wrong_type", "wrong_type", "wrong_type", "deep", "deep_root",
                         "huge_number", "long_string", "drop_key"))
        gz = rng.random() < 0.2
        sub = random.Random(rng.getrandbits(64))

        def build(d: Path, op: str = op, gz: bool = gz, sub: random.Random = sub) -> Path:
            if op == "truncate":
                data = _truncate(text, sub)
            elif op == "flip":
                data = _flip_bytes(text, sub)
            elif op == "deep_root":
                data = b"[" * DEEP + b"]" * DEEP
                if sub.random() < 0.5:
                    data = b'{"rocprofiler-sdk-tool": ' + data + b"}"
            else:
                m = json.loads(json.dumps(doc))
                path = _json_paths(m, sub)
                if op == "wrong_type":
                    m = _set(m, path, sub.choice(_BAD_JSON_VALUES))
                elif op == "huge_number":
                    m = _set(m, path, sub.choice((2**64, 2**64 + 1, -(2**64), 10**400, 2**63)))
                elif op == "long_string":
                    m = _set(m, path, "z" * sub.choice((1 << 16, 1 << 20)))
                elif op == "drop_key" and path:
                    parent = m
                    for k in path[:-1]:
                        parent = parent[k]
                    del parent[path[-1]]
                if op == "deep":
                    marker = "__DEEP__"
                    m = _set(m, path, marker)
                    data = json.dumps(m).replace(f'"{marker}"', "[" * DEEP + "]" * DEEP).encode()
                else:
                    data = json.dumps(m).encode()
            name = "27182_results.json"
            if gz:
                data = gzip.compress(data, mtime=0)
                name += ".gz"
            out = d / name
            out.write_bytes(data)
            return out

        yield Mutation("rocprofv3_json", f"rocprofv3_json#{i}:{op}{'+gz' if gz else ''}", build)


# ---------------------------------------------------------------------------------------------
# CSV folders


def _csv_mutations(base: Path, rng: random.Random) -> Iterator[Mutation]:
    files = {p.name: p.read_bytes() for p in sorted(base.glob("*.csv"))}
    names = sorted(files)
    i = 0
    while True:
        i += 1
        op = rng.choice(("truncate", "truncate_mid_row", "missing_file", "empty_file", "header_only",
                         "swap_columns", "bad_number", "bad_number", "duplicate_rows", "flip",
                         "negative_end"))
        target = rng.choice(names)
        sub = random.Random(rng.getrandbits(64))

        def build(d: Path, op: str = op, target: str = target, sub: random.Random = sub) -> Path:
            out = d / "csv"
            out.mkdir()
            for n, b in files.items():
                (out / n).write_bytes(b)
            data = files[target]
            lines = data.decode().splitlines(keepends=True)
            f = out / target
            if op == "truncate":
                f.write_bytes(_truncate(data, sub))
            elif op == "truncate_mid_row":
                if len(lines) > 2:
                    keep = sub.randrange(2, len(lines))
                    last = lines[keep]
                    cut = sub.randrange(1, max(2, len(last) - 1))
                    f.write_text("".join(lines[:keep]) + last[:cut])
                else:
                    f.write_bytes(data[:-3])
            elif op == "missing_file":
                f.unlink()
            elif op == "empty_file":
                f.write_bytes(b"")
            elif op == "header_only":
                f.write_text(lines[0])
            elif op == "flip":
                f.write_bytes(_flip_bytes(data, sub))
            elif op == "duplicate_rows" and len(lines) > 1:
                rows = lines[1:]
                dup = [sub.choice(rows) for _ in range(sub.randint(1, 5))]
                body = rows + dup
                sub.shuffle(body)
                f.write_text(lines[0] + "".join(r if r.endswith("\n") else r + "\n" for r in body))
            elif len(lines) > 1:
                import csv
                import io

                table = list(csv.reader(io.StringIO(data.decode())))
                header, rows2 = table[0], table[1:]
                if op == "swap_columns" and len(header) > 1:
                    a, b = sub.sample(range(len(header)), 2)
                    for r in rows2:
                        if len(r) > max(a, b):
                            r[a], r[b] = r[b], r[a]
                else:
                    cols = [j for j, h in enumerate(header) if h.lower().endswith("_timestamp")]
                    if op == "negative_end" and cols:
                        j = cols[-1]
                        value = sub.choice(("-1", "18446744073709551615", "0", "-1500000000000000"))
                    else:
                        j = sub.randrange(len(header))
                        value = sub.choice(_BAD_CSV_CELLS)
                    for r in sub.sample(rows2, max(1, len(rows2) // sub.choice((1, 4, 50)))):
                        if len(r) > j:
                            r[j] = value
                buf = io.StringIO()
                w = csv.writer(buf, lineterminator="\n")
                w.writerow(header)
                w.writerows(rows2)
                f.write_text(buf.getvalue())
            return out

        yield Mutation("rocprofv3_csv", f"rocprofv3_csv#{i}:{op}:{target}", build)


# ---------------------------------------------------------------------------------------------


def mutations(kind: str, seed: int, base: Path | None = None) -> Iterator[Mutation]:
    """An endless, seeded stream of hostile inputs of format ``kind`` (see the module docstring)."""
    if kind not in BASES:
        raise ValueError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    rng = random.Random(f"{kind}:{seed}")
    src = base or BASES[kind]
    if kind in ("rocpd", "rpd", "nsys"):
        return _sqlite_mutations(kind, src, rng)
    if kind == "rocprofv3_json":
        return _json_mutations(src, rng)
    return _csv_mutations(src, rng)


def fresh_dir(parent: Path, i: int) -> Path:
    """An empty directory ``parent/m<i>`` (removed first if present)."""
    d = parent / f"m{i}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def ingest_outcome(path: Path, store: Path) -> tuple[str, str]:
    """Ingest ``path`` into ``store`` in process: ("accepted", run id), ("refused", the one-line
    message of a TracekitError) or ("crash", the exception's type and message)."""
    from tracekit.errors import TracekitError
    from tracekit.ingest import ingest

    try:
        res = ingest([path], store=store)
    except TracekitError as exc:
        return "refused", str(exc)
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
        return "crash", f"{type(exc).__name__}: {exc}"
    except RecursionError as exc:  # pragma: no cover - a subclass of Exception; kept explicit
        return "crash", f"RecursionError: {exc}"
    return "accepted", res[0].run_id
