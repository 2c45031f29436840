"""tracekit in a notebook: a store and its runs as objects whose methods return pandas DataFrames,
in the spirit of HTA's ``TraceAnalysis`` (every answer a DataFrame) — but over a stored run, any
vendor, read with the same documented SQL views the analyzers and the CLI use::

    import tracekit
    store = tracekit.Store("tracekit.duckdb")     # a store file or a lake: URL
    run = store.run("3fa2")                       # a run id or a unique prefix
    run.kernel_time_by_class()                    # DataFrame: class, kernels, time_ns, share
    run.findings()                                # analyzed on first use, like `tracekit report`
    store.compare("3fa2", "9b01").categories      # device time per category, B − A

Every method opens the store read-only for its one statement (so a notebook never holds the
store's writer lock), except :meth:`Run.findings` / :meth:`Run.metrics`, which analyze a run that
never was (``analyze=False`` to only read). Times are integer nanoseconds (``*_ns``), shares are
fractions 0..1. pandas is needed (``pip install pandas``; the CLI does not import it).
Objects show a summary in Jupyter (``_repr_html_``).
"""

from __future__ import annotations

import html
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import ConfigError
from tracekit.queries import RUNS_SQL
from tracekit.store import open_store, resolve_run_id, resolve_store

if TYPE_CHECKING:
    import duckdb

#: a ``pandas.DataFrame`` (pandas is optional and ships no type stubs)
DataFrame = Any

__all__ = ["Comparison", "Run", "Store"]


def _pandas() -> Any:
    try:
        return importlib.import_module("pandas")  # an optional dependency: no stubs required
    except ImportError:
        raise ConfigError("pandas", "the notebook API returns pandas DataFrames: pip install pandas") from None


@contextmanager
def _reading(path: str | Path, library: bool = False, run_id: str | None = None
             ) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection; with ``library`` the SQL library installed (scoped to ``run_id``:
    its views compute that run only)."""
    with open_store(path, read_only=True) as con:
        if library:
            from tracekit.analysis import library as lib

            lib.install(con)
            if run_id is not None:
                con.execute("SET VARIABLE tracekit_run = ?", [run_id])
        yield con


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | dict[str, Any] | None = None
           ) -> DataFrame:
    _pandas()
    return con.execute(sql, params or []).df()


class Store:
    """A tracekit store (a file path or a ``lake:`` URL; default ``$TRACEKIT_STORE`` or
    ``./tracekit.duckdb``)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = resolve_store(path)

    def runs(self) -> DataFrame:
        """One row per run, newest first: format, vendor, device, label, workload, ranks, device
        events, device time and span (ms), capture and ingest times, source."""
        with _reading(self.path) as con:
            return _frame(con, RUNS_SQL)

    def run(self, run_id: str) -> Run:
        """The run ``run_id`` (a unique prefix is enough)."""
        with _reading(self.path) as con:
            return Run(self, resolve_run_id(con, run_id, self.path))

    def query(self, sql: str, params: list[Any] | dict[str, Any] | None = None) -> DataFrame:
        """One read-only SQL statement over the store's views and the SQL library (docs/sql.md)."""
        with _reading(self.path, library=True) as con:
            return _frame(con, sql, params)

    def compare(self, a: str | Run, b: str | Run) -> Comparison:
        """Run B against run A (:func:`tracekit.compare.compare_runs`) as DataFrames."""
        from tracekit.compare import compare_runs

        ids = [x.id if isinstance(x, Run) else x for x in (a, b)]
        result = compare_runs(ids[0], ids[1], self.path)
        pandas = _pandas()

        def df(rows: Any) -> DataFrame:
            cols, data = rows
            return pandas.DataFrame.from_records(data, columns=cols)

        return Comparison(result["a"], result["b"], df(result["categories"]), df(result["top_kernels"]),
                          df(result["serving"]) if result.get("serving") else pandas.DataFrame())

    def portfolio(self, *, workload: str | None = None, model: str | None = None, sweep: str | None = None,
                  price_sheet: str | Path | None = None, min_speed: float = 50.0) -> DataFrame:
        """The portfolio's points (:func:`tracekit.portfolio.portfolio`, docs/portfolio.md): one row
        per load-driven run with its series (hardware · precision), tokens/s per user and per
        device, USD per 1M output tokens, whether it is on the throughput / cost frontier, and the
        run's limiting finding; the band's answer in ``DataFrame.attrs["answer"]``.
        ``price_sheet``: ``rented``, ``owned`` or a price sheet file (default rented)."""
        from tracekit.analysis import library
        from tracekit.portfolio import portfolio
        from tracekit.portfolio import price_sheet as prices_of

        with _reading(self.path) as con:
            library.install(con)
            pf = portfolio(con=con, workload=workload, model=model, sweep=sweep, prices=prices_of(price_sheet),
                           min_speed=min_speed)
        doc = pf.as_dict()
        out = _pandas().DataFrame.from_records(doc["points"])
        out.attrs["answer"] = doc["answer"]
        return out

    def __repr__(self) -> str:
        return f"tracekit.Store({str(self.path)!r})"

    def _repr_html_(self) -> str:
        runs = self.runs()
        head = f"<p><b>tracekit store</b> <code>{html.escape(str(self.path))}</code>: {len(runs)} runs</p>"
        cols = ["run_id", "format", "device_name", "workload", "label", "ranks", "device_time_ms", "captured_at"]
        return head + str(runs[cols].head(20).to_html(index=False, na_rep="—"))


