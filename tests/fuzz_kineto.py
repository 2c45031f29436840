"""A seeded mutator of Kineto (PyTorch profiler) traces, and a differential check of the two
Kineto paths (the C scanner and the pure-Python path) on what it produces.

Reusable by the fuzz suite::

    from fuzz_kineto import mutations, check_both_paths
    for data in itertools.islice(mutations(seed), 100):
        outcome = check_both_paths(data, tmp_dir)   # raises AssertionError on a disagreement

``mutations(seed)`` yields file contents (bytes; gzip-wrapped when the mutation says so: the
parsers detect gzip by its magic bytes, so the file name does not matter) built from real traces:
the bundled ``sample_traces/*.pt.trace.json.gz`` and, when the corpus is present, the small files
of ``/work/shared/corpus/kineto`` (each cut to its first events so one ingest takes ~0.1 s). The
same seed always yields the same sequence. Run this module as a script for a long run::

    .venv/bin/python tests/fuzz_kineto.py --seeds 0-99 --per-seed 30
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import sys
import tempfile
import traceback
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
CORPUS_KINETO = Path(os.environ.get("TRACEKIT_CORPUS", "/work/shared/corpus")) / "kineto"
_MAX_EVENTS = 400  # events kept of each base trace (speed: one ingest stays ~0.1 s)
_CORPUS_MAX_BYTES = 400_000  # corpus files up to this (compressed) size are used as bases


def _cut(doc: dict[str, object]) -> bytes:
    """The trace with its first events only (device events kept preferentially), as JSON bytes."""
    events = doc.get("traceEvents")
    if isinstance(events, list) and len(events) > _MAX_EVENTS:
        dev = [e for e in events if isinstance(e, dict) and e.get("cat") in ("kernel", "Kernel", "gpu_memcpy", "gpu_memset")]
        rest = [e for e in events if not (isinstance(e, dict) and e in dev[: _MAX_EVENTS // 2])]
        doc = {**doc, "traceEvents": dev[: _MAX_EVENTS // 2] + rest[: _MAX_EVENTS - min(len(dev), _MAX_EVENTS // 2)]}
    return json.dumps(doc, indent=None).encode()


@cache
def base_traces() -> tuple[bytes, ...]:
    """Decompressed JSON of the real traces the mutations start from (cut to a few hundred events)."""
    paths = sorted(SAMPLES.glob("*.pt.trace.json.gz"))
    if CORPUS_KINETO.is_dir():
        paths += sorted(
            p for p in CORPUS_KINETO.glob("*/*.json.gz") if p.stat().st_size <= _CORPUS_MAX_BYTES
        )
    out = []
    for p in paths:
        doc = json.loads(gzip.decompress(p.read_bytes()))
        if isinstance(doc, dict):
            out.append(_cut(doc))
    if not out:
        raise RuntimeError(f"no Kineto trace found under {SAMPLES}")
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Mutations: each takes (rng, data) and returns new bytes.

_NUMBER = re.compile(rb"(?<=[:\[,])\s*-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_ODD_NUMBERS = [
    b"-1", b"-0", b"0", b"1e308", b"-1e308", b"1e309", b"9" * 40, b"-" + b"9" * 30, b"1.5e-320",
    b"18446744073709551616", b"9223372036854775807", b"-9223372036854775808", b"4611686018427387904",
    b"1.0", b"123456789.123456789", b'"12"', b'"abc"', b"null", b"true", b"[]", b"{}", b"[1,2]",
    b'{"a":1}', b"NaN", b"Infinity", b"-Infinity", b"1e", b"01", b"+1", b".5", b"0x10",
    b"-1000000000000000000", b"-123.456", b"1E400", b"4.5e15",
]
_WRONG_VALUES = [
    None, True, 1, -1, 1.5, "x", "", [], {}, [1, 2], {"a": 1}, -(2**63), 2**64, -1e300, 1e300,
    "NaN", "-5", "9" * 30,
]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def _flip(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 16))):
        i = rng.randrange(len(b))
        b[i] = rng.choice((rng.randrange(256), b[i] ^ (1 << rng.randrange(8)), ord(rng.choice('{}[]",:\\0 '))))
    return bytes(b)


def _delete(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data))
    n = rng.choice((1, 2, 5, 30, 300, 5000))
    return data[:i] + data[i + n :]


def _duplicate(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data))
    n = rng.choice((1, 3, 40, 400, 4000))
    return data[: i + n] + data[i : i + n] + data[i + n :]


def _numbers(rng: random.Random, data: bytes) -> bytes:
    found = list(_NUMBER.finditer(data))
    if not found:
        return data
    out = bytearray()
    last = 0
    for m in sorted(rng.sample(found, min(len(found), rng.choice((1, 1, 3, 20)))), key=lambda m: m.start()):
        out += data[last : m.start()] + rng.choice(_ODD_NUMBERS)
        last = m.end()
    return bytes(out + data[last:])


def _doc(data: bytes) -> dict[str, Any] | None:
    """The trace as a dict with a list of events, or None (an earlier mutation broke it)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    ok = isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) and doc["traceEvents"]
    return doc if ok else None


