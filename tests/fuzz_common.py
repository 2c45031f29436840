"""The fuzz harness: seeded mutators for every trace format and the oracle that checks tracekit's
promises on each mutated input (issue 17).

For each mutated input (a file, or a copied directory with one file mutated) the harness checks:

* **in process** (``tracekit.ingest`` into a copy of a store that already holds one run): no
  exception but a :class:`tracekit.errors.TracekitError`; the error text is one line; a refusal
  leaves the store directory byte-identical (SHA-256 of every file in it, WAL included); an
  acceptance adds exactly the runs :func:`tracekit.ingest` says it created;
* **C against pure Python** (Kineto's C scanner, XPlane's C wire reader, against
  ``TRACEKIT_PURE_PYTHON=1``): the same verdict (accepted or refused), and the row counts stored
  by both when both accept (reported apart: ``c_pure_rows``);
* **through the real CLI** for a sample of the inputs (``tracekit ingest PATH --store S`` in a
  subprocess): exit code 0 or 2 only; on 2, stderr is exactly one line starting ``error:`` and
  nothing printed holds ``Traceback``; the store is unchanged on 2.

In-process cases run in a child process (``python tests/fuzz_common.py worker ...``), so a
segmentation fault in a C module kills the child, not the harness: the parent sees the signal,
regenerates the input that was running (every case is a pure function of its plan entry and the
seed) and saves it as a crash. A case running longer than ``case_timeout_s`` is killed and saved
as a hang (a failure detector, not a timing margin: no verdict depends on it otherwise).

Failures are written under ``out`` (default ``./fuzz-failures``): ``failures.jsonl`` (one JSON
object per failure: kind, format, seed, case, mutation, mode, detail, reproducer path) and the
reproducer itself in ``out/<format>-<seed>-<source>-<case>/``, which ``tracekit ingest`` reads
as is.

Per-format mutators written beside this file (``fuzz_kineto.py``: ``mutations(seed)``,
``fuzz_amd.py``: ``mutations(kind, seed)``, ``fuzz_xplane.py``: ``mutations(seed)``, each an
iterator of bytes) are used when they exist, next to the generic mutator here.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import importlib.util
import io
import itertools
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SAMPLES = ROOT / "sample_traces"
SHARED = Path(os.environ.get("TRACEKIT_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "corpus"

#: the formats, as tracekit's parser registry names them
FORMATS = ("kineto", "xplane", "rocprofv3_json", "rocprofv3", "rocpd", "rpd")
#: formats with a C path and a pure-Python path whose verdicts must agree
DUAL_PATH = ("kineto", "xplane")
#: the kinds of failure, in the order the tables print them
FAILURE_KINDS = (
    "traceback", "bad_exit", "multi_line", "store_changed", "run_count", "c_pure_disagree", "crash", "hang",
)


# ---------------------------------------------------------------------------------------------
# Seeds


@dataclass(frozen=True)
class Seed:
    """A real trace to mutate: a file or a directory (``kind``) of format ``fmt``."""

    name: str
    fmt: str
    path: Path

    @property
    def is_dir(self) -> bool:
        return self.path.is_dir()


def bundled_seeds() -> list[Seed]:
    """The bundled ``sample_traces/`` of every format (present in every clone)."""
    s = SAMPLES
    seeds = [
        Seed("kineto-compile", "kineto", s / "cpu_torch_compile_recompile.pt.trace.json.gz"),
        Seed("kineto-decoder", "kineto", s / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"),
        Seed("kineto-weekly-dir", "kineto", s / "weekly" / "tiny_decoder_bs1_exact"),
        Seed("xplane-jax", "xplane", s / "jax_cpu_decode_recompile.xplane.pb.gz"),
        Seed("rocprofv3-json", "rocprofv3_json", s / "amd_synthetic_results.json"),
        Seed("rocprofv3-csv", "rocprofv3", s / "amd_synthetic_csv"),
        Seed("rocprofv3-pc-csv", "rocprofv3", s / "amd_synthetic_pc_csv"),
        Seed("rocpd", "rocpd", s / "amd_synthetic_rocpd" / "27182_results.db"),
        Seed("rpd", "rpd", s / "amd_synthetic.rpd"),
    ]
    return [x for x in seeds if x.path.exists()]


def corpus_seeds(max_bytes: int = 400_000) -> list[Seed]:
    """Small files of the real corpus (``$TRACEKIT_SHARED/corpus``) when it is present, else []."""
    if not CORPUS.is_dir():
        return []
    out: list[Seed] = []
    patterns = {
        "kineto": ("kineto/*/*.json.gz", "kineto/*/*.json", "more/*/*.pt.trace.json.gz"),
        "xplane": ("xplane/*/*.xplane.pb", "xplane/*/*.xplane.pb.gz"),
        "rocprofv3_json": ("rocprof/*/*_results.json", "more/*/*_results.json.gz"),
        "rocpd": ("rocprof/*/*_results.db",),
        "rpd": ("rocprof/rpd/*.rpd", "rocprof/rpd/*.rpd.gz"),
    }
    for fmt, globs in patterns.items():
        found = sorted({p for g in globs for p in CORPUS.glob(g) if p.is_file() and p.stat().st_size <= max_bytes})
        for p in found[:3]:  # a few per format: the bundled samples stay the bulk
            out.append(Seed(f"corpus-{p.parent.name}-{p.name}"[:80], fmt, p))
    return out


# ---------------------------------------------------------------------------------------------
# The generic mutator (any bytes; JSON, CSV, SQLite and gzip aware)

HUGE_NUMBERS = (
    b"99999999999999999999999999", b"-1", b"-9223372036854775809", b"9223372036854775808",
    b"18446744073709551616", b"1e308", b"1e999", b"-1e999", b"-0", b"0", b"NaN", b"Infinity",
    b"4294967296", b"-2147483649", b"1.5e-320", b"1" * 400,
)
HUGE_VALUES: tuple[Any, ...] = (
    -1, -1.5e15, 0, 2**63, -(2**63) - 1, 2**64, 10**30, 1e308, float("nan"), float("inf"), -0.0,
    None, True, "", "x", "1e999", [], {}, [[[]]], {"a": {"b": None}}, "A" * 100_000, "\x00\u2028\ud800",
)
INTERESTING_BYTES = b"\x00\xff\x7f\x80\"{}[],:\\\n\r\t'0-9eE."
_NUM = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STR = re.compile(rb'"(?:[^"\\]|\\.){1,200}"')
GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def _gz(data: bytes, level: int = 1) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


def byte_mutation(data: bytes, rng: random.Random, other: bytes | None = None) -> tuple[bytes, str]:
    """One byte-level mutation of ``data``; returns (new bytes, description)."""
    n = len(data)
    ops = ["truncate", "flip", "interesting", "delete", "duplicate", "insert", "digits", "nest", "longstr"]
    if other:
        ops.append("splice")
    op = rng.choice(ops)
    if n == 0:
        return b"{" * rng.randint(0, 3), "empty-grow"
    if op == "truncate":
        at = rng.randrange(n)
        return data[:at], f"truncate@{at}"
    if op == "flip":
        b = bytearray(data)
        k = rng.choice((1, 1, 2, 4, 16, 64))
        for _ in range(k):
            b[rng.randrange(n)] ^= rng.randint(1, 255)
        return bytes(b), f"flip{k}"
    if op == "interesting":
        b = bytearray(data)
        at = rng.randrange(n)
        b[at] = rng.choice(INTERESTING_BYTES)
        return bytes(b), f"byte@{at}={b[at]}"
    if op == "delete":
        a = rng.randrange(n)
        e = min(n, a + rng.choice((1, 8, 100, 4096, n)))
        return data[:a] + data[e:], f"delete[{a}:{e}]"
    if op == "duplicate":
        a = rng.randrange(n)
        e = min(n, a + rng.choice((1, 16, 1000, 65536)))
        at = rng.randrange(n)
        return data[:at] + data[a:e] + data[at:], f"dup[{a}:{e}]@{at}"
    if op == "insert":
        at = rng.randrange(n)
        junk = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 64))))
        return data[:at] + junk + data[at:], f"insert{len(junk)}@{at}"
    if op == "digits":
        hits = [m.span() for m in itertools.islice(_NUM.finditer(data, rng.randrange(n)), 50)]
        if not hits:
            return data[: n // 2], "digits-none-truncate"
        a, e = rng.choice(hits)
        v = rng.choice(HUGE_NUMBERS)
        return data[:a] + v + data[e:], f"number[{a}:{e}]={v[:20]!r}"
    if op == "nest":
        depth = rng.choice((100, 1000, 5000, 50_000))
        at = rng.randrange(n)
        closed = rng.random() < 0.5
        ins = b"[" * depth + (b"]" * depth if closed else b"")
        return data[:at] + ins + data[at:], f"nest{depth}{'closed' if closed else 'open'}@{at}"
    if op == "longstr":
        hits = [m.span() for m in itertools.islice(_STR.finditer(data, rng.randrange(n)), 20)]
        if not hits:
            return data + b"A" * 1000, "longstr-append"
        a, e = rng.choice(hits)
        size = rng.choice((10_000, 1_000_000))
        return data[: a + 1] + b"A" * size + data[e - 1 :], f"longstr{size}@{a}"
    assert other is not None  # splice
    a, b2 = rng.randrange(n), rng.randrange(len(other) or 1)
    return data[:a] + other[b2:], f"splice@{a}+{b2}"


def _walk(node: Any, rng: random.Random, depth: int = 0) -> tuple[Any, Any] | None:
    """A random (container, key) inside ``node``, descending at random."""
    path: list[tuple[Any, Any]] = []
    cur = node
    while isinstance(cur, (dict, list)) and cur and depth < 12:
        key: Any = rng.choice(list(cur.keys())) if isinstance(cur, dict) else rng.randrange(len(cur))
        path.append((cur, key))
        cur = cur[key]
        depth += 1
        if rng.random() < 0.2:
            break
    return path[-1] if path else None


def json_mutation(obj: Any, rng: random.Random) -> str:
    """Mutate the decoded JSON ``obj`` in place at a random spot; returns a description."""
    # Kineto's events and rocprofv3's records: aim at them most of the time
    if isinstance(obj, dict) and isinstance(obj.get("traceEvents"), list) and obj["traceEvents"] and rng.random() < 0.7:
        evs = obj["traceEvents"]
        i = rng.randrange(len(evs))
        ev = evs[i]
        where = f"traceEvents[{i}]"
        if isinstance(ev, dict) and ev:
            key = rng.choice(list(ev.keys()) + ["dur", "ts", "ph", "args", "name"])
            op = rng.choice(("set", "set", "del", "dup"))
            if op == "del":
                ev.pop(key, None)
                return f"{where}.{key} deleted"
            if op == "dup":
                evs.insert(i, json.loads(json.dumps(ev)))
                return f"{where} duplicated"
            v = rng.choice(HUGE_VALUES)
            ev[key] = v
            return f"{where}.{key}={str(v)[:30]}"
    spot = _walk(obj, rng)
    if spot is None:
        return "root-unchanged"
    cont, key = spot
    op = rng.choice(("set", "set", "set", "del", "dup", "nest", "type"))
    if op == "del":
        del cont[key]
        return f"del {key!r}"
    if op == "dup" and isinstance(cont, list):
        cont.insert(key, cont[key])
        return f"dup [{key}]"
    if op == "nest":
        v: Any = 0
        for _ in range(rng.choice((50, 500, 3000))):
            v = [v]
        cont[key] = v
        return f"nest {key!r}"
    if op == "type":
        old = cont[key]
        cont[key] = [old] if not isinstance(old, list) else {"x": old}
        return f"wrap {key!r}"
    v = rng.choice(HUGE_VALUES)
    cont[key] = v
    return f"set {key!r}={str(v)[:30]}"


def csv_mutation(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A CSV-aware mutation: a cell, a row, the header."""
    lines = data.split(b"\n")
    if len(lines) < 2:
        return byte_mutation(data, rng)
    op = rng.choice(("cell", "cell", "cell", "duprow", "header", "dropcol", "cutline", "quote", "extra"))
    r = rng.randrange(1, len(lines))
    if op == "cell":
        cells = lines[r].split(b",")
        c = rng.randrange(len(cells))
        v = rng.choice(HUGE_NUMBERS + (b"", b"abc", b'"', b'"a,b"', b"\xff\xfe", b"-1.5e15"))
        cells[c] = v
        lines[r] = b",".join(cells)
        return b"\n".join(lines), f"cell[{r},{c}]={v[:20]!r}"
    if op == "duprow":
        lines.insert(r, lines[r])
        return b"\n".join(lines), f"duprow {r}"
    if op == "header":
        cells = lines[0].split(b",")
        c = rng.randrange(len(cells))
        cells[c] = rng.choice((b"", b"X", cells[c].lower(), cells[c] + cells[c]))
        lines[0] = b",".join(cells)
        return b"\n".join(lines), f"header[{c}]"
    if op == "dropcol":
        c = rng.randrange(len(lines[0].split(b",")))
        out = []
        for ln in lines:
            cells = ln.split(b",")
            out.append(b",".join(cells[:c] + cells[c + 1 :]))
        return b"\n".join(out), f"dropcol {c}"
    if op == "cutline":
        cut = lines[r][: rng.randrange(len(lines[r]) + 1)]
        return b"\n".join([*lines[:r], cut]), f"cut at line {r}"
    if op == "quote":
        lines[r] = b'"' + lines[r]
        return b"\n".join(lines), f"open quote line {r}"
    lines[r] = lines[r] + b"," * rng.choice((1, 5, 1000))
    return b"\n".join(lines), f"extra commas line {r}"


