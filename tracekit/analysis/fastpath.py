"""Fast materialization of the library's heaviest shared results for one analyzed run.

:func:`tracekit.analysis.library.scoped` computes the shared views once per analyzed run. For
three of them the SQL definition in ``sql/*.sql`` stays the reference (it is what ``tracekit
query`` runs and what ``docs/sql.md`` documents), and this module computes the same rows faster,
side by side with it the way pyinstrument keeps a C module beside its Python reference;
``tests/test_fastpath.py`` checks that both give identical rows on a hand-made edge-case
timeline, the bundled samples and every corpus run.

* ``device_work``: stored as integer rows (in (rank, device, start, end, correlation id) order)
  plus small tables of the distinct (name, category, class) keys and streams, joined back by the
  view. Copying a million kernel-name strings into a TEMP table was most of the view's cost.
* ``busy_intervals``: the interval union is a running maximum of end times over rows sorted by
  start — ``numpy.maximum.accumulate`` instead of DuckDB's framed window aggregate, which runs on
  one thread per (rank, device) partition.
* ``chain_kernels(max_gap_ns)`` (the fusion analyzer's input): the macro's windows over every
  device row become array shifts and cumulative sums over the fusable rows only.

On the 1M-kernel benchmark run (docs/performance.md) these took the three from ≈ 0.35 + 0.35 +
1.1 s to ≈ 0.2 + 0.1 + 0.15 s. The arrays of ``_tk_device_work`` are fetched once per run and
shared (:func:`device_rows`); :func:`release` drops them.
"""

from __future__ import annotations

import itertools

import duckdb
import numpy as np

from tracekit.sql_text import quote as _lit