class Run:
    """One stored run. Methods return DataFrames of its rows in the documented views."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.id = run_id

    def _read(self, sql: str, *, library: bool = True) -> DataFrame:
        """``sql`` with the run id as its one parameter (``?`` / ``$1``)."""
        with _reading(self.store.path, library=library, run_id=self.id) as con:
            return _frame(con, sql, [self.id])

    def kernels(self, top: int | None = None) -> DataFrame:
        """One row per kernel name (all ranks, devices and streams), most time first: its class
        (docs/findings.md), calls, total/mean/min/max duration (ns) and share of the run's device
        kernel time (``device_work``: kernels, copies and memsets; XLA async spans left out)."""
        limit = f"LIMIT {int(top)}" if top is not None else ""
        return self._read(f"""
            SELECT name, any_value(kernel_class) AS kernel_class, count(*) AS calls,
                   sum(dur_ns)::BIGINT AS time_ns, avg(dur_ns) AS mean_ns, min(dur_ns) AS min_ns,
                   max(dur_ns) AS max_ns, sum(dur_ns) / sum(sum(dur_ns)) OVER () AS share
            FROM device_work WHERE run_id = ? GROUP BY name ORDER BY time_ns DESC, name {limit}""")

    def kernel_time_by_class(self) -> DataFrame:
        """Device time per kernel class (gemm, attention, communication, …): rows, time (ns) and
        share of the run's device time (view ``device_time_by_class``)."""
        return self._read("""SELECT kernel_class, n_rows, time_ns, time_fraction AS share
                             FROM device_time_by_class WHERE run_id = ? ORDER BY time_ns DESC, kernel_class""")

    def idle_gaps(self) -> DataFrame:
        """The device's idle gaps inside the run window with their cause (view ``idle_gaps``:
        DataLoader, compilation, a sync API, host work, launch overhead, …), longest first."""
        return self._read("SELECT * FROM idle_gaps WHERE run_id = ? ORDER BY dur_ns DESC, rank, device, start_ns")

    def steps(self) -> DataFrame:
        """The run's steps (view ``steps``: serving step markers, ``ProfilerStep#N``, XPlane steps)
        with phase, batch, tokens and the device time of each step's own work."""
        return self._read("SELECT * FROM steps WHERE run_id = ? ORDER BY rank, host_start_ns")

    def op_costs(self) -> DataFrame:
        """XLA's per-op cost model of an XPlane run (view ``op_costs``: FLOPs, bytes accessed, HBM
        bytes per op metadata), joined to the op's executions: count and device time (ns). Empty
        for formats without a cost model (Kineto FLOPs are per framework op: :meth:`ops`)."""
        return self._read("""
            SELECT c.*, e.executions, e.time_ns FROM op_costs c
            LEFT JOIN (SELECT rank, device, op_metadata_id, count(*) AS executions,
                              sum(coalesce(device_dur_ns, dur_ns))::BIGINT AS time_ns
                       FROM kernels WHERE run_id = $1 AND op_metadata_id IS NOT NULL GROUP BY ALL) e
              USING (rank, device, op_metadata_id)
            WHERE c.run_id = $1 ORDER BY e.time_ns DESC NULLS LAST""")

    def ops(self) -> DataFrame:
        """Framework ops (view ``ops``) per name: calls, host time (ns), FLOPs when profiled."""
        return self._read("""SELECT name, count(*) AS calls, sum(dur_ns)::BIGINT AS time_ns, sum(flops) AS flops
                             FROM ops WHERE run_id = ? GROUP BY name ORDER BY time_ns DESC, name""")

    def _analyzed(self, analyze: bool) -> None:
        if analyze:
            from tracekit.run_analysis import ensure_analyzed

            ensure_analyzed(self.id, self.store.path)

    def findings(self, analyze: bool = True) -> DataFrame:
        """The analyzers' findings, most severe and largest saving first (view ``findings``);
        a run never analyzed is analyzed first unless ``analyze=False``."""
        self._analyzed(analyze)
        return self._read("""
            SELECT severity, analyzer, title, detail, saving_ns, saving_fraction, evidence FROM findings
            WHERE run_id = ?
            ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 WHEN 'info' THEN 2 ELSE 3 END,
                     saving_ns DESC NULLS LAST, analyzer, title""", library=False)

    def metrics(self, analyze: bool = True) -> DataFrame:
        """The analyzers' metrics (view ``metrics``: name, value, unit, which way is better)."""
        self._analyzed(analyze)
        return self._read("SELECT analyzer, name, value, unit, better FROM metrics WHERE run_id = ? "
                          "ORDER BY analyzer, name", library=False)

    def requests(self) -> DataFrame:
        """The load driver's requests (view ``requests``: TTFT, TPOT, e2e in ns, tokens, the agentic
        session and turn, prefix-cache hits), in the order they were sent."""
        return self._read("SELECT * FROM requests WHERE run_id = ? ORDER BY request_id", library=False)

    def server_metrics(self) -> DataFrame:
        """The server's Prometheus samples scraped during the window (view ``server_metrics``)."""
        return self._read("SELECT * FROM server_metrics WHERE run_id = ? ORDER BY t_ns, name, labels", library=False)

    def ttft_by_turn(self) -> DataFrame:
        """TTFT percentiles (ms) per turn of the agentic load profile (view ``ttft_by_turn``)."""
        return self._read("SELECT * FROM ttft_by_turn WHERE run_id = ? ORDER BY turn")

    def query(self, sql: str) -> DataFrame:
        """A read-only statement with the SQL library scoped to this run; ``$1`` is its run id."""
        return self._read(sql)

    def __repr__(self) -> str:
        return f"tracekit.Run({self.id!r}, store={str(self.store.path)!r})"

    def _repr_html_(self) -> str:
        from tracekit import formatting as fmt
        from tracekit.analysis.overview import run_overview

        with _reading(self.store.path, library=True, run_id=self.id) as con:
            ov = run_overview(con, self.id)
        rows = [("run", ov.run_id), ("format", ov.format), ("device", ov.device_text), ("ranks", str(ov.ranks)),
                ("span", fmt.duration_ns(ov.span_ns) if ov.span_ns else "—"),
                ("device kernel time", fmt.duration_ns(ov.kernel_time_ns))]
        if ov.incomplete:
            rows.append(("incomplete", ov.incomplete))
        out = ["<table>", *(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                            for k, v in rows), "</table>"]
        if ov.kernels:
            out.append("<p><b>top kernels</b></p><table><tr><th>kernel</th><th>class</th><th>calls</th>"
                       "<th>time</th><th>share</th></tr>")
            out += [f"<tr><td title='{html.escape(k.name)}'>{html.escape(k.short)}</td><td>{html.escape(k.kernel_class)}"
                    f"</td><td>{k.calls}</td><td>{fmt.duration_ns(k.time_ns)}</td><td>{k.share:.1%}</td></tr>"
                    for k in ov.kernels]
            out.append("</table>")
        if ov.findings:
            out.append("<p><b>top findings</b></p><ul>")
            out += [f"<li>[{html.escape(f['severity'])}] {html.escape(f['analyzer'])}: {html.escape(f['title'])}</li>"
                    for f in ov.findings]
            out.append("</ul>")
        elif not ov.analyzed:
            out.append("<p>not analyzed yet: <code>run.findings()</code> analyzes it</p>")
        return "\n".join(out)


@dataclass
class Comparison:
    """Run B against run A: ``categories`` (device time per category and the change),
    ``top_kernels`` (the kernels whose time changed most per category), ``serving`` (the
    serving metrics side by side, empty unless both runs were load-driven)."""

    a: str
    b: str
    categories: DataFrame
    top_kernels: DataFrame
    serving: DataFrame

    def _repr_html_(self) -> str:
        head = f"<p><b>B</b> <code>{html.escape(self.b)}</code> against <b>A</b> <code>{html.escape(self.a)}</code></p>"
        return head + str(self.categories.to_html(index=False, na_rep="—"))