SQL_VALUES = ("-1", "0", "NULL", "9223372036854775807", "-9223372036854775808", "1e308", "'x'", "X'00ff'",
              "''", "-1.5e15", "'\u00e9'", "4.5", "randomblob(64)", "zeroblob(100000)")


def sqlite_mutation(data: bytes, rng: random.Random, tmp: Path) -> tuple[bytes, str]:
    """An SQLite-aware mutation: SQL on a copy (values, rows, tables) or bytes of one page."""
    if rng.random() < 0.6:
        db = tmp / "m.sqlite"
        db.write_bytes(data)
        try:
            con = sqlite3.connect(db)
            try:
                tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                views = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='view'")]
                if not tables:
                    raise sqlite3.DatabaseError("no tables")
                nonempty = [t for t in tables if con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] > 0]
                t = rng.choice(nonempty or tables)
                cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
                op = rng.choice(("update", "update", "update", "update", "delete", "dup", "drop", "rename", "dropview"))
                if op == "update" and cols:
                    c = rng.choice(cols)
                    v = rng.choice(SQL_VALUES)
                    where = rng.choice(("", " WHERE rowid % 3 = 0", f' WHERE rowid = (SELECT min(rowid) FROM "{t}")'))
                    con.execute(f'UPDATE "{t}" SET "{c}" = {v}{where}')
                    desc = f"sql {t}.{c}={v}{where[:12]}"
                elif op == "delete":
                    con.execute(f'DELETE FROM "{t}"')
                    desc = f"sql delete {t}"
                elif op == "dup":
                    con.execute(f'INSERT INTO "{t}" SELECT * FROM "{t}"')
                    desc = f"sql dup rows {t}"
                elif op == "drop":
                    con.execute(f'DROP TABLE "{t}"')
                    desc = f"sql drop {t}"
                elif op == "dropview" and views:
                    v2 = rng.choice(views)
                    con.execute(f'DROP VIEW "{v2}"')
                    desc = f"sql drop view {v2}"
                elif cols:
                    c = rng.choice(cols)
                    con.execute(f'ALTER TABLE "{t}" RENAME COLUMN "{c}" TO "{c}_x"')
                    desc = f"sql rename {t}.{c}"
                else:
                    desc = "sql none"
                con.commit()
            finally:
                con.close()
            return db.read_bytes(), desc
        except (sqlite3.Error, UnicodeDecodeError, OverflowError) as e:  # an already-broken file
            return byte_mutation(data, rng)[0], f"sql failed ({type(e).__name__}); bytes"
    page = int.from_bytes(data[16:18], "big") if data.startswith(SQLITE_MAGIC) else 4096
    page = 65536 if page == 1 else (page or 4096)
    n_pages = max(1, len(data) // page)
    op = rng.choice(("page", "page", "truncate", "zero", "header"))
    b = bytearray(data)
    if op == "page":
        p = rng.randrange(n_pages)
        lo = max(100, p * page)
        for _ in range(rng.choice((1, 8, 64))):
            if lo < len(b):
                b[rng.randrange(lo, min(len(b), (p + 1) * page) or lo + 1)] ^= rng.randint(1, 255)
        return bytes(b), f"page {p} bytes flipped (header kept)"
    if op == "truncate":
        k = rng.randrange(n_pages)
        return bytes(b[: k * page + rng.choice((0, 0, 1, 100))]), f"truncate to page {k}"
    if op == "zero":
        p = rng.randrange(1, n_pages) if n_pages > 1 else 0
        b[p * page : (p + 1) * page] = bytes(page)
        return bytes(b), f"zero page {p}"
    at = rng.randrange(16, 100)
    b[at] ^= rng.randint(1, 255)
    return bytes(b), f"header byte {at}"


def content_kind(name: str) -> str:
    """json | csv | sqlite | pb | other, from a file name (after a .gz suffix)."""
    n = name.lower()
    n = n.removesuffix(".gz")
    if n.endswith((".json", ".jsonl")):
        return "json"
    if n.endswith(".csv"):
        return "csv"
    if n.endswith((".db", ".rpd", ".sqlite")):
        return "sqlite"
    if n.endswith(".pb"):
        return "pb"
    return "other"


def mutate_content(data: bytes, name: str, rng: random.Random, tmp: Path, other: bytes | None) -> tuple[bytes, str]:
    """Mutate decompressed ``data`` of file ``name``; 1-3 stacked mutations."""
    kind = content_kind(name)
    descs = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        r = rng.random()
        if kind == "json" and r < 0.5 and len(data) < 20_000_000:
            try:
                obj = json.loads(data)
            except (ValueError, RecursionError):
                data, d = byte_mutation(data, rng, other)
            else:
                d = json_mutation(obj, rng)
                try:
                    data = json.dumps(obj, separators=(",", ":") if rng.random() < 0.5 else None).encode()
                except RecursionError:  # nested past json's limit: the byte-level "nest" covers that
                    data, d = byte_mutation(data, rng, other)
        elif kind == "csv" and r < 0.6:
            data, d = csv_mutation(data, rng)
        elif kind == "sqlite" and r < 0.8:
            data, d = sqlite_mutation(data, rng, tmp)
        else:
            data, d = byte_mutation(data, rng, other)
        descs.append(d)
    return data, "; ".join(descs)


def mutate_file(raw: bytes, name: str, rng: random.Random, tmp: Path, other: bytes | None) -> tuple[bytes, str, str]:
    """Mutate a file's bytes (a .gz one decompressed, then compressed again, or its gzip stream
    itself); returns (bytes, new file name, description)."""
    if not name.endswith(".gz") or not raw.startswith(GZIP_MAGIC):
        data, d = mutate_content(raw, name, rng, tmp, other)
        return data, name, d
    r = rng.random()
    if r < 0.15:  # the gzip stream itself: truncated, flipped, trailing junk, two members
        op = rng.choice(("truncate", "flip", "trailing", "members", "header"))
        if op == "truncate":
            at = rng.randrange(len(raw))
            return raw[:at], name, f"gzip truncated@{at}"
        if op == "flip":
            b = bytearray(raw)
            at = rng.randrange(10, len(b))
            b[at] ^= rng.randint(1, 255)
            return bytes(b), name, f"gzip byte@{at} flipped"
        if op == "trailing":
            return raw + rng.choice((b"\x00" * 100, b"junk", GZIP_MAGIC)), name, "gzip trailing junk"
        if op == "members":
            return raw + raw, name, "gzip two members"
        b = bytearray(raw)
        b[3] = rng.choice((0xFF, 0x04, 0x08))
        return bytes(b), name, f"gzip flags={b[3]}"
    try:
        data = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error):
        out, d = mutate_content(raw, name, rng, tmp, other)
        return out, name, d
    other_data = None
    if other is not None:
        try:
            other_data = gzip.decompress(other) if other.startswith(GZIP_MAGIC) else other
        except (OSError, EOFError, zlib.error):
            other_data = other
    data, d = mutate_content(data, name[:-3], rng, tmp, other_data)
    if r < 0.25:
        return data, name[:-3], d + "; written uncompressed"
    return _gz(data), name, d