def materialize_device_work(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Create ``_tk_device_work`` (integer rows) with its key tables ``_tk_device_work_names``
    (distinct name, category, HLO class → kernel class, by-design flag) and ``_tk_device_streams``
    for ``run_id``, and point the ``device_work`` view at them (same columns, in order, as the
    library's view)."""
    run = _lit(run_id)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _tk_device_work_names AS
        SELECT CAST(row_number() OVER () AS INTEGER) AS key, name, category, hlo,
               kernel_class(name, category, nullif(hlo, '')) AS kernel_class,
               by_design_low_occupancy(name, kernel_class(name, category, nullif(hlo, ''))) AS by_design
        FROM (SELECT DISTINCT name, category, coalesce(hlo_category, '') AS hlo FROM kernels
              WHERE run_id = {run} AND category <> 'xla_async')""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _tk_device_streams AS
        SELECT CAST(row_number() OVER () AS INTEGER) AS skey, stream
        FROM (SELECT DISTINCT stream FROM kernels WHERE run_id = {run} AND category <> 'xla_async')""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _tk_device_work AS
        SELECT k.rank, k.device, s.skey, n.key, k.start_ns, greatest(k.dur_ns, 0) AS dur_ns,
               k.start_ns + greatest(k.dur_ns, 0) AS end_ns, k.correlation_id
        FROM kernels k
        JOIN _tk_device_work_names n ON n.name = k.name AND n.category = k.category
         AND n.hlo = coalesce(k.hlo_category, '')
        JOIN _tk_device_streams s ON s.stream IS NOT DISTINCT FROM k.stream
        WHERE k.run_id = {run} AND k.category <> 'xla_async'
        ORDER BY k.rank, k.device NULLS LAST, k.start_ns, end_ns, k.correlation_id NULLS LAST""")
    _ROWS.pop(id(con), None)
    con.execute(f"""
        CREATE OR REPLACE TEMP VIEW device_work AS
        SELECT {run} AS run_id, w.rank, w.device, s.stream, n.category, n.name, w.start_ns, w.dur_ns,
               w.end_ns, w.correlation_id, n.kernel_class, n.by_design
        FROM _tk_device_work w JOIN _tk_device_work_names n ON n.key = w.key
        JOIN _tk_device_streams s ON s.skey = w.skey""")


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Islands of rows sorted by (start, end): (index of each island's first row, island end,
    rows per island). A row starts an island when it starts after every earlier row ended."""
    cummax = np.maximum.accumulate(end)
    first = np.empty(len(start), dtype=bool)
    first[0] = True
    first[1:] = start[1:] > cummax[:-1]
    idx = np.flatnonzero(first)
    last = np.append(idx[1:], len(start)) - 1
    return idx, cummax[last], np.diff(np.append(idx, len(start)))


_BIG = np.iinfo(np.int64).max  # stands for NULL in the integer arrays (sorts last, as NULLS LAST)
_ROWS: dict[int, dict[str, np.ndarray]] = {}  # id(connection) → the rows of _tk_device_work


def _sorted_after(keys: list[np.ndarray]) -> bool:
    """Whether rows are in non-decreasing lexicographic order of ``keys`` (first key first)."""
    if len(keys[0]) < 2:
        return True
    ok = np.ones(len(keys[0]) - 1, dtype=bool)  # ties so far (equal on every earlier key)
    for k in reversed(keys):
        a, b = k[:-1], k[1:]
        ok = (b > a) | ((b == a) & ok)
    return bool(ok.all())


def device_rows(con: duckdb.DuckDBPyConnection) -> dict[str, np.ndarray]:
    """The rows of ``_tk_device_work`` as int64 arrays (rank, device, skey, key, start_ns, end_ns,
    cid; NULL device / correlation id as ``_BIG``), sorted by (rank, device, start, end,
    correlation id) — the order the table was written in, checked here and restored if DuckDB
    returned another. Fetched once per materialization and shared by the fast paths."""
    rows = _ROWS.get(id(con))
    if rows is not None:
        return rows
    cols = con.execute(f"""
        SELECT rank, coalesce(device, {_BIG}) AS device, skey, key, start_ns, end_ns,
               coalesce(correlation_id, {_BIG}) AS cid
        FROM _tk_device_work""").fetchnumpy()
    rows = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}
    order_keys = [rows[k] for k in ("rank", "device", "start_ns", "end_ns", "cid")]
    if not _sorted_after(order_keys):
        order = np.lexsort(tuple(reversed(order_keys)))
        rows = {k: v[order] for k, v in rows.items()}
    _ROWS[id(con)] = rows
    return rows


def release(con: duckdb.DuckDBPyConnection) -> None:
    """Forget the arrays fetched for ``con`` and drop the helper tables of this module (end of
    :func:`tracekit.analysis.library.scoped`, after the library views stop pointing at them)."""
    _ROWS.pop(id(con), None)
    con.execute("DROP VIEW IF EXISTS _tk_chain_kernels_full")
    for t in ("_tk_device_work_names", "_tk_device_streams", "_tk_chain_kernels"):
        con.execute(f"DROP TABLE IF EXISTS {t}")


def materialize_busy_intervals(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Create ``_tk_busy_intervals`` for ``run_id`` from ``device_work`` (materialized first) and
    point the ``busy_intervals`` view at it. Same rows as the SQL view: islands per (rank, device)
    in time order, each with its row count and the correlation id of its earliest row, rows
    ordered by (start, end, correlation id, NULLs last) as the view orders them."""
    r = device_rows(con)
    rank, device, start, end, cid = r["rank"], r["device"], r["start_ns"], r["end_ns"], r["cid"]
    n = len(start)
    cuts = np.flatnonzero((rank[1:] != rank[:-1]) | (device[1:] != device[:-1])) + 1
    bounds = np.concatenate(([0], cuts, [n])).astype(np.int64) if n else np.zeros(1, np.int64)
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("rank", "device", "island", "start_ns", "end_ns",
                                                         "n_rows", "cid")}
    for a, b in itertools.pairwise(bounds.tolist()):
        idx, iend, nrows = _union(start[a:b], end[a:b])
        out["rank"].append(rank[a + idx])
        out["device"].append(device[a + idx])
        out["island"].append(np.arange(1, len(idx) + 1, dtype=np.int64))
        out["start_ns"].append(start[a + idx])
        out["end_ns"].append(iend)
        out["n_rows"].append(nrows.astype(np.int64))
        out["cid"].append(cid[a + idx])
    islands = {k: (np.concatenate(v) if v else np.empty(0, dtype=np.int64)) for k, v in out.items()}
    con.register("_tk_islands", islands)  # (outside any transaction: unregistered at once)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _tk_busy_intervals AS
        SELECT {_lit(run_id)} AS run_id, CAST(rank AS INTEGER) AS rank,
               CAST(nullif(device, {_BIG}) AS INTEGER) AS device, island, start_ns, end_ns,
               end_ns - start_ns AS dur_ns, n_rows, nullif(cid, {_BIG}) AS first_correlation_id
        FROM _tk_islands""")
    con.unregister("_tk_islands")
    con.execute("CREATE OR REPLACE TEMP VIEW busy_intervals AS SELECT * FROM _tk_busy_intervals")


def chain_kernels(con: duckdb.DuckDBPyConnection, run_id: str, max_gap_ns: int, min_kernels: int = 1) -> str:
    """The rows of the library's ``chain_kernels(max_gap_ns)`` table macro for ``run_id``: a TEMP
    view ``_tk_chain_kernels_full`` with the macro's columns, over a TEMP table
    ``_tk_chain_kernels`` that keeps the stream and the name as integer keys (``skey`` of
    ``_tk_device_streams``, ``key`` of ``_tk_device_work_names``); returns the view's name. Needs
    ``device_work`` materialized by :func:`materialize_device_work` (analyze's scope); without
    it, returns the macro call itself. With ``min_kernels`` > 1, returns a subquery of the rows
    whose chain has at least that many kernels (what ``kernel_chains`` and fusion keep: most
    chains are one kernel, and leaving them out before any grouping is most of the saving).

    The macro's windows (previous row of the stream, running count of non-fusable rows) run on one
    thread per stream over every device row; here they are array shifts and cumulative sums over
    rows sorted by (rank, device, stream, start, end, correlation id) — the macro's order."""
    try:
        a = device_rows(con)  # sorted by (rank, device, start, end, cid): a stable sort on the
    except duckdb.CatalogException:  # stream within (rank, device) gives the macro's order
        macro = f"chain_kernels({int(max_gap_ns)})"
        return macro if min_kernels <= 1 else (
            f"(SELECT * FROM {macro} QUALIFY count(*) OVER "
            f"(PARTITION BY run_id, rank, device, stream, chain) >= {int(min_kernels)})")
    big = _BIG
    fus = con.execute(f"""
        SELECT n.key, fusable_kernel(n.name, n.category, n.kernel_class,
                                     (SELECT any_value(format) FROM runs WHERE run_id = {_lit(run_id)}))
        FROM _tk_device_work_names n""").fetchall()
    fusable_by_key = np.zeros(max((k for k, _ in fus), default=0) + 1, dtype=bool)
    for k, f in fus:
        fusable_by_key[k] = bool(f)
    n = len(a["start_ns"])
    # stream order: a stable sort on (device partition, stream) of rows already in time order
    comp = np.zeros(n, dtype=np.int64)
    if n:
        comp[1:] = np.cumsum((a["rank"][1:] != a["rank"][:-1]) | (a["device"][1:] != a["device"][:-1]))
        comp = comp * (int(a["skey"].max()) + 1) + a["skey"]
    if n and bool((comp[1:] < comp[:-1]).any()):
        order = np.argsort(comp, kind="stable")
        comp = comp[order]
        fusable = fusable_by_key[a["key"]][order]
    else:
        order = None
        fusable = fusable_by_key[a["key"]] if n else np.zeros(0, dtype=bool)
    keep = np.flatnonzero(fusable)  # sorted positions p of the fusable rows
    nk = len(keep)
    pos = np.arange(nk, dtype=np.int64)
    prev = np.maximum(keep - 1, 0)
    first = (keep == 0) | (comp[keep] != comp[prev])  # first row of its (rank, device, stream)
    src = keep if order is None else order[keep]  # → rows of device_rows
    src_prev = prev if order is None else order[prev]
    start, end = a["start_ns"][src], a["end_ns"][src]
    gap = start - a["end_ns"][src_prev]
    # the previous row of the stream is fusable when it is the previous kept row
    prev_fusable = ~first & (pos > 0) & (np.append(-2, keep[:-1]) == keep - 1)
    gap_break = prev_fusable & (gap > max_gap_ns)
    chain_start = ~prev_fusable | (gap > max_gap_ns)
    # seg (the macro's running count of non-fusable rows in the stream): non-fusable rows before
    # p, minus those before the stream's first row q; rows before p = p, fusable ones = pos
    starts = np.flatnonzero(np.append(True, comp[1:] != comp[:-1])) if n else np.zeros(0, dtype=np.int64)
    q = starts[np.searchsorted(starts, keep, side="right") - 1] if nk else keep
    seg = (keep - pos) - (q - np.searchsorted(keep, q))
    # gap breaks so far within the (stream, seg); a seg starts where the previous row is not fusable
    seg_first = ~prev_fusable
    brk = np.cumsum(gap_break, dtype=np.int64)
    seg_no = np.cumsum(seg_first) - 1
    chain = seg * 1048576 + (brk - (brk - gap_break)[seg_first][seg_no] if nk else brk)
    # a chain is a run of consecutive kept rows that starts at a chain_start
    run_no = np.cumsum(chain_start) - 1
    n_in_chain = np.bincount(run_no)[run_no] if nk else np.zeros(0, dtype=np.int64)
    chain_rows = {"rank": a["rank"][src], "device": a["device"][src], "skey": a["skey"][src],
                  "key": a["key"][src], "start_ns": start, "end_ns": end, "cid": a["cid"][src],
                  "gap": gap, "gap_null": first, "chain_start": chain_start, "chain": chain.astype(np.int64),
                  "n_in_chain": n_in_chain.astype(np.int64)}
    con.register("_tk_chain_rows", chain_rows)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _tk_chain_kernels AS
        SELECT CAST(r.rank AS INTEGER) AS rank, CAST(nullif(r.device, {big}) AS INTEGER) AS device,
               CAST(r.skey AS INTEGER) AS skey, CAST(r.key AS INTEGER) AS key, r.start_ns,
               r.end_ns - r.start_ns AS dur_ns, r.end_ns, nullif(r.cid, {big}) AS correlation_id,
               CASE WHEN r.gap_null THEN NULL ELSE r.gap END AS gap_before_ns, r.chain_start, r.chain,
               r.n_in_chain
        FROM _tk_chain_rows r""")
    con.unregister("_tk_chain_rows")
    # the macro's columns (strings joined back by key; fusion reads the integer table above)
    con.execute(f"""
        CREATE OR REPLACE TEMP VIEW _tk_chain_kernels_full AS
        SELECT {_lit(run_id)} AS run_id, c.rank, c.device, s.stream, n.name, n.name_hash, n.kernel_class,
               c.start_ns, c.dur_ns, c.end_ns, c.correlation_id, c.gap_before_ns, c.chain_start, c.chain
        FROM (SELECT * FROM _tk_chain_kernels WHERE n_in_chain >= {int(min_kernels)}) c JOIN (SELECT *, hash(name) AS name_hash FROM _tk_device_work_names) n
          ON n.key = c.key
        JOIN _tk_device_streams s ON s.skey = c.skey""")
    return "_tk_chain_kernels_full"


#: library view name → fast materializer (the view must come after the ones it reads).
FAST = {"device_work": materialize_device_work, "busy_intervals": materialize_busy_intervals}