def _event_field(rng: random.Random, data: bytes) -> bytes:
    """A wrong-typed or odd value for one key of some events (ph, ts, dur, args, name, ...)."""
    doc = _doc(data)
    if doc is None:
        return data
    events = doc["traceEvents"]
    key = rng.choice(("ph", "ts", "dur", "args", "name", "cat", "pid", "tid", "ts", "dur"))
    value = rng.choice([*_WRONG_VALUES, "X", "B", "s", "kernel", "python_function"])
    for e in rng.sample(events, min(len(events), rng.choice((1, 3, 50)))):
        if isinstance(e, dict):
            if rng.random() < 0.1:
                e.pop(key, None)
            else:
                e[key] = value
    return json.dumps(doc).encode()


def _physics(rng: random.Random, data: bytes) -> bytes:
    """Complete events with negative, NaN-like or absurd ts/dur (text substitution keeps them exact)."""
    doc = _doc(data)
    if doc is None:
        return data
    xs = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    for e in rng.sample(xs, min(len(xs), rng.choice((1, 5)))):
        key = rng.choice(("ts", "dur", "dur"))
        e[key] = rng.choice((-1, -0.5, -1e15, 1e300, -1e300, 2**62, 2**63, 5e18, -5e18, 4.6e15, 1.7e308))
    return json.dumps(doc).encode()


def _top_level(rng: random.Random, data: bytes) -> bytes:
    doc = _doc(data)
    if doc is None:
        return data
    choice = rng.randrange(5)
    if choice == 0:
        doc["traceEvents"] = rng.choice(_WRONG_VALUES)
    elif choice == 1:
        doc.pop("traceEvents")
    elif choice == 2:
        doc[rng.choice(("deviceProperties", "distributedInfo", "schemaVersion", "baseTimeNanoseconds", "zzz"))] = rng.choice(_WRONG_VALUES)
    elif choice == 3:
        return json.dumps(doc["traceEvents"]).encode()  # the bare array form
    else:
        events = doc["traceEvents"]
        i = rng.randrange(len(events) + 1)
        events.insert(i, rng.choice(_WRONG_VALUES))
    return json.dumps(doc).encode()


def _deep(rng: random.Random, data: bytes) -> bytes:
    """``[[[[...`` (or ``{"a":{"a":...``) thousands of levels deep inside args, in the header or after the events."""
    depth = rng.choice((100, 600, 5000, 100_000))
    closed = rng.random() < 0.7
    if rng.random() < 0.5:
        nest = b"[" * depth + (b"1" + b"]" * depth if closed else b"")
    else:
        nest = b'{"a":' * depth + (b"1" + b"}" * depth if closed else b"")
    where = rng.randrange(4)
    if where == 0:  # inside an event's args
        i = data.find(b'"args": {', rng.randrange(len(data)))
        if i < 0:
            i = data.find(b'"args": {')
        if i < 0:
            return data
        j = i + len(b'"args": {')
        return data[:j] + b'"deep": ' + nest + b", " + data[j:]
    if where == 1:  # a header key
        return b'{"deep": ' + nest + b", " + data[1:]
    if where == 2:  # a trailer key
        return data[:-1] + b', "deep": ' + nest + b"}"
    i = data.find(b'"traceEvents": [') + len(b'"traceEvents": [')  # an event of its own
    return data[:i] + nest + b", " + data[i:]