def _dir_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def mutate_dir(src: Path, dest: Path, rng: random.Random, tmp: Path) -> str:
    """Copy the folder ``src`` to ``dest`` and mutate it: one file's bytes mostly, sometimes the
    folder (a file removed, an empty file, a second capture's copy)."""
    shutil.copytree(src, dest)
    files = _dir_files(dest)
    r = rng.random()
    if r < 0.07 and len(files) > 1:
        victim = rng.choice(files)
        victim.unlink()
        return f"removed {victim.name}"
    if r < 0.12:
        victim = rng.choice(files)
        victim.write_bytes(b"")
        return f"emptied {victim.name}"
    if r < 0.16:
        victim = rng.choice(files)
        parts = victim.name.split("_", 1)
        twin = victim.with_name(("99999_" + parts[1]) if len(parts) == 2 else "copy_" + victim.name)
        shutil.copy(victim, twin)
        return f"added {twin.name}"
    victim = rng.choice(files)
    other = rng.choice(files).read_bytes()
    data, name, d = mutate_file(victim.read_bytes(), victim.name, rng, tmp, other)
    victim.unlink()
    (victim.parent / name).write_bytes(data)
    return f"{victim.name}: {d}"


# ---------------------------------------------------------------------------------------------
# Per-format mutators written by others (used when present)

