"""Server metric rows: a capture's scrapes of the server's Prometheus endpoint, their log file and
their rows in the store.

``tracekit capture --load`` scrapes the server's ``/metrics`` during the window
(:class:`tracekit.collectors.load.prometheus.Scraper`) and writes the scrapes into the capture
directory (:data:`tracekit.ingest.SERVER_METRICS_FILE`, JSON lines: :func:`write_scrapes`); an
ingest of the directory reads them back (:func:`read_scrapes`) and stores one ``server_metric_rows``
row per sample per scrape (:func:`insert_scrapes`; view ``server_metrics``), in the run's
transaction. This module is the store side, free of HTTP; DuckDB is not imported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import TraceInputError
from tracekit.jsonl import json_objects

if TYPE_CHECKING:  # pragma: no cover
    import duckdb


@dataclass(frozen=True)
class Scrape:
    """One scrape: ``t_ns`` (Unix ns, when the request was sent) and its samples as
    ``(name, labels, value)``; ``labels`` in the exposition format, sorted (``a="1",b="x"``)."""

    t_ns: int
    samples: tuple[tuple[str, str, float], ...]


def label_text(labels: Sequence[tuple[str, str]]) -> str:
    """Labels as the exposition format writes them, sorted by name: ``engine="0",model_name="m"``."""
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels))


def write_scrapes(scrapes: Sequence[Scrape], path: str | Path) -> None:
    """Write ``scrapes`` to ``path``: one JSON object per scrape, ``{"t_ns": …, "samples": [[name,
    labels, value], …]}`` (NaN and ±Inf as JSON's ``NaN``/``Infinity``, as Python writes them)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"t_ns": s.t_ns, "samples": [list(x) for x in s.samples]}) + "\n"
                      for s in scrapes)


def read_scrapes(path: str | Path) -> list[Scrape]:
    """Read a scrape log (see :func:`write_scrapes`); raise :class:`TraceInputError` naming the line
    and the problem when it is malformed."""
    return [_scrape(path, i, doc) for i, doc in json_objects(path, "the server metrics log", "scrape")]


def _scrape(path: str | Path, i: int, doc: dict[str, Any]) -> Scrape:
    t_ns, samples = doc.get("t_ns"), doc.get("samples")
    if not isinstance(t_ns, int) or isinstance(t_ns, bool) or not isinstance(samples, list):
        raise TraceInputError(path, f"line {i}: expected {{\"t_ns\": <int>, \"samples\": [...]}}")
    rows: list[tuple[str, str, float]] = []
    for x in samples:
        if not (isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and isinstance(x[1], str)
                and isinstance(x[2], int | float) and not isinstance(x[2], bool)):
            raise TraceInputError(path, f"line {i}: a sample must be [name, labels, value]")
        rows.append((x[0], x[1], float(x[2])))
    return Scrape(t_ns, tuple(rows))


_INSERT = ("INSERT INTO server_metric_rows BY NAME SELECT $run_id AS run_id, unnest($t::BIGINT[]) AS t_ns, "
           "unnest($name::VARCHAR[]) AS name, unnest($labels::VARCHAR[]) AS labels, "
           "unnest($value::DOUBLE[]) AS value")


def insert_scrapes(con: duckdb.DuckDBPyConnection, run_id: str, scrapes: Sequence[Scrape]) -> int:
    """Insert ``scrapes`` as run ``run_id``'s ``server_metric_rows`` on ``con`` (inside the caller's
    transaction); return the number of rows. NaN values are stored as NULL."""
    t: list[int] = []
    name: list[str] = []
    labels: list[str] = []
    value: list[float | None] = []
    for s in scrapes:
        for n, lab, v in s.samples:
            t.append(s.t_ns)
            name.append(n)
            labels.append(lab)
            value.append(None if math.isnan(v) else v)
    if t:
        con.execute(_INSERT, {"run_id": run_id, "t": t, "name": name, "labels": labels, "value": value})
    return len(t)