def _long_string(rng: random.Random, data: bytes) -> bytes:
    n = rng.choice((70_000, 1 << 20, 3 << 20))
    s = rng.choice((b"k" * n, b"\\u00e9" * (n // 6), b'\\"' * (n // 2)))
    key = rng.choice((b'"name": "', b'"cat": "', b'"displayTimeUnit": "'))
    i = data.find(key, rng.randrange(len(data)))
    if i < 0:
        i = data.find(key)
    if i < 0:
        return data
    j = i + len(key)
    return data[:j] + s + data[j:]


def _garbage(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data))
    junk = rng.choice((b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"}", b"]", b",", b",,", b"{}", b'"', b"\\", b"\n", b"/*x*/", b"\xc3\x28", b"\xed\xa0\x80"))
    return data[:i] + junk + data[i:]


def _tail(rng: random.Random, data: bytes) -> bytes:
    return data + rng.choice((b" ", b"x", b"{}", b"]", b"\x00", b"\n\n", b'{"traceEvents": []}'))


_MUTATORS: tuple[Callable[[random.Random, bytes], bytes], ...] = (
    _truncate, _flip, _flip, _delete, _duplicate, _numbers, _numbers, _event_field, _event_field,
    _physics, _top_level, _deep, _long_string, _garbage, _tail,
)


def mutations(seed: int) -> Iterator[bytes]:
    """An endless, reproducible sequence of mutated Kineto files (bytes, some gzip-wrapped) for ``seed``."""
    rng = random.Random(seed)
    bases = base_traces()
    while True:
        data = rng.choice(bases)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            if len(data) < 2:
                break
            data = rng.choice(_MUTATORS)(rng, data) or data
        wrap = rng.random()
        if wrap < 0.15:
            z = gzip.compress(data, compresslevel=1)
            data = z[: rng.randrange(len(z))] if rng.random() < 0.5 else z
        elif wrap < 0.2:
            data = zlib.compress(data)  # zlib, not gzip: not a gzip file
        yield data


# ---------------------------------------------------------------------------------------------
# The differential check.

@dataclass
class Outcome:
    """What one path did with one input: ``refused`` (one-line reason) or the stored summary."""

    refused: str | None
    summary: tuple[object, ...] | None
    crash: str | None = None


def _summary(store: Path) -> tuple[object, ...]:
    """Row counts and, per column, the sum of the values' hashes of every table a Kineto ingest
    fills: equal summaries mean equal rows (up to hash collisions), compared across two stores."""
    import duckdb

    con = duckdb.connect(str(store), read_only=True)
    try:
        out: list[object] = []
        for table in ("device_activity", "host_events", "rank_meta", "device_meta"):
            out.append(con.execute(f"SELECT count(*), sum(hash(COLUMNS(*))) FROM {table}").fetchone())
        return tuple(out)
    finally:
        con.close()


def run_path(path: Path, store: Path, pure: bool) -> Outcome:
    """Ingest ``path`` into a fresh ``store`` with one Kineto path (in process)."""
    import tracekit
    from tracekit.errors import TracekitError

    old = os.environ.get("TRACEKIT_PURE_PYTHON")
    os.environ["TRACEKIT_PURE_PYTHON"] = "1" if pure else "0"
    try:
        tracekit.ingest([path], store=store, format_name="kineto")
    except TracekitError as exc:
        return Outcome(str(exc), None)
    except BaseException as exc:  # what the check reports
        if isinstance(exc, KeyboardInterrupt):
            raise
        return Outcome(None, None, "".join(traceback.format_exception_only(type(exc), exc)).strip()[:500])
    finally:
        if old is None:
            os.environ.pop("TRACEKIT_PURE_PYTHON", None)
        else:
            os.environ["TRACEKIT_PURE_PYTHON"] = old
    return Outcome(None, _summary(store))


def check_both_paths(data: bytes, tmp: Path) -> tuple[Outcome, Outcome]:
    """Ingest ``data`` with both paths into fresh stores under ``tmp``; AssertionError unless
    neither crashed, every refusal is one line, and both refused or both stored the same."""
    path = tmp / "trace.json"
    path.write_bytes(data)
    outs = []
    for pure in (False, True):
        store = tmp / ("p.duckdb" if pure else "n.duckdb")
        for leftover in (store, Path(str(store) + ".wal")):
            leftover.unlink(missing_ok=True)
        outs.append(run_path(path, store, pure))
        if outs[-1].refused is not None:
            assert not store.exists(), f"a refused ingest left a store ({outs[-1].refused})"
    native, pure = outs
    for name, o in (("C", native), ("pure", pure)):
        assert o.crash is None, f"{name} path crashed: {o.crash}"
        assert o.refused is None or "\n" not in o.refused, f"{name} path: multi-line error {o.refused!r}"
    assert (native.refused is None) == (pure.refused is None), (
        f"verdicts differ: C {native.refused or 'accepted'!r}, pure {pure.refused or 'accepted'!r}"
    )
    assert native.summary == pure.summary, f"stored rows differ: C {native.summary}, pure {pure.summary}"
    return native, pure


def main(argv: list[str]) -> int:
    """``--seeds A-B --per-seed N [--save DIR]``: run the check, print disagreements, exit 1 on any."""
    import argparse
    import itertools

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--per-seed", type=int, default=30)
    ap.add_argument("--save", type=Path, help="write each failing input here")
    args = ap.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    n = failures = refused = 0
    with tempfile.TemporaryDirectory(prefix="fuzz-kineto-") as d:
        for seed in range(int(lo), int(hi or lo) + 1):
            for i, data in enumerate(itertools.islice(mutations(seed), args.per_seed)):
                n += 1
                if n % 100 == 0:
                    print(f"... {n} inputs, {refused} refused by both, {failures} failures", flush=True)
                try:
                    native, _ = check_both_paths(data, Path(d))
                    refused += native.refused is not None
                except AssertionError as exc:
                    failures += 1
                    print(f"seed {seed} #{i}: {str(exc)[:600]}", flush=True)
                    if args.save:
                        args.save.mkdir(parents=True, exist_ok=True)
                        (args.save / f"s{seed}-{i}.json").write_bytes(data)
    print(f"{n} inputs, {refused} refused by both, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