#: source name -> (module, the formats it feeds, how to call it)
EXTERNAL = {
    "fuzz_kineto": ("kineto",),
    "fuzz_xplane": ("xplane",),
    "fuzz_amd": ("rocprofv3_json", "rocprofv3", "rocpd", "rpd"),
}
#: fuzz_amd's ``kind`` for each format (tried in order: the first it takes)
AMD_KINDS = {
    "rocprofv3_json": ("rocprofv3_json", "json"),
    "rocprofv3": ("rocprofv3_csv", "rocprofv3", "csv"),
    "rocpd": ("rocpd",),
    "rpd": ("rpd",),
}


def external_module(name: str) -> Any | None:
    """The per-format mutator module ``name`` (``tests/<name>.py``) if it exists and imports."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    if importlib.util.find_spec(name) is None:
        return None
    try:
        mod = importlib.import_module(name)
    except Exception:  # noqa: BLE001 - someone else's work in progress: use the generic mutator
        return None
    return mod if callable(getattr(mod, "mutations", None)) else None


def external_iter(name: str, fmt: str, seed: int) -> Iterator[Any] | None:
    mod = external_module(name)
    if mod is None:
        return None
    try:
        if name == "fuzz_amd":
            for kind in AMD_KINDS[fmt]:
                try:
                    it = iter(mod.mutations(kind, seed))
                except (ValueError, KeyError, TypeError):
                    continue
                return it
            return None
        return iter(mod.mutations(seed))
    except Exception:  # noqa: BLE001
        return None


SUFFIX = {
    "kineto": (".pt.trace.json.gz", ".pt.trace.json"),
    "xplane": (".xplane.pb.gz", ".xplane.pb"),
    "rocprofv3_json": ("_results.json.gz", "_results.json"),
    "rocprofv3": ("_kernel_trace.csv", "_kernel_trace.csv"),
    "rocpd": ("_results.db", "_results.db"),
    "rpd": (".rpd.gz", ".rpd"),
}


def write_external(item: Any, fmt: str, dest: Path) -> Path:
    """Write one item of a per-format mutator under ``dest``: bytes (a file named for the format,
    .gz when the bytes are gzip), a (name, bytes) pair, a {name: bytes} folder, or a path."""
    dest.mkdir(parents=True, exist_ok=True)
    if callable(getattr(item, "build", None)):  # fuzz_amd's Mutation: it writes itself
        return Path(item.build(dest))
    if isinstance(item, (bytes, bytearray, memoryview)):
        data = bytes(item)
        gz, plain = SUFFIX[fmt]
        name = "fuzz" + (gz if data.startswith(GZIP_MAGIC) else plain)
        if fmt == "rocprofv3":  # a CSV folder: one kernel trace file
            d = dest / "capture"
            d.mkdir()
            (d / ("1" + plain)).write_bytes(data)
            return d
        (dest / name).write_bytes(data)
        return dest / name
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        p = dest / Path(item[0]).name
        p.write_bytes(bytes(item[1]))
        return p
    if isinstance(item, dict):
        d = dest / "capture"
        d.mkdir()
        for k, v in item.items():
            (d / Path(str(k)).name).write_bytes(bytes(v))
        return d
    if isinstance(item, (str, Path)) and Path(item).exists():
        p = Path(item)
        if p.is_dir():
            shutil.copytree(p, dest / p.name)
        else:
            shutil.copy(p, dest / p.name)
        return dest / p.name
    raise TypeError(f"unknown mutation item {type(item).__name__}")


# ---------------------------------------------------------------------------------------------
# The plan: which cases exist (a pure function of the seeds, the seed number and the count)


@dataclass(frozen=True)
class Task:
    """``count`` consecutive cases [start, start+count) of one seed and one mutator source."""

    seed: Seed
    source: str  # "generic" or the external module name
    start: int
    count: int

    def key(self) -> str:
        return f"{self.seed.name}:{self.source}:{self.start}"


def available_sources(fmt: str) -> list[str]:
    out = ["generic"]
    for name, fmts in EXTERNAL.items():
        if fmt in fmts and external_module(name) is not None:
            out.append(name)
    return out


def plan(n_inputs: int, seeds: list[Seed], chunk: int = 100) -> list[Task]:
    """Split ``n_inputs`` evenly over the formats present, then over each format's seeds and
    mutator sources (the generic one takes half where a per-format one exists), in chunks."""
    by_fmt: dict[str, list[Seed]] = {}
    for s in seeds:
        by_fmt.setdefault(s.fmt, []).append(s)
    tasks: list[Task] = []
    fmts = sorted(by_fmt)
    for fi, fmt in enumerate(fmts):
        n_fmt = n_inputs // len(fmts) + (1 if fi < n_inputs % len(fmts) else 0)
        sources = available_sources(fmt)
        pieces: list[tuple[Seed, str, int]] = []
        ext = [s for s in sources if s != "generic"]
        n_ext = n_fmt // 2 if ext else 0
        for j, src in enumerate(ext):
            pieces.append((by_fmt[fmt][0], src, n_ext // len(ext) + (1 if j < n_ext % len(ext) else 0)))
        n_gen = n_fmt - sum(p[2] for p in pieces)
        fseeds = by_fmt[fmt]
        for j, s in enumerate(fseeds):
            pieces.append((s, "generic", n_gen // len(fseeds) + (1 if j < n_gen % len(fseeds) else 0)))
        for s, src, n in pieces:
            for start in range(0, n, chunk):
                tasks.append(Task(s, src, start, min(chunk, n - start)))
    # interleave formats and streams: a run stopped at its time budget has covered them alike
    order = {fmt: i for i, fmt in enumerate(fmts)}
    return sorted(tasks, key=lambda t: (t.start, order[t.seed.fmt], t.source != "generic", t.seed.name))


def make_case(seed: Seed, source: str, index: int, master_seed: int, dest: Path,
              ext_iter: Iterator[Any] | None = None, ext_pos: int = 0) -> tuple[Path, str]:
    """Materialize case ``index`` under ``dest`` (which must not exist); returns (path, description).

    Generic cases are a pure function of (seed, index, master_seed). External ones are the
    ``index``-th item of the module's iterator: pass the iterator and how many items it already
    yielded to avoid restarting it."""
    dest.mkdir(parents=True)
    if source != "generic":
        it = ext_iter if ext_iter is not None else external_iter(source, seed.fmt, master_seed)
        if it is None:
            raise RuntimeError(f"{source} is not importable")
        pos = 0 if ext_iter is None else ext_pos
        item = None
        for _ in range(index - pos + 1):
            item = next(it)
        label = getattr(item, "name", None)
        return write_external(item, seed.fmt, dest), f"{source} item {index}" + (f" {label}" if label else "")
    rng = random.Random(f"{master_seed}:{seed.name}:{index}")
    tmp = dest / ".tmp"
    tmp.mkdir()
    try:
        if seed.is_dir:
            out = dest / seed.path.name
            desc = mutate_dir(seed.path, out, rng, tmp)
            return out, desc
        raw = seed.path.read_bytes()
        other = None
        if rng.random() < 0.1:  # splice with another sample of any format
            others = [s for s in bundled_seeds() if not s.is_dir and s.path != seed.path]
            if others:
                other = rng.choice(others).path.read_bytes()
        data, name, desc = mutate_file(raw, seed.path.name, rng, tmp, other)
        out = dest / name
        out.write_bytes(data)
        return out, desc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The oracle


def tree_digest(path: Path) -> str:
    """SHA-256 over the names and bytes of every file in the folder ``path`` (a store's folder:
    the store and any WAL or temp file beside it)."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode() + b"\0")
        if p.is_file():
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def store_counts(store: Path) -> dict[str, int]:
    """Runs and rows of the main tables of ``store`` (opened read-only)."""
    import duckdb

    con = duckdb.connect(str(store), read_only=True)
    try:
        out = {}
        for t in ("run_meta", "rank_meta", "device_activity", "host_events", "counter_values", "pc_sample_rows"):
            try:
                out[t] = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
            except duckdb.Error:
                out[t] = -1
        return out
    finally:
        con.close()


@dataclass
class Outcome:
    """What one mode (C, pure Python, CLI) made of one input."""

    mode: str
    verdict: str  # accepted | refused | traceback | crash | hang
    message: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)


#: The bundled sample every fuzz store starts with (one run).
BASE_RUN_FILE = "amd_synthetic.rpd"


class StoreFixture:
    """A store holding one run, copied afresh into ``work/store/`` whenever a case changed it."""

    def __init__(self, work: Path, base: Path | None = None) -> None:
        self.work = work
        self.base = base or work / "base"
        self.dir = work / "store"
        if not (self.base / "store.duckdb").exists():
            self.base.mkdir(parents=True, exist_ok=True)
            import tracekit

            tracekit.ingest([SAMPLES / BASE_RUN_FILE], store=self.base / "store.duckdb")
        #: the stored run's file: an input with these bytes is that run again, not a new one
        self.base_input_sha = hashlib.sha256((SAMPLES / BASE_RUN_FILE).read_bytes()).hexdigest()
        self.base_digest = tree_digest(self.base)
        self.base_counts = store_counts(self.base / "store.duckdb")
        import duckdb

        con = duckdb.connect(str(self.base / "store.duckdb"), read_only=True)
        try:
            self.base_runs = {r[0] for r in con.execute("SELECT run_id FROM run_meta").fetchall()}
        finally:
            con.close()
        self.dirty = True

    @property
    def path(self) -> Path:
        return self.dir / "store.duckdb"

    def fresh(self) -> Path:
        if self.dirty:
            shutil.rmtree(self.dir, ignore_errors=True)
            shutil.copytree(self.base, self.dir)
            self.dirty = False
        return self.path


def _one_line(msg: str) -> bool:
    return "\n" not in msg and "\r" not in msg


def check_in_process(path: Path, fx: StoreFixture, mode: str) -> Outcome:
    """Ingest ``path`` in this process into a copy of the one-run store and judge the result."""
    import tracekit
    from tracekit.errors import TracekitError

    store = fx.fresh()
    out = Outcome(mode, "accepted")
    try:
        results = tracekit.ingest([path], store=store)
    except TracekitError as e:
        out.verdict, out.message = "refused", str(e)
        if not _one_line(out.message):
            out.failures.append(("multi_line", out.message[:2000]))
        after = tree_digest(fx.dir)
        if after != fx.base_digest:
            fx.dirty = True
            out.failures.append(("store_changed", f"refused ({out.message[:300]}) but the store folder changed"))
        return out
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        fx.dirty = True
        out.verdict = "traceback"
        out.message = f"{type(e).__name__}: {str(e)[:500]}"
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
        out.failures.append(("traceback", out.message + "\n" + tb[-3000:]))
        return out
    fx.dirty = True
    created = sum(1 for r in results if r.created)
    try:
        out.counts = store_counts(store)
    except Exception as e:  # noqa: BLE001
        out.failures.append(("run_count", f"accepted but the store does not open: {type(e).__name__}: {e}"))
        return out
    want = fx.base_counts["run_meta"] + created
    # not created: the mutation left the bytes of the run already stored (same content, same id)
    known = created == 0 and len(results) == 1 and results[0].run_id in fx.base_runs
    if out.counts["run_meta"] != want or (created != 1 and not known):
        out.failures.append(("run_count", (f"accepted: {created} created, {out.counts['run_meta']} runs stored, "
                                           f"{want} expected (1 before)")))
    return out


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from tracekit.cli.main import main; main()", *args]


def check_cli(path: Path, fx: StoreFixture, timeout_s: float) -> Outcome:
    """``tracekit ingest PATH --store S`` in a subprocess; judge exit code, stderr and the store."""
    store = fx.fresh()
    env = dict(os.environ)
    env.pop("TRACEKIT_STORE", None)
    env["COLUMNS"] = "80"  # a narrow terminal: a wrapped error would show as two lines
    out = Outcome("cli", "accepted")
    try:
        p = subprocess.run(cli_command("ingest", str(path), "--store", str(store)), capture_output=True,
                           text=True, errors="replace", env=env, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        fx.dirty = True
        out.verdict = "hang"
        out.failures.append(("hang", f"CLI ingest still running after {timeout_s:.0f} s"))
        return out
    fx.dirty = True
    text = p.stdout + p.stderr
    if "Traceback" in text:
        out.failures.append(("traceback", p.stderr[-3000:]))
    if p.returncode < 0:
        out.verdict = "crash"
        out.failures.append(("crash", f"CLI killed by signal {-p.returncode}: {p.stderr[-1000:]}"))
        return out
    if p.returncode not in (0, 2):
        out.verdict = "traceback" if "Traceback" in text else "bad_exit"
        out.failures.append(("bad_exit", f"exit {p.returncode}: {p.stderr[-2000:]}"))
        return out
    if p.returncode == 2:
        out.verdict = "refused"
        lines = p.stderr.strip("\n").split("\n")
        out.message = p.stderr.strip()
        if len(lines) != 1 or not lines[0].startswith("error:"):
            out.failures.append(("multi_line", p.stderr[:2000]))
        if tree_digest(fx.dir) != fx.base_digest:
            out.failures.append(("store_changed", f"CLI exit 2 ({lines[0][:300]}) but the store folder changed"))
        else:
            fx.dirty = False
        return out
    try:
        out.counts = store_counts(store)
    except Exception as e:  # noqa: BLE001
        out.failures.append(("run_count", f"exit 0 but the store does not open: {type(e).__name__}: {e}"))
        return out
    # a mutation can leave the file as it was (an SQL edit that matches no row): then it is the
    # stored run again, and nothing new may be stored
    same = path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == fx.base_input_sha
    if out.counts["run_meta"] != fx.base_counts["run_meta"] + (0 if same else 1):
        out.failures.append(("run_count", f"exit 0 but {out.counts['run_meta']} runs stored (1 before)"))
    return out


def judge(path: Path, fmt: str, fx: StoreFixture, *, cli: bool, dual: bool, timeout_s: float) -> list[Outcome]:
    """Every check that applies to one input; the first outcome is the default path's."""
    outs = []
    os.environ.pop("TRACEKIT_PURE_PYTHON", None)
    first = check_in_process(path, fx, "c" if fmt in DUAL_PATH else "in_process")
    outs.append(first)
    if dual and fmt in DUAL_PATH:
        os.environ["TRACEKIT_PURE_PYTHON"] = "1"
        try:
            pure = check_in_process(path, fx, "pure")
        finally:
            os.environ.pop("TRACEKIT_PURE_PYTHON", None)
        outs.append(pure)
        vc = first.verdict
        vp = pure.verdict
        if vc != vp:
            first.failures.append(("c_pure_disagree", f"C: {vc} ({first.message[:200]}); pure: {vp} ({pure.message[:200]})"))
        elif vc == "accepted" and first.counts != pure.counts:
            first.failures.append(("c_pure_rows", f"both accepted, rows C {first.counts} pure {pure.counts}"))
    if cli:
        outs.append(check_cli(path, fx, timeout_s))
    return outs


# ---------------------------------------------------------------------------------------------
# The worker (a child process) and the driver


def _save_reproducer(out_dir: Path, case_path: Path, rec: dict[str, Any]) -> str:
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{rec['format']}-{rec['seed']}-{rec['source']}-{rec['case']}")
    dest = out_dir / tag
    if not dest.exists():
        dest.mkdir(parents=True)
        if case_path.is_dir():
            shutil.copytree(case_path, dest / case_path.name)
        elif case_path.exists():
            shutil.copy(case_path, dest / case_path.name)
    return str(dest / case_path.name)


def _append_failure(out_dir: Path, rec: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "failures.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")


def worker_main(spec: dict[str, Any]) -> None:
    """Run the cases of one task, writing a ``start`` line before and a ``done`` line after each
    (in ``spec['log']``), so the parent knows which input was running if this process dies."""
    seed = Seed(spec["seed_name"], spec["fmt"], Path(spec["seed_path"]))
    work = Path(spec["work"])
    out_dir = Path(spec["out"])
    log = open(spec["log"], "a", buffering=1)  # noqa: SIM115 - closed at the end; lost with a crash
    fx = StoreFixture(work / "fixture", Path(spec["base"]))
    cli_every = int(spec["cli_every"])
    ext = None
    pos = 0
    if spec["source"] != "generic":
        ext = external_iter(spec["source"], seed.fmt, int(spec["master_seed"]))
    for i in range(int(spec["first"]), int(spec["stop"])):
        log.write(json.dumps({"event": "start", "case": i}) + "\n")
        case_dir = work / "case"
        shutil.rmtree(case_dir, ignore_errors=True)
        try:
            path, desc = make_case(seed, spec["source"], i, int(spec["master_seed"]), case_dir, ext, pos)
            pos = i + 1
        except StopIteration:
            log.write(json.dumps({"event": "exhausted", "case": i}) + "\n")
            break
        except Exception as e:  # noqa: BLE001 - the mutator's own bug: not tracekit's; counted apart
            pos = i + 1
            log.write(json.dumps({"event": "harness_error", "case": i,
                                  "detail": f"{type(e).__name__}: {e}"[:500]}) + "\n")
            continue
        if os.environ.get("TRACEKIT_FUZZ_SELFTEST_CRASH") == f"{seed.name}:{i}":
            os.kill(os.getpid(), signal.SIGSEGV)  # the harness's own test: a crash must be caught
        t0 = time.monotonic()
        use_cli = cli_every > 0 and i % cli_every == 0
        outs = judge(path, seed.fmt, fx, cli=use_cli, dual=bool(spec["dual"]), timeout_s=float(spec["timeout"]))
        rec = {"event": "done", "case": i, "mutation": desc, "secs": round(time.monotonic() - t0, 3),
               "outcomes": [{"mode": o.mode, "verdict": o.verdict, "message": o.message[:300]} for o in outs],
               "failures": []}
        for o in outs:
            for kind, detail in o.failures:
                f = {"kind": kind, "format": seed.fmt, "seed": seed.name, "source": spec["source"], "case": i,
                     "master_seed": spec["master_seed"], "mutation": desc, "mode": o.mode, "detail": detail}
                f["reproducer"] = _save_reproducer(out_dir, path, f)
                _append_failure(out_dir, f)
                rec["failures"].append({k: f[k] for k in ("kind", "mode", "detail", "reproducer")})
        log.write(json.dumps(rec) + "\n")
    log.close()


@dataclass
class Summary:
    """Counts per format (and totals), plus every failure record."""

    per_format: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    planned: int = 0
    stopped_early: bool = False

    def row(self, fmt: str) -> dict[str, int]:
        return self.per_format.setdefault(fmt, {
            "inputs": 0, "accepted": 0, "refused": 0, "pure_runs": 0, "cli_runs": 0,
            **{k: 0 for k in FAILURE_KINDS}, "c_pure_rows": 0, "harness_errors": 0,
        })

    def totals(self) -> dict[str, int]:
        tot: dict[str, int] = {}
        for r in self.per_format.values():
            for k, v in r.items():
                tot[k] = tot.get(k, 0) + v
        return tot

    def hard_failures(self) -> list[dict[str, Any]]:
        """The failures that break a promise (all but ``c_pure_rows``, which is reported)."""
        return [f for f in self.failures if f["kind"] in FAILURE_KINDS]

    def as_dict(self) -> dict[str, Any]:
        return {"per_format": self.per_format, "totals": self.totals(), "seconds": round(self.seconds, 1),
                "planned": self.planned, "stopped_early": self.stopped_early,
                "failures": self.failures}


def _account(summary: Summary, fmt: str, rec: dict[str, Any]) -> None:
    row = summary.row(fmt)
    row["inputs"] += 1
    for o in rec["outcomes"]:
        if o["mode"] == "pure":
            row["pure_runs"] += 1
        elif o["mode"] == "cli":
            row["cli_runs"] += 1
    first = rec["outcomes"][0]["verdict"]
    if first == "accepted":
        row["accepted"] += 1
    elif first == "refused":
        row["refused"] += 1
    for kind in {f["kind"] for f in rec["failures"]}:
        row[kind] = row.get(kind, 0) + 1


class _Running:
    """One worker process running one task (restarted past a crashed or hung case)."""

    def __init__(self, task: Task, first: int, args: dict[str, Any], work: Path) -> None:
        self.task = task
        self.first = first
        self.args = args
        self.work = work
        self.log = work / "log.jsonl"
        self.read_pos = 0
        self.current: int | None = None
        self.current_since = time.monotonic()
        spec = {"seed_name": task.seed.name, "fmt": task.seed.fmt, "seed_path": str(task.seed.path),
                "source": task.source, "first": first, "stop": task.start + task.count, "work": str(work),
                "log": str(self.log), **args}
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "worker", json.dumps(spec)],
                                     stdout=subprocess.DEVNULL, stderr=open(work / "stderr.txt", "ab"),  # noqa: SIM115
                                     start_new_session=True)

    def drain(self, summary: Summary, on_case: Callable[[dict[str, Any]], None] | None) -> None:
        if not self.log.exists():
            return
        with open(self.log) as f:
            f.seek(self.read_pos)
            while True:
                line = f.readline()
                if not line.endswith("\n"):
                    break
                self.read_pos = f.tell()
                rec = json.loads(line)
                if rec["event"] == "start":
                    self.current, self.current_since = rec["case"], time.monotonic()
                elif rec["event"] == "harness_error":
                    self.current = None
                    summary.row(self.task.seed.fmt)["harness_errors"] += 1
                elif rec["event"] == "done":
                    self.current = None
                    _account(summary, self.task.seed.fmt, rec)
                    for fl in rec["failures"]:
                        summary.failures.append({"format": self.task.seed.fmt, "seed": self.task.seed.name,
                                                 "source": self.task.source, "case": rec["case"],
                                                 "mutation": rec["mutation"], **fl})
                    if on_case:
                        on_case(rec)


def _record_lost_case(run: _Running, kind: str, detail: str, summary: Summary, out_dir: Path, master_seed: int) -> None:
    """The worker died (signal) or hung on case ``run.current``: rebuild that input and save it."""
    task, i = run.task, run.current
    assert i is not None
    dest = run.work / "lost"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        path, desc = make_case(task.seed, task.source, i, master_seed, dest)
    except Exception as e:  # noqa: BLE001
        path, desc = dest, f"(could not rebuild: {e})"
    rec = {"kind": kind, "format": task.seed.fmt, "seed": task.seed.name, "source": task.source, "case": i,
           "master_seed": master_seed, "mutation": desc, "mode": "in_process", "detail": detail}
    rec["reproducer"] = _save_reproducer(out_dir, path, rec)
    _append_failure(out_dir, rec)
    summary.failures.append(rec)
    row = summary.row(task.seed.fmt)
    row["inputs"] += 1
    row[kind] += 1


def run_fuzz(n_inputs: int, *, master_seed: int = 0, jobs: int = 1, out_dir: Path | str = "fuzz-failures",
             seeds: list[Seed] | None = None, cli_every: int = 50, dual: bool = True, chunk: int = 100,
             case_timeout_s: float = 300.0, on_case: Callable[[dict[str, Any]], None] | None = None,
             budget_s: float = 0.0) -> Summary:
    """Run ``n_inputs`` mutated inputs (spread over the formats of ``seeds``, default the bundled
    samples plus small corpus files) in ``jobs`` worker processes; every ``cli_every``-th case of
    each task also goes through the CLI. Returns the counts and the failures (also written to
    ``out_dir``). With ``budget_s`` no new task starts after that many seconds (the summary's
    ``planned`` and ``stopped_early`` say so)."""
    out = Path(out_dir).resolve()
    seeds = seeds if seeds is not None else bundled_seeds() + corpus_seeds()
    tasks = plan(n_inputs, seeds, chunk)
    summary = Summary(planned=n_inputs)
    args = {"master_seed": master_seed, "out": str(out), "cli_every": cli_every, "dual": dual,
            "timeout": case_timeout_s}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tracekit-fuzz-") as tmp:
        args["base"] = str(StoreFixture(Path(tmp) / "fixture").base)  # built once, copied by every worker
        pending = list(tasks)
        running: list[_Running] = []
        slot = itertools.count()
        while pending or running:
            if budget_s > 0 and pending and time.monotonic() - t0 > budget_s:
                summary.stopped_early = True
                pending.clear()
            while pending and len(running) < max(1, jobs):
                task = pending.pop(0)
                w = Path(tmp) / f"w{next(slot)}"
                w.mkdir()
                running.append(_Running(task, task.start, args, w))
            time.sleep(0.05)
            for run in list(running):
                run.drain(summary, on_case)
                rc = run.proc.poll()
                hung = run.current is not None and time.monotonic() - run.current_since > case_timeout_s
                if rc is None and not hung:
                    continue
                if hung:
                    os.killpg(run.proc.pid, signal.SIGKILL)
                    run.proc.wait()
                run.drain(summary, on_case)
                running.remove(run)
                if run.current is None:
                    if rc not in (0, None):  # died between cases (e.g. could not build its fixture)
                        err = (run.work / "stderr.txt").read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"fuzz worker for {run.task.key()} exited {rc}: {err}")
                    shutil.rmtree(run.work, ignore_errors=True)
                    continue
                if hung:
                    kind, detail = "hang", f"case still running after {case_timeout_s:.0f} s (killed)"
                else:
                    err = (run.work / "stderr.txt").read_text(errors="replace")[-1500:]
                    kind = "crash" if rc is not None and rc < 0 else "traceback"
                    detail = f"worker exit {rc} (signal {-rc if rc and rc < 0 else 0}): {err}"
                _record_lost_case(run, kind, detail, summary, out, master_seed)
                nxt = run.current + 1
                if nxt < run.task.start + run.task.count:
                    w = Path(tmp) / f"w{next(slot)}"
                    w.mkdir()
                    running.append(_Running(run.task, nxt, args, w))
    summary.seconds = time.monotonic() - t0
    return summary


COLUMNS = ("inputs", "accepted", "refused", "traceback", "bad_exit", "multi_line", "store_changed",
           "run_count", "c_pure_disagree", "c_pure_rows", "crash", "hang", "pure_runs", "cli_runs", "harness_errors")


def format_table(summary: Summary) -> str:
    """A plain-text table: one row per format and a total."""
    rows = [(fmt, summary.per_format[fmt]) for fmt in sorted(summary.per_format)] + [("TOTAL", summary.totals())]
    head = ["format", *COLUMNS]
    cells = [[name, *(str(r.get(c, 0)) for c in COLUMNS)] for name, r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    line = lambda vals: "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths)))
    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(c) for c in cells)])


def describe_failures(failures: list[dict[str, Any]], limit: int = 40) -> str:
    """One line per failure (the first ``limit``), for an assertion message."""
    out = []
    for f in failures[:limit]:
        detail = str(f.get("detail", "")).strip().splitlines()
        out.append(f"{f['kind']:<16} {f['format']:<15} {f.get('mode', ''):<10} {f['seed']}#{f['case']} "
                   f"[{f.get('mutation', '')[:60]}] {(detail[0] if detail else '')[:160]} -> {f.get('reproducer', '')}")
    if len(failures) > limit:
        out.append(f"... and {len(failures) - limit} more")
    # mutations put lone surrogates in values: printable whatever the terminal's encoding
    return "\n".join(out).encode("ascii", "backslashreplace").decode("ascii")


def _gzip_bytes(data: bytes) -> bytes:  # kept for the targets: gzip with a fixed mtime
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as g:
        g.write(data)
    return buf.getvalue()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        sys.path.insert(0, str(HERE))
        worker_main(json.loads(sys.argv[2]))
    else:
        print("usage: fuzz_common.py worker SPEC (run by run_fuzz); see benchmarks/bench_fuzz.py", file=sys.stderr)
        sys.exit(2)


__all__ = [
    "FORMATS",
    "Outcome",
    "Seed",
    "Summary",
    "asdict",
    "bundled_seeds",
    "corpus_seeds",
    "describe_failures",
    "format_table",
    "judge",
    "make_case",
    "plan",
    "run_fuzz",
]
