"""The ``tracekit`` command line: a thin Typer + Rich layer over :mod:`tracekit`'s Python API.

Exit codes: 0 ok; 2 bad input or usage (one line ``error: <path>: <reason>`` on stderr, store
untouched); 1 a failed check (``tracekit check`` found a regression).

No ``from __future__ import annotations`` here: Typer would evaluate every command's annotation
strings at each start (0.015 s of the CLI's start-up for 23 commands); real annotations cost
nothing.
"""

import csv
import datetime as dt
import decimal
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, Self, cast

import typer

from tracekit import __version__
from tracekit.cli.lake import lake_app
from tracekit.cli.params import BadValue, OneLineErrorsGroup, choice, either, int_range, option_group
from tracekit.errors import TracekitError

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from tracekit.check import CheckResult
    from tracekit.check.gate import CheckConfig
    from tracekit.cli.startup import Startup
    from tracekit.collectors.capture import CaptureResult, CaptureSpec, CaptureStatus
    from tracekit.collectors.load import LoadSpec
    from tracekit.store import StoreLocation

app = typer.Typer(
    name="tracekit",
    cls=OneLineErrorsGroup,
    help="Profiler analyzer for LLM inference: ingest XPlane, Nsight Systems, rocprof and PyTorch profiler traces "
    "into one DuckDB store and query them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(lake_app, name="lake")


def _store(store: str | None) -> "StoreLocation":
    """The store a command uses: ``--store``, else ``$TRACEKIT_STORE`` or ./tracekit.duckdb; a
    lake URL stays text (:func:`tracekit.store.resolve_store`)."""
    from tracekit.store import resolve_store  # DuckDB loads here, not at start-up

    return resolve_store(store)


class _LazyConsole:
    """A Rich console made on first use: a ``--json`` ingest never imports Rich (~20 ms)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def real(self) -> "Console":
        """The console itself: what Rich's Progress/Status need (they use it as a context
        manager, which a proxy's __getattr__ cannot provide)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


_out = _LazyConsole(highlight=False, soft_wrap=True)
_err = _LazyConsole(stderr=True, highlight=False, soft_wrap=True)
out = cast("Console", _out)
err = cast("Console", _err)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="TRACEKIT_STORE",
        help="DuckDB store file (default: ./tracekit.duckdb, or $TRACEKIT_STORE), or a team lake: "
        "lake:postgresql://[USER@]HOST[:PORT]/DB?data=DIR_OR_S3_URL or lake:sqlite:///CATALOG?data=DIR "
        "(docs/team-store.md).",
        show_default=False,
    ),
]


ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Overwrite an existing output file. Never needed for a new file, and never enough to "
        "overwrite a tracekit store (or its .wal), a directory or a device/fifo/socket.",
    ),
]


ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model the run served, to cost each step by what it must move (decode MBU, prefill "
        "MFU): a catalog name (gpt-oss-20b, qwen3-8b, llama-3.1-8b, … docs/models.md) or a Hugging "
        "Face config.json path.",
        show_default=False,
    ),
]
TpOpt = Annotated[
    int | None,
    typer.Option("--tp", help="With --model: tensor-parallel ranks the weights are split over "
                 "(default: the trace's world size, else 1).", show_default=False,
                 callback=int_range(1, None, "expected a positive number of ranks")),
]
WeightsOpt = Annotated[
    str | None,
    typer.Option("--weights", help="With --model: weight storage, bf16|fp8|mxfp4|int8|int4 (default: the "
                 "model's own).", show_default=False),
]
KvCacheOpt = Annotated[
    str | None,
    typer.Option("--kv-cache", help="With --model: KV-cache dtype, bf16|fp8 (default bf16).", show_default=False),
]


class ModelChoice(NamedTuple):
    """``--model``, ``--tp``, ``--weights``, ``--kv-cache`` (ingest, analyze, capture): the model a
    run served, attached to its runs after they are stored."""

    model: ModelOpt = None
    tp: TpOpt = None
    weights: WeightsOpt = None
    kv_cache: KvCacheOpt = None

    def check(self) -> None:
        """Refuse a bad choice before anything is written (``--tp`` is checked by the parser)."""
        if self.model is None:
            if self.tp is not None or self.weights is not None or self.kv_cache is not None:
                fail("--tp, --weights and --kv-cache describe a --model: give --model too")
            return
        from tracekit.analysis import models

        try:
            models.load(self.model, weights=self.weights, kv_cache=self.kv_cache)
        except models.ModelError as exc:
            fail(str(exc) if str(exc).startswith(self.model) else f"{self.model}: {exc}")

    def attach(self, run_ids: Sequence[str], store: str | Path | None) -> None:
        """Attach the model to ``run_ids`` (nothing without ``--model``), saying so on stderr."""
        if self.model is None:
            return
        from tracekit.api import attach_model

        for rid in run_ids:
            got = attach_model(rid, self.model, store, tp=self.tp, weights=self.weights, kv_cache=self.kv_cache)
            err.print(f"{rid}: model {got['model']} ({got['origin']}), TP {got['tensor_parallel']} "
                      f"({got['tp_source']})", markup=False)


#: No ``--model``: what a command's ``model_choice`` holds when called from Python without one.
NO_MODEL = ModelChoice()


def fail(message: str, code: int = 2) -> None:
    """Print one ``error:`` line on stderr and exit with ``code``."""
    err.print(f"error: {message}", markup=False, highlight=False)
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        from tracekit.parsers.native import status_line

        sys.stdout.write(f"tracekit {__version__}\n{status_line()}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True,
                     help="Print the version and which native (C) helpers are active.")
    ] = False,
) -> None:
    """tracekit: one DuckDB schema for LLM-inference profiles from TPUs, AMD and NVIDIA GPUs."""


def _parse_tags(tags: list[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for t in tags:
        key, sep, value = t.partition("=")
        if not sep or not key:
            fail(f"--tag {t}: expected KEY=VALUE")
        parsed[key] = value
    return parsed


def _parse_when(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        fail(f"--captured-at {text}: expected an ISO 8601 date/time, e.g. 2026-11-02T10:00:00")
        raise


@app.command()
@option_group("model_choice", ModelChoice)
def ingest(  # noqa: PLR0913 - one parameter per CLI option
    ctx: typer.Context,
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Trace files or directories. Each PATH becomes one run; a directory's trace "
            "files (e.g. one per rank) together form one run.",
            show_default=False,
            metavar="PATH...",
        ),
    ],
    store: StoreOpt = None,
    label: Annotated[str | None, typer.Option(help="Free-text label for the run(s), e.g. a git sha.")] = None,
    workload: Annotated[
        str | None, typer.Option(help="Workload name the run belongs to, e.g. 'llama3-8b-decode-bs8'.")
    ] = None,
    tag: Annotated[list[str], typer.Option("--tag", help="KEY=VALUE tag; repeat for more.")] = [],  # noqa: B006
    format_name: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="Force the input format instead of detecting it: kineto, xplane, nsys (Nsight Systems SQLite "
            "export, or a .nsys-rep with nsys on PATH), rocpd, rpd, rocprofv3 (CSV) or rocprofv3_json.",
        ),
    ] = None,
    python_events: Annotated[
        bool,
        typer.Option(
            "--python-events",
            help="Also store Python-stack events (Kineto python_function, the XLA Python tracer) as "
            "host events of category 'python'; by default they are only counted.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON for scripts.")] = False,
    captured_at: Annotated[
        str | None,
        typer.Option(
            "--captured-at",
            help="Capture time of the run(s), ISO 8601 (e.g. 2026-11-02T10:00:00; UTC unless an offset "
            "is given); replaces the time read from the trace.",
        ),
    ] = None,
    one_run: Annotated[
        bool,
        typer.Option(
            "--one-run",
            help="Ingest a directory as one run even when its files look like separate captures "
            "(ranks recorded on one host more than a second apart, e.g. decode_* and prefill_* side by "
            "side), which is refused by default.",
        ),
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray", metavar="ADDRESS",
            help="Backfill on Ray (needs pip install 'tracekit\\[ray]'; slow to start: 7-21 s and over 1 GB for a "
            "local instance on 2 cores): one task per run parses and analyzes it. ADDRESS: 'local' (a private instance "
            "on every core), 'auto' (the cluster 'ray start' began here), or HOST:PORT / ray://HOST:PORT. "
            "Into a lake each task commits its own run (a bad input fails only its run); into a store file "
            "all runs are copied in one transaction, which needs every worker on this machine (not ray://). "
            "Workers must read the PATHs at the same absolute paths (this machine or a shared file system).",
        ),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs", "-j", min=0, max=64,
            help="Parse this many runs at once in separate processes (0: one per core), then store them "
            "(a store file: in one transaction); each process may use TRACEKIT_MEMORY_LIMIT. Pays off with "
            "--analyze (each process analyzes its runs: 1.95x on 2 cores) and into a lake; a plain ingest into "
            "a store file copies the staged rows again, which costs most of what it saves (docs/performance.md).",
        ),
    ] = 1,
    analyze_new: Annotated[
        bool,
        typer.Option("--analyze", help="Also run the analyzers on the new runs and store their findings with them "
                     "(one transaction); with --jobs each process analyzes the runs it parsed (docs/performance.md)."),
    ] = False,
    model_choice: ModelChoice = NO_MODEL,
) -> None:
    """Ingest traces into the store (one transaction) and print the run id of each PATH.

    Re-ingesting identical content returns the existing run id instead of a duplicate.
    """
    from tracekit.ingest import ingest as do_ingest
    from tracekit.store import lock_wait_notice

    read_ahead = getattr(ctx.obj, "read_ahead", None)  # what cli/startup.py started

    model_choice.check()
    tags = _parse_tags(tag)
    when = _parse_when(captured_at) if captured_at is not None else None
    show_progress = not as_json and err.is_terminal
    store_path = _store(store)
    fan_out: dict[str, Any] = {"jobs": jobs}
    if analyze_new and model_choice.model is None and ray is None:  # a model is attached after the ingest
        from tracekit.api import analyze_open

        fan_out["analyze"] = analyze_open
    if ray is not None:  # the tasks analyze their runs too (not with --model: it is attached afterwards)
        from tracekit.api import analyze_runs

        fan_out.update(ray=ray, ray_analyze=analyze_runs if model_choice.model is None else None)
    found: dict[str, tuple[str, list[str], list[tuple[Any, ...]]]] = {}
    summarize = None
    if not as_json:
        # the summary is queried on the ingest's own connection before it commits: no second
        # DuckDB instance (0.04 s)

        def summarize(con: Any, results: list[Any]) -> None:
            from tracekit.api import top_activity

            for r in results:
                if r.created:
                    found[r.run_id] = top_activity(r.run_id, con=con)

    try:
        if show_progress:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            with Progress(
                SpinnerColumn(),
                TextColumn("ingesting"),
                BarColumn(),
                DownloadColumn(),
                TextColumn("{task.fields[events]:,} events"),
                TimeElapsedColumn(),
                console=_err.real(),
                transient=True,
            ) as prog:
                task = prog.add_task("ingest", total=None, events=0)

                def advance(n_events: int, n_bytes: int) -> None:
                    events = prog.tasks[0].fields["events"] + n_events
                    prog.update(task, advance=n_bytes, events=events)

                results = do_ingest(
                    paths, store_path, label=label, workload=workload, tags=tags,
                    format_name=format_name,
                    progress=advance,
                    on_start=lambda total: prog.update(task, total=total),
                    python_events=python_events, captured_at=when,
                    on_lock_wait=lambda: err.print(lock_wait_notice(store_path), markup=False),
                    before_commit=summarize, one_run=one_run, read_ahead=read_ahead, **fan_out,
                )
        else:
            results = do_ingest(
                paths, store_path, label=label, workload=workload, tags=tags, format_name=format_name,
                python_events=python_events, captured_at=when, before_commit=summarize, one_run=one_run,
                read_ahead=read_ahead, **fan_out,
                # on stderr in every mode (--json too: stdout carries only the JSON)
                on_lock_wait=lambda: print(lock_wait_notice(store_path), file=sys.stderr, flush=True),
            )
        model_choice.attach([r.run_id for r in results], store_path)
        if analyze_new and "analyze" not in fan_out and ray is None:  # with --model: analyzed once it is attached
            from tracekit.api import analyze_runs as analyze_stored

            analyze_stored([r.run_id for r in results if r.created], store_path)
    except TracekitError as exc:
        fail(str(exc))
        return
    for r in results:
        for w in r.warnings:
            sys.stderr.write(f"warning: {r.source}: {w}\n")
    if as_json:
        sys.stdout.write(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
        return
    runs = [
        (
            r.run_id,
            "new" if r.created else "already in store" + (f" ({', '.join(r.updated)} updated)" if r.updated else ""),
            r.vendor,
            r.device_name or "",
            str(r.n_files),
            f"{r.n_device_events:,}" if r.created else "",
            f"{r.n_host_events:,}" if r.created else "",
        )
        for r in results
    ]
    columns = ["run", "status", "vendor", "device", "files", "device events", "host events"]
    _print_table(f"ingested into {store_path}", columns, runs, right={"files", "device events", "host events"})
    for run_id, (title, cols, rows) in found.items():  # what each new run holds
        _print_table(f"{run_id}: {title}", *_activity_cells(cols, rows), right={"calls", "time", "share"})
    sys.stdout.write("".join(f"{r.run_id}\n" for r in results))


def _activity_cells(cols: list[str], rows: Sequence[tuple[Any, ...]]) -> tuple[list[str], list[tuple[str, ...]]]:
    """:func:`tracekit.api.top_activity` rows for people: short names, scaled times, shares in %."""
    from tracekit import formatting
    from tracekit.names import short_kernel_names

    shorts = short_kernel_names([str(r[0]) for r in rows], 48)
    out_cols = ["name", "calls", "time", "share"][: len(cols)]
    cells = [(n, formatting.count(r[1]), formatting.duration(r[2], "ms"),
              *([formatting.percent(None if r[3] is None else r[3] / 100)] if len(r) > 3 else []))
             for n, r in zip(shorts, rows)]
    return out_cols, cells


def _print_table(title: str, columns: list[str], rows: Sequence[tuple[str, ...]], right: set[str]) -> None:
    """A summary table on stderr: Rich on a terminal; plain aligned text otherwise (CI logs,
    files), which also spares the ~0.04 s of loading Rich. Names come shortened
    (:func:`tracekit.names.short_kernel_names`)."""
    if sys.stderr.isatty():
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for c in columns:
            if c == "name":
                table.add_column(c, overflow="ellipsis", no_wrap=True)
            else:
                table.add_column(c, justify="right" if c in right else "left", overflow="fold")
        for row in rows:
            table.add_row(*row)
        err.print(table)
        return
    from tracekit.cli.render import text_table

    sys.stderr.write(text_table(columns, rows, right=right, title=title))


def _cell(v: Any) -> Any:
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): _cell(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_cell(x) for x in v]
    return v


#: Columns a table never wraps or cuts: an id is copied whole (at any terminal width, in logs too).
WHOLE_COLUMNS = frozenset({"run_id"})


#: Table cells longer than this many characters are shortened (tracekit.names.short_kernel_names:
#: kernel names the way people say them, other text cut in the middle, the values of one column
#: kept apart) unless --full is given.
LONG_CELL = 60


def _emit(columns: list[str], rows: list[tuple[Any, ...]], fmt: str, title: str | None = None,
          full: bool = False) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps([dict(zip(columns, map(_cell, r))) for r in rows], default=str))
        sys.stdout.write("\n")
    elif fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else json.dumps(_cell(v)) if isinstance(v, (dict, list)) else _cell(v) for v in r])
    else:
        from tracekit.cli.render import cell, text_table
        from tracekit.names import short_kernel_names

        cells = [[cell(_cell(v)) for v in r] for r in rows]
        if not full:  # long text (kernel names, evidence JSON) shortened, kept apart; --full keeps it
            for i, c in enumerate(columns):
                if c not in WHOLE_COLUMNS and any(len(r[i]) > LONG_CELL for r in cells):
                    for cells_row, short in zip(cells, short_kernel_names([x[i] for x in cells], LONG_CELL)):
                        cells_row[i] = short
        numeric = {c for i, c in enumerate(columns)
                   if rows and all(isinstance(r[i], (int, float, decimal.Decimal)) or r[i] is None for r in rows)}
        if not out.is_terminal:  # logs, pipes, files: plain text, nothing wrapped
            sys.stdout.write(text_table(columns, cells, right=numeric, title=title))
            return
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for i, c in enumerate(columns):
            whole = c in WHOLE_COLUMNS or c in numeric
            width = max([len(c), *(len(r[i]) for r in cells)]) if c in WHOLE_COLUMNS else None
            table.add_column(c, overflow="fold", no_wrap=whole, min_width=width,
                             justify="right" if c in numeric else "left")
        for cells_row in cells:
            table.add_row(*cells_row)
        out.print(table)


#: ``--format`` of the commands that print rows.
TABLE_FORMATS = choice("table", "csv", "json")

FormatOpt = Annotated[
    str,
    typer.Option(
        "--format", "-f", help="Output format: table, csv (with a header row) or json (an array of row objects).",
        callback=TABLE_FORMATS,
    ),
]


@app.command()
def runs(store: StoreOpt = None, fmt: FormatOpt = "table") -> None:
    """List the runs in the store, newest first, with their device-event counts and time."""
    from tracekit.api import list_runs

    try:
        columns, rows = list_runs(store)
    except TracekitError as exc:
        fail(str(exc))
        return
    if fmt == "table":  # the human view: the columns that fit a terminal
        from tracekit import formatting

        keep = ["run_id", "vendor", "device_name", "workload", "label", "ranks", "device_events",
                "device_time_ms", "span_ms", "captured_at"]
        idx = [columns.index(c) for c in keep]
        columns = ["run_id", "vendor", "device", "workload", "label", "ranks", "device events",
                   "device time", "span", "captured (UTC)"]
        units = ["", "", "", "", "", "count", "count", "ms", "ms", ""]
        rows = [tuple(r[i] if isinstance(r[i], str) else formatting.value(r[i], u) for i, u in zip(idx, units))
                for r in rows]
    _emit(columns, rows, fmt)


@app.command()
def update(
    run_ids: Annotated[list[str], typer.Argument(help="Run ids (or unique prefixes, ≥ 4 characters).",
                                                 show_default=False, metavar="RUN...")],
    store: StoreOpt = None,
    label: Annotated[str | None, typer.Option(help="New label.")] = None,
    workload: Annotated[str | None, typer.Option(help="New workload name (the weekly review groups by it).")] = None,
    tag: Annotated[list[str], typer.Option("--tag", help="KEY=VALUE tag to set; repeat for more.")] = [],  # noqa: B006
) -> None:
    """Change the label, workload or tags of runs (one transaction)."""
    from tracekit.api import update_runs

    tags = _parse_tags(tag)
    if label is None and workload is None and not tags:
        fail("give --label, --workload or --tag")
    try:
        done = update_runs(run_ids, store, label=label, workload=workload, tags=tags or None)
    except TracekitError as exc:
        fail(str(exc))
        return
    for rid, changed in done.items():
        out.print(f"{rid}: {', '.join(changed) + ' updated' if changed else 'unchanged'}", markup=False)


@app.command()
def delete(
    run_ids: Annotated[list[str], typer.Argument(help="Run ids (or unique prefixes, ≥ 4 characters).",
                                                 show_default=False, metavar="RUN...")],
    store: StoreOpt = None,
) -> None:
    """Delete runs with all their rows: events, findings, metrics, requests, model (one transaction)."""
    from tracekit.api import delete_runs

    try:
        ids = delete_runs(run_ids, store)
    except TracekitError as exc:
        fail(str(exc))
        return
    for rid in ids:
        out.print(f"{rid}: deleted", markup=False)


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="One read-only SQL statement over the store's views.", metavar="SQL")],
    store: StoreOpt = None,
    fmt: FormatOpt = "table",
    full: Annotated[bool, typer.Option("--full", help="Table: print long values (kernel names, JSON) whole "
                                       f"instead of cutting their middle past {LONG_CELL} characters.")] = False,
) -> None:
    """Run a read-only SQL query (views: runs, kernels, ops, runtime_calls, launches, ...; the analysis
    library: idle_gaps, steps, run_window, run_workload, device_time_by_class, ... — docs/sql.md)."""
    from tracekit.api import run_query

    try:
        columns, rows = run_query(sql, store)
    except TracekitError as exc:
        fail(str(exc))
        return
    _emit(columns, rows, fmt, full=full)


@app.command()
@option_group("model_choice", ModelChoice)
def analyze(
    run_ids: Annotated[list[str] | None, typer.Argument(help="Run ids to analyze.", show_default=False)] = None,
    store: StoreOpt = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Analyze every run that has no findings yet.")] = False,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="Output: table, json or markdown.",
                          callback=choice("table", "json", "markdown"))
    ] = "table",
    lengths: Annotated[
        Path | None,
        typer.Option(
            "--lengths",
            help="File of real (and padded) token counts per request, one 'real[,padded]' per line, "
            "attached to the one RUN given, for the sequence-bucket padding analysis.",
        ),
    ] = None,
    model_choice: ModelChoice = NO_MODEL,
) -> None:
    """Run the analyzers on runs, store their findings and metrics, and print the findings.

    With --model the model is attached to the RUNs first (replacing an earlier one)."""
    from tracekit.api import analyze_runs, store_token_lengths

    model_choice.check()
    if model_choice.model is not None and not run_ids:
        fail("--model: give the RUN ids it applies to")
    if not run_ids and not all_runs:
        fail("give one or more RUN ids, or --all")
    if lengths is not None and (not run_ids or len(run_ids) != 1):
        fail("--lengths: give exactly one RUN id")
    try:
        if lengths is not None and run_ids:
            store_token_lengths(run_ids[0], lengths, store)
        model_choice.attach(run_ids or [], store)
        results = analyze_runs(run_ids or [], store, only_new=all_runs and not run_ids)
    except TracekitError as exc:
        fail(str(exc))
        return
    if not results and all_runs and not run_ids:
        err.print("nothing to analyze: every run in the store has been analyzed "
                  "(give RUN ids to analyze them again)")
    _print_findings(results, fmt)
    # AMD runs captured without any counters get no per-run finding (wave_stalls metric
    # stall_counters_present = 0): the one-pass rocprofv3 line is said once per invocation
    bare = [
        r for r in results
        if any(m["analyzer"] == "wave_stalls" and m["name"] == "stall_counters_present" and m["value"] == 0
               for m in r["metrics"])
        and not any(f["analyzer"] == "wave_stalls" and "rocprofv3" in f["evidence"] for f in r["findings"])
    ]
    if bare:
        from tracekit.analysis.wave_stalls import stall_counter_hint

        sys.stderr.write(stall_counter_hint(len(bare)) + "\n")


def _print_findings(results: list[dict[str, Any]], fmt: str) -> None:
    """Print analyze_runs() results as a Rich table, JSON or markdown."""
    if fmt == "json":
        sys.stdout.write(json.dumps(results, indent=2, default=str) + "\n")
        return
    if fmt == "markdown":
        for run in results:
            sys.stdout.write(f"## Run {run['run_id']}\n\n")
            if not run["findings"]:
                sys.stdout.write("No findings.\n\n")
            for f in run["findings"]:
                sys.stdout.write(f"- **{f['severity']}** ({f['analyzer']}) {f['title']}. {f['detail']}\n")
            sys.stdout.write("\n")
            serving = _serving_metrics(run)
            if serving:
                sys.stdout.write("Serving: " + ", ".join(f"{n} {v}" for n, v in serving) + "\n\n")
        return
    if not out.is_terminal:  # logs, pipes, files: plain text, nothing wrapped or boxed
        for run in results:
            lines = [f"{run['run_id']}: findings"]
            lines += [f"[{f['severity']}] {f['analyzer']}: {f['title']}\n    {f['detail']}" for f in run["findings"]]
            sys.stdout.write("\n".join(lines if run["findings"] else [*lines, "no findings"]) + "\n")
            serving = _serving_metrics(run)
            if serving:
                _emit(["metric", "value"], serving, "table",
                      title=f"{run['run_id']}: serving (request latency, throughput, cost per token)")
        return
    from rich.table import Table

    for run in results:
        table = Table(title=f"{run['run_id']}: findings", title_justify="left")
        for col in ("severity", "analyzer", "finding"):
            table.add_column(col, overflow="fold")
        for f in run["findings"]:
            table.add_row(f["severity"], f["analyzer"], f"{f['title']}\n{f['detail']}")
        if not run["findings"]:
            table.add_row("", "", "no findings")
        out.print(table)
        serving = _serving_metrics(run)
        if serving:
            _emit(["metric", "value"], serving, "table",
                  title=f"{run['run_id']}: serving (request latency, throughput, cost per token)")


def _serving_metrics(run: dict[str, Any]) -> list[tuple[str, str]]:
    """The serving analyzer's metrics of one analyze_runs() result, formatted for people."""
    from tracekit import formatting

    return [(m["name"], formatting.value(m["value"], m["unit"]))
            for m in run["metrics"] if m["analyzer"] == "serving"]


@app.command()
def summary(
    run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix of it).", show_default=False)],
    store: StoreOpt = None,
    full_names: Annotated[bool, typer.Option("--full-names", help="Print kernel names whole.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the overview as JSON for scripts.")] = False,
) -> None:
    """One screen about a run: device, busy %, step time, MBU/MFU with coverage, time by kernel
    class, top kernels (short names) and the top findings (at most 40 lines of 80 columns).

    A run never analyzed is analyzed first and its findings stored."""
    import dataclasses

    from tracekit.api import run_summary
    from tracekit.cli.render import summary_text

    try:
        ov = run_summary(run_id, store)
    except TracekitError as exc:
        fail(str(exc))
        return
    if as_json:
        sys.stdout.write(json.dumps(_cell(dataclasses.asdict(ov)), default=str) + "\n")
        return
    sys.stdout.write(summary_text(ov, full_names=full_names))


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="Run id to report on.", show_default=False)],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="report.html (self-contained page with a roofline) or report.md; "
                     "an existing file only with --force, never a store, a directory or a device.",
                     show_default=False),
    ],
    store: StoreOpt = None,
    force: ForceOpt = False,
) -> None:
    """Write a run's report: findings, metrics, time by kernel category, top kernels, roofline.

    A run without stored findings is analyzed first (and its findings stored)."""
    from tracekit.report import render_report

    try:
        path = render_report(run_id, output, store, force=force)
    except TracekitError as exc:
        fail(str(exc))
        return
    out.print(str(path))


def _price_sheet(value: str) -> str:
    """``--price-sheet``: ``rented``, ``owned`` or an existing file."""
    if value not in ("rented", "owned") and not Path(value).is_file():
        raise BadValue(value, "expected rented, owned or a price sheet file (TOML, docs/portfolio.md)")
    return value


@app.command()
def portfolio(
    store: StoreOpt = None,
    workload: Annotated[str | None, typer.Option(help="Only runs of this workload name.")] = None,
    model: Annotated[str | None, typer.Option(help="Only runs of this model (tag model, the attached model, "
                                                   "or the model the load sent).")] = None,
    sweep: Annotated[str | None, typer.Option(help="Only the runs of this sweep id (or a prefix of one).")] = None,
    price_sheet: Annotated[
        str, typer.Option(help="rented or owned (the hardware catalog's prices, docs/hardware.md), or a price "
                          "sheet FILE with prices per hardware name (docs/portfolio.md).", callback=_price_sheet,
                          envvar="TRACEKIT_PRICE_SHEET")
    ] = "rented",
    min_speed: Annotated[
        float, typer.Option(help="The speed band to answer for: output tokens/s per user, at least.", min=0.0)
    ] = 50.0,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="table, csv (one row per point) or json.", callback=TABLE_FORMATS)
    ] = "table",
) -> None:
    """Which hardware serves a model cheapest at a given speed: per hardware (and precision), output
    tokens/s per device and USD per 1M output tokens against tokens/s per user, with their Pareto
    frontiers, from load-driven runs (tracekit capture --load, --sweep).

    \b
    tracekit portfolio --model tiny-decoder --min-speed 50
    tracekit portfolio --price-sheet prices.toml --format json
    """
    from tracekit.api import portfolio as build
    from tracekit.api import price_sheet as prices_of

    try:
        pf = build(store, workload=workload, model=model, sweep=sweep, prices=prices_of(price_sheet),
                   min_speed=min_speed)
    except TracekitError as exc:
        fail(str(exc))
        return
    if fmt == "json":
        sys.stdout.write(json.dumps(pf.as_dict(), indent=2, default=str) + "\n")
        return
    cols = ["series", "run_id", "sweep_value", "prompt_tokens", "output_tokens", "per_user", "per_device",
            "usd_per_1m", "frontier", "ttft_p95_ms", "prefix_cache_hit_rate", "mbu", "mfu", "limit", "excluded"]
    rows = []
    for name, pts in pf.series().items():
        for p in pts:
            frontier = "".join(x for x, on in (("T", p.on_throughput_frontier), ("C", p.on_cost_frontier)) if on)
            rows.append((name, p.run_id, p.sweep_value, p.prompt_tokens_mean, p.output_tokens_mean, p.per_user,
                         p.per_device, p.usd_per_1m, frontier or "-", p.ttft_p95_ms, p.prefix_cache_hit_rate, p.mbu,
                         p.mfu, p.top_finding["title"] if p.top_finding else None, p.excluded()))
    if fmt == "csv":
        _emit(cols, rows, "csv")
        return
    if not rows:
        err.print("no load-driven runs match (capture with --load, or --sweep, to get some)", markup=False)
        return
    _emit(cols, rows, "table", title=f"portfolio: {pf.prices.sheet} prices ({pf.prices.source}); tokens/s per user "
                                     "and per device, USD per 1M output tokens; frontier T = throughput, C = cost")
    err.print(pf.answer.sentence(), markup=False)


@app.command()
def compare(
    run_a: Annotated[str, typer.Argument(help="Baseline run id (A).", show_default=False)],
    run_b: Annotated[str, typer.Argument(help="Run id to compare with A (B).", show_default=False)],
    store: StoreOpt = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", "-f",
            help="table (categories and top kernels), csv (the category table, with a header row) or "
            "json (an object: a, b, categories, top_kernels).",
            callback=TABLE_FORMATS,
        ),
    ] = "table",
    top: Annotated[int, typer.Option("--top", help="Kernels per category in the top-change table.")] = 5,
) -> None:
    """Compare two runs (any vendors) per kernel category: count, device ms, share, B − A."""
    from tracekit.api import compare_runs

    try:
        res = compare_runs(run_a, run_b, store, top=max(0, top))
    except TracekitError as exc:
        fail(str(exc))
        return
    cat_cols, cat_rows = res["categories"]
    k_cols, k_rows = res["top_kernels"]
    s_cols, s_rows = res["serving"]
    if fmt == "json":
        doc = {
            "a": res["a"],
            "b": res["b"],
            "categories": [dict(zip(cat_cols, map(_cell, r))) for r in cat_rows],
            "top_kernels": [dict(zip(k_cols, map(_cell, r))) for r in k_rows],
            "serving": [dict(zip(s_cols, map(_cell, r))) for r in s_rows],
        }
        sys.stdout.write(json.dumps(doc, default=str) + "\n")
        return
    if fmt == "csv":
        _emit(cat_cols, cat_rows, "csv")
        return
    try:
        hw = _hardware_note(res["a"], res["b"], store)
    except TracekitError as exc:  # a bad $TRACEKIT_HARDWARE file
        fail(str(exc))
        return
    if hw:
        err.print(hw, markup=False)
    _emit(cat_cols, cat_rows, "table", title=f"A = {run_a}, B = {run_b}: device time per category")
    if k_rows:  # names shortened for people; csv/json keep them whole
        from tracekit.names import short_kernel_names

        k_rows = [(r[0], short, *r[2:]) for r, short in zip(k_rows, short_kernel_names([r[1] for r in k_rows]))]
        _emit(k_cols, k_rows, "table", title="kernels with the largest time change per category")
    else:
        out.print("no kernel names shared by the two runs: no per-kernel changes")
    if s_rows:
        _emit(s_cols, s_rows, "table", title="serving: request latency, throughput and cost per token")


def _hardware_note(a: str, b: str, store: str | None) -> str | None:
    """A warning when runs A and B ran on different hardware (the catalog devices)."""
    from tracekit.analysis.hardware import run_device
    from tracekit.store import open_store

    path = _store(store)
    with open_store(path, read_only=True) as con:
        names = []
        for rid in (a, b):
            row, spec = run_device(con, rid)
            names.append(spec.name if spec else (row.get("name") or row.get("device_type")) if row else None)
    if names[0] == names[1]:
        return None
    return (f"warning: A ran on {names[0] or 'an unstated device'}, B on {names[1] or 'an unstated device'}: "
            "time differences are the hardware's as much as the code's")


@app.command()
def export(
    run_id: Annotated[str, typer.Argument(help="The run to export.", show_default=False)],
    perfetto: Annotated[
        Path,
        typer.Option("--perfetto", help="Write a Chrome-trace JSON file (opens in ui.perfetto.dev); an "
                     "existing file only with --force, never a store, a directory or a device.",
                     show_default=False),
    ],
    store: StoreOpt = None,
    force: ForceOpt = False,
) -> None:
    """Export a run as a Chrome-trace file: device, host, flows, and stored findings as markers."""
    from tracekit.api import export_perfetto

    try:
        counts = export_perfetto(run_id, perfetto, store, force=force)
    except TracekitError as exc:
        fail(str(exc))
        return
    err.print(", ".join(f"{v:,} {k}" for k, v in counts.items()), markup=False)
    out.print(str(perfetto), markup=False)


def _capture_backend(value: str | None) -> str | None:
    """``--backend``: a command backend of :mod:`tracekit.collectors.capture_backends`."""
    if value is not None:
        from tracekit.collectors.capture_backends import COMMAND_BACKENDS

        if value not in COMMAND_BACKENDS:
            raise BadValue(value, f"expected {either(COMMAND_BACKENDS)}")
    return value


def _server_kind(value: tuple[str, str] | None) -> tuple[str, str] | None:
    """``--server KIND URL``: KIND a server whose profiler endpoints tracekit drives."""
    if value is not None:
        from tracekit.collectors.capture_backends.spec import SERVER_TRACE_DIR_ENV

        if value[0] not in SERVER_TRACE_DIR_ENV:
            raise BadValue(value[0], f"expected {either(list(SERVER_TRACE_DIR_ENV))}")
    return value


class LoadOptions(NamedTuple):
    """``tracekit capture``'s ``--load URL`` and the options that shape the load it drives (the
    command line's options: see :func:`tracekit.cli.params.option_group`)."""

    url: Annotated[
        str | None,
        typer.Option("--load", help="Drive load at this OpenAI-compatible server URL (streaming) during "
                     "the capture and store the window's requests (TTFT, TPOT, tokens/s) with the run."),
    ] = None
    prompts: Annotated[
        Path | None, typer.Option(help="Load: prompts file (a prompt per line, or JSONL).")
    ] = None
    prompt_tokens: Annotated[
        str, typer.Option(help="Load: generated prompt length distribution, e.g. fixed:128, "
                          "uniform:32:512, normal:256:64, lognormal:256:0.5 (tokens).")
    ] = "fixed:128"
    max_tokens: Annotated[int, typer.Option(help="Load: output tokens per request.")] = 128
    concurrency: Annotated[
        int | None, typer.Option(help="Load: closed-loop clients (default 4 unless --rate).", show_default=False)
    ] = None
    rate: Annotated[
        float | None, typer.Option(help="Load: Poisson request rate, requests/s.", show_default=False)
    ] = None
    served_model: Annotated[
        str | None, typer.Option(help="Load: model name to send in requests (default: the server's first).")
    ] = None
    endpoint: Annotated[str, typer.Option(help="Load: completions or chat.",
                                          callback=choice("completions", "chat"))] = "completions"
    profile: Annotated[
        str, typer.Option("--load-profile", help="Load: independent prompts, or agentic multi-turn sessions "
                          "(each turn re-sends the conversation so far; --concurrency sessions at once).",
                          callback=choice("independent", "agentic"))
    ] = "independent"
    turns: Annotated[int, typer.Option(help="Agentic load: turns per session.")] = 8
    system_tokens: Annotated[int, typer.Option(help="Agentic load: words of a system prompt every session shares.")] = 0
    think_time: Annotated[float, typer.Option(help="Agentic load: seconds between an answer and the next turn.")] = 0.0
    subagent_every: Annotated[int, typer.Option(help="Agentic load: turns between sub-agent bursts.")] = 4
    turn_tokens: Annotated[str, typer.Option(help=(
        "Agentic load: tokens each later turn adds (a tool result or a user message), a length distribution "
        "as --prompt-tokens; the first turn has --prompt-tokens."))] = "fixed:64"
    subagents: Annotated[int, typer.Option(help=(
        "Agentic load: sub-agent requests sent at once on the session's context every --subagent-every turns "
        "(their answers join the context)."))] = 0
    sweep: Annotated[
        str | None,
        typer.Option(metavar="PARAM=V,V,…", help="Capture once per load setting against the same server, each "
                     "point a run tagged with the sweep: concurrency=1,2,4,… or rate=0.5,1,2 (requests/s). Each "
                     "window opens after --warmup and the load's steady state (docs/portfolio.md).",
                     show_default=False),
    ] = None
    steady_timeout: Annotated[
        float | None, typer.Option(help="Sweep: most seconds a point waits after --warmup for steady state (every "
                                   "warm-up request done) before its window opens anyway; such a point is tagged "
                                   "steady_state=not_reached and answers no speed band in the portfolio "
                                   "[default: 120].", show_default=False)
    ] = None

    def spec(self, duration: float | None, warmup: float, ready_timeout: float) -> "LoadSpec | None":
        """The load driver's spec (None without ``--load``); ``--load`` needs a ``--duration``.
        Times in seconds."""
        if self.steady_timeout is not None and self.sweep is None:
            fail("--steady-timeout bounds a sweep point's wait for steady state: give --sweep")
        if self.url is None:
            if self.sweep is not None:
                fail("--sweep varies the load: give --load URL")
            return None
        from tracekit.collectors.load import LoadSpec

        if duration is None:
            fail("--load needs --duration (the window the load and the capture share)")
        rate_sweep = self.sweep is not None and self.sweep.strip().lower().startswith("rate")
        default_clients = None if self.rate is not None or rate_sweep else 4
        return LoadSpec(
            # ended by the capture when its window closes (the window opens only once a process
            # is profiling, which can take a while): the duration is just a bound
            url=self.url, duration_s=warmup + (duration or 0) + ready_timeout + (self.steady_timeout or 120.0) + 3600.0,
            concurrency=self.concurrency if self.concurrency is not None else default_clients,
            rate_rps=self.rate, prompts_file=self.prompts, prompt_tokens=self.prompt_tokens,
            max_tokens=self.max_tokens, model=self.served_model, endpoint=self.endpoint,  # type: ignore[arg-type]
            profile=self.profile, turns=self.turns, turn_tokens=self.turn_tokens,  # type: ignore[arg-type]
            think_s=self.think_time, subagents=self.subagents, subagent_every=self.subagent_every,
            system_tokens=self.system_tokens,
        )


#: No ``--load``.
NO_LOAD = LoadOptions()


class CaptureOptions(NamedTuple):
    """What ``tracekit capture`` captures and how: the command line of a
    :class:`~tracekit.collectors.capture.CaptureSpec` (see :func:`tracekit.cli.params.option_group`).
    The source is COMMAND under ``--backend``, a profiler server to ``--attach`` to, or a serving
    engine's ``--server`` with its ``--trace-dir``; then the window, where the traces go and the
    counters."""

    command: Annotated[
        list[str] | None,
        typer.Argument(help="The workload or server to run, after '--' (with --backend).", show_default=False),
    ] = None
    backend: Annotated[
        str | None,
        typer.Option(help="How to profile COMMAND: torch (PyTorch profiler injected at start-up), jax "
                     "(jax.profiler injected), rocprof (wrapped in rocprofv3) or nsys (wrapped in nsys profile).",
                     callback=_capture_backend),
    ] = None
    attach: Annotated[
        str | None,
        typer.Option(metavar="HOST:PORT", help="A running JAX / torch_xla profiler server "
                     "(jax.profiler.start_server) to capture from remotely; needs --duration."),
    ] = None
    server: Annotated[
        tuple[str, str] | None,
        typer.Option(help="vllm|sglang URL: drive a running server's /start_profile and /stop_profile; "
                     "needs --duration and the server's trace directory (--trace-dir or its env var).",
                     show_default=False, callback=_server_kind),
    ] = None
    trace_dir: Annotated[
        Path | None,
        typer.Option(help="With --server: the directory the server writes traces to "
                     "(default: $VLLM_TORCH_PROFILER_DIR / $SGLANG_TORCH_PROFILER_DIR)."),
    ] = None
    duration: Annotated[
        float | None,
        typer.Option(help="Capture window, seconds (default with a command: until it exits or Ctrl-C).",
                     show_default=False),
    ] = None
    warmup: Annotated[
        float, typer.Option(help="Seconds of warm-up before the window opens (after the load starts "
                            "when --load is given).")
    ] = 0.0
    warmup_steps: Annotated[
        int, typer.Option(help="torch: outermost nn.Module forwards (engine steps) to skip per process.")
    ] = 0
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Directory for the traces (default: ./tracekit-capture-<UTC time>): a new "
                     "or empty directory; with --force also a previous capture's directory (emptied first).",
                     show_default=False),
    ] = None
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace the traces of a previous capture in --out (a directory holding "
                     "tracekit-capture.json and no DuckDB file); never any other non-empty directory, a "
                     "file, a store or a device."),
    ] = False
    counters: Annotated[
        str | None, typer.Option(help="rocprof: counter preset stalls, memory or roofline (see docs/capture.md).")
    ] = None

    def spec(self, load: "LoadSpec | None", ready_timeout: float) -> "CaptureSpec":
        """The capture's spec, with the ``load`` to drive and ``ready_timeout`` (seconds)."""
        from tracekit.collectors.capture import CaptureSpec

        kind, url = self.server or (None, None)
        return CaptureSpec(
            command=list(self.command or []), backend=self.backend,  # type: ignore[arg-type]
            attach=self.attach, server=kind, server_url=url, server_trace_dir=self.trace_dir,  # type: ignore[arg-type]
            duration_s=self.duration, warmup_s=self.warmup, warmup_steps=self.warmup_steps, out_dir=self.out_dir,
            force=self.force, counters=self.counters, load=load, ready_timeout_s=ready_timeout,
        )


#: No capture options: what a call of :func:`capture` from Python without them holds.
NO_CAPTURE = CaptureOptions()


@app.command(context_settings={"allow_interspersed_args": False})
@option_group("model_choice", ModelChoice)
@option_group("load_options", LoadOptions)
@option_group("what", CaptureOptions)
def capture(  # noqa: PLR0913 - one parameter per CLI option
    what: CaptureOptions = NO_CAPTURE,
    load_options: LoadOptions = NO_LOAD,
    ready_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the server to accept connections.")
    ] = 120.0,
    store: StoreOpt = None,
    label: Annotated[str | None, typer.Option(help="Free-text label for the run, e.g. a git sha.")] = None,
    workload: Annotated[str | None, typer.Option(help="Workload name the run belongs to.")] = None,
    tag: Annotated[list[str], typer.Option("--tag", help="KEY=VALUE tag; repeat for more.")] = [],  # noqa: B006
    analyze_run: Annotated[
        bool, typer.Option("--analyze/--no-analyze", help="Run the analyzers on the new run.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON for scripts.")] = False,
    model_choice: ModelChoice = NO_MODEL,
) -> None:
    """Capture a window of a workload or serving run, ingest it as one run, and print its findings.

    \b
    tracekit capture --backend torch --duration 10 --warmup 5 -- python serve.py
    tracekit capture --backend jax --duration 5 -- python decode.py
    tracekit capture --attach 10.0.0.2:9012 --duration 5
    tracekit capture --backend rocprof --counters stalls --duration 10 -- python serve.py
    tracekit capture --server vllm http://127.0.0.1:8000 --duration 10 --load http://127.0.0.1:8000
    tracekit capture --server vllm URL --duration 5 --warmup 5 --load URL --sweep concurrency=1,2,4,8,16
    tracekit capture --server vllm URL --duration 20 --load URL --load-profile agentic --turns 10
    \b
    Ctrl-C closes the window early; what was captured is still ingested.
    """
    import threading
    import time

    from tracekit.collectors.capture import capture_and_ingest

    tags = _parse_tags(tag)
    model_choice.check()
    spec = what.spec(load_options.spec(what.duration, what.warmup, ready_timeout), ready_timeout)
    stop = threading.Event()
    store_path = _store(store)
    if load_options.sweep is not None:
        from dataclasses import replace

        if load_options.steady_timeout is not None:
            spec = replace(spec, steady_timeout_s=load_options.steady_timeout)
        _capture_sweep(spec, load_options.sweep, store_path, label=label, workload=workload, tags=tags,
                       analyze_run=analyze_run, as_json=as_json, model_choice=model_choice, stop=stop)
        return
    display = _CaptureDisplay(store_path, what.duration, with_load=spec.load is not None,
                              live=err.is_terminal and not as_json)
    try:
        with display:
            result, run = _interruptible(lambda: capture_and_ingest(
                spec, store_path, label=label, workload=workload, tags=tags, stop=stop, on_status=display.show,
            ), stop)
        result.timings["ingesting"] = time.monotonic() - display.ingest_started
        model_choice.attach([run.run_id], store_path)
        findings = None
        if analyze_run and (run.created or model_choice.model is not None):
            from tracekit.api import analyze_runs

            t0 = time.monotonic()
            findings = analyze_runs([run.run_id], store_path)
            result.timings["analyzing"] = time.monotonic() - t0
    except TracekitError as exc:
        fail(str(exc))
        return
    _print_capture(result, run, findings, store_path, with_load=spec.load is not None, as_json=as_json)




def _capture_sweep(spec: "CaptureSpec", sweep_text: str, store_path: "StoreLocation", *, label: str | None,  # noqa: PLR0913 - capture's options, passed on
                   workload: str | None, tags: dict[str, str], analyze_run: bool, as_json: bool,
                   model_choice: ModelChoice, stop: Any) -> None:
    """``capture --sweep``: one capture per point (:mod:`tracekit.collectors.sweep`), each run
    analyzed as it is stored; a table of the points on stderr (or JSON), the run ids on stdout."""
    from tracekit.collectors.sweep import SweepPoint, parse_sweep, run_sweep

    rows: list[dict[str, Any]] = []

    def analyzed(point: SweepPoint) -> None:
        model_choice.attach([point.run.run_id], store_path)
        findings = None
        if analyze_run and (point.run.created or model_choice.model is not None):
            import time

            from tracekit.api import analyze_runs

            t0 = time.monotonic()
            findings = analyze_runs([point.run.run_id], store_path)
            point.result.timings["analyzing"] = time.monotonic() - t0
        window = point.result.window_requests()
        summary = window.summary().as_dict() if window is not None else None
        rows.append({"point": point.index, "value": point.value, "run_id": point.run.run_id,
                     "created": point.run.created, "out_dir": str(point.result.out_dir), "requests": summary,
                     "server_metric_scrapes": len(window.server_metrics) if window is not None else 0,
                     "notes": point.result.notes, "timings_s": point.result.timings, "findings": findings})
        if not as_json:
            s = summary or {}
            tps, tpot = s.get("output_tokens_per_s"), s.get("tpot_p50_ms")
            err.print(f"point {point.index} {sweep.param}={sweep.label(point.value)}: run {point.run.run_id} · "
                      f"{s.get('requests', 0)} requests · TTFT p50 "
                      + ("n/a" if s.get("ttft_p50_ms") is None else f"{s['ttft_p50_ms']:.1f} ms")
                      + " · " + ("n/a" if tps is None else f"{tps:.1f}") + " output tokens/s · "
                      + ("n/a" if not tpot else f"{1000 / tpot:.1f}") + " tokens/s per user", markup=False)
            for note in point.result.notes:
                err.print(f"note: {note}", markup=False)

    try:
        sweep = parse_sweep(sweep_text)
        display = _CaptureDisplay(store_path, spec.duration_s, with_load=True, live=err.is_terminal and not as_json)
        with display:
            sweep_id, base, _points = _interruptible(lambda: run_sweep(
                spec, sweep, store_path, label=label, workload=workload, tags=tags, stop=stop,
                on_status=display.show, on_point=analyzed), stop)
    except TracekitError as exc:
        fail(str(exc))
        return
    if as_json:
        sys.stdout.write(json.dumps({"sweep_id": sweep_id, "param": sweep.param, "out_dir": str(base),
                                     "points": rows}, indent=2, default=str) + "\n")
        return
    err.print(f"sweep {sweep_id}: {len(rows)} of {len(sweep.values)} points stored in {store_path} "
              f"(traces under {base}); see them with: tracekit portfolio --sweep {sweep_id}", markup=False)
    for r in rows:
        out.print(r["run_id"], markup=False)


class _CaptureDisplay:
    """The one-line live status of a capture on a terminal (``live``), and when ingest began
    (``ingest_started``, monotonic s) for the timings."""

    def __init__(self, store_path: "StoreLocation", duration: float | None, *, with_load: bool, live: bool) -> None:
        self.store_path = store_path
        self.duration = duration
        self.with_load = with_load
        self.ingest_started = 0.0
        self._status: Any = None
        if live:
            from rich.status import Status

            self._status = Status("starting the capture…", console=_err.real())

    def __enter__(self) -> Self:
        if self._status is not None:
            self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()

    def show(self, s: "CaptureStatus") -> None:
        """A status update from the capture (its ``on_status``)."""
        import time

        if s.phase == "ingesting":
            self.ingest_started = time.monotonic()
        if self._status is None:
            return
        duration = self.duration
        window = "" if s.window_elapsed_s is None else f" · window {s.window_elapsed_s:.1f}"
        window += f"/{duration:g} s" if window and duration else (" s" if window else "")
        if s.phase == "ingesting":
            self._status.update(f"ingesting {s.trace_bytes / 1e6:.1f} MB of traces into {self.store_path}")
            return
        reqs = f" · {s.requests_done} requests ({s.request_errors} errors)" if self.with_load else ""
        # the profilers write their traces when the window closes: no size to show before
        trace = f" · trace {s.trace_bytes / 1e6:.1f} MB" if s.trace_bytes else ""
        self._status.update(f"{s.phase} · {s.elapsed_s:.1f} s{window}{reqs}{trace}")


def _print_capture(result: "CaptureResult", run: Any, findings: list[dict[str, Any]] | None, store_path: "StoreLocation",
                   *, with_load: bool, as_json: bool) -> None:
    """What a capture did: JSON on stdout, or a summary on stderr and the run id on stdout."""
    window = result.window_requests()
    summary = window.summary() if window is not None else None
    if with_load and (summary is None or summary.requests == 0):
        result.notes.append("the load driver completed no request inside the window: the run has no request "
                            "metrics (is the server answering? try a longer --duration or --warmup)")
    if as_json:
        sys.stdout.write(json.dumps({
            "run": run.as_dict(), "out_dir": str(result.out_dir), "timings_s": result.timings,
            "trace_files": [str(p) for p in result.trace_files],
            "window_start_ns": result.window_start_ns, "window_end_ns": result.window_end_ns,
            "interrupted": result.interrupted, "notes": result.notes,
            "requests": None if summary is None else summary.as_dict(),
            "findings": findings,
        }, indent=2, default=str) + "\n")
        return
    win = ((result.window_end_ns or 0) - (result.window_start_ns or 0)) / 1e9
    err.print(f"captured {len(result.trace_files)} trace file(s) into {result.out_dir} "
              f"({win:.2f} s window{', interrupted' if result.interrupted else ''})", markup=False)
    for note in result.notes:
        err.print(f"{'warning' if 'no request' in note else 'note'}: {note}", markup=False)
    from tracekit import formatting

    err.print("time: " + " · ".join(f"{k} {formatting.duration(v, 's')}" for k, v in result.timings.items()
                                    if k != "end"), markup=False)
    if summary is not None:
        def ms(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1f}"

        tps = summary.output_tokens_per_s
        err.print(f"requests in the window: {summary.requests} ({summary.errors} errors); TTFT p50/p95 "
                  f"{ms(summary.ttft_ms.p50)}/{ms(summary.ttft_ms.p95)} ms; TPOT p50/p95 "
                  f"{ms(summary.tpot_ms.p50)}/{ms(summary.tpot_ms.p95)} ms; "
                  f"{'n/a' if tps is None else f'{tps:.1f}'} output tokens/s", markup=False)
    err.print(f"run {run.run_id} {'stored in' if run.created else 'already in'} {store_path}", markup=False)
    if findings is not None:
        _print_findings(findings, "table")
    out.print(run.run_id, markup=False)


def _interruptible(fn: Any, stop: Any) -> Any:
    """Run ``fn`` in a worker thread. The first SIGINT (Ctrl-C) or SIGTERM sets ``stop`` (close the
    capture window, keep and ingest what was captured); a second one aborts. The handlers are
    installed explicitly, so this also works where SIGINT was inherited as ignored (background
    jobs of a shell script)."""
    import signal
    import threading

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            box["error"] = exc

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():
            from tracekit.collectors.capture import terminate_children

            terminate_children()  # the commands run in their own sessions: stop them before leaving
            raise KeyboardInterrupt
        stop.set()
        err.print(f"{signal.Signals(signum).name}: closing the capture window and ingesting what was "
                  "captured (again to abort)", markup=False)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        t = threading.Thread(target=target, name="tracekit-capture-main", daemon=True)
        t.start()
        while t.is_alive():
            t.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if "error" in box:
        raise box["error"]
    return box["value"]


@app.command()
def dashboard(
    store: StoreOpt = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on; anything but loopback is reachable from the network.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", callback=int_range(1, 65535, "expected 1..65535"))] = 8050,
    price_sheet: Annotated[
        Path | None, typer.Option(help="The Portfolio page's price sheet file (docs/portfolio.md).",
                                  envvar="TRACEKIT_PRICE_SHEET", show_default=False)
    ] = None,
) -> None:
    """Serve the Dash dashboard (Runs, Weekly review, Run, Compare, Portfolio) over the store, read-only."""
    import socket

    from tracekit.dashboard import create_app, is_loopback

    store_path = _store(store)
    try:
        dash_app = create_app(store_path, price_sheet)
    except TracekitError as exc:
        fail(str(exc))
        return
    try:  # a clear one-line error instead of the server's own message when the port is taken
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        fail(f"--host {host} --port {port}: cannot listen: {exc.strerror or exc}")
    if not is_loopback(host):
        err.print(f"warning: listening on {host}: anyone who can reach it can read every run in {store_path} "
                  "(no authentication); bind 127.0.0.1 (the default) and tunnel, or put it behind a proxy",
                  markup=False)
    err.print(f"tracekit dashboard: http://{host}:{port}/ (store {store_path}, read-only); Ctrl-C stops it",
              markup=False)
    dash_app.run(host=host, port=port, debug=False)


@app.command("open")
def open_run(
    run_id: Annotated[str, typer.Argument(help="Run id or unique prefix (an XPlane run).", show_default=False)],
    xprof: Annotated[
        bool, typer.Option("--xprof", help="Serve the run's profile directory with XProf (pip install "
                           "'tracekit\\[xprof]'): trace viewer, memory profile, HLO graphs, op profile.")
    ] = False,
    store: StoreOpt = None,
    port: Annotated[int | None, typer.Option(help="TCP port on 127.0.0.1 (default: a free one).",
                                             callback=int_range(1, 65535, "expected 1..65535"))] = None,
) -> None:
    """Open a run in a deeper viewer: with --xprof, start XProf on the run's own XPlane files,
    bound to 127.0.0.1, print its URL and serve until Ctrl-C (or SIGTERM)."""
    import signal
    import threading

    from tracekit.xprof import start_xprof

    if not xprof:
        fail("open: say which viewer: --xprof (the only one so far)")
        return
    try:
        server = start_xprof(run_id, _store(store), port)
    except TracekitError as exc:
        fail(str(exc))
        return
    stopped = threading.Event()

    def stop(_sig: int, _frame: Any) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(server.url, flush=True)
    err.print(f"XProf: {server.url} (serving {server.logdir}); Ctrl-C stops it", markup=False)
    try:
        while not stopped.wait(0.5) and server.process.poll() is None:
            pass
    finally:
        server.stop()



@app.command()
def check(  # noqa: PLR0913 - one parameter per CLI option
    candidate: Annotated[
        list[str], typer.Option("--candidate", help="Candidate run id; repeat per run (≥ 5 recommended).")
    ] = [],  # noqa: B006
    baseline: Annotated[
        list[str], typer.Option("--baseline", help="Baseline run id; repeat per run (≥ 5 recommended).")
    ] = [],  # noqa: B006
    baseline_label: Annotated[
        str | None,
        typer.Option("--baseline-label", help="Use the newest runs with this label (e.g. main) as the baseline, "
                     "of the candidates' workload when they share one."),
    ] = None,
    history: Annotated[
        str | None,
        typer.Option("--history", help="Main-branch tier: look for change points in this workload's runs "
                     "(ordered by capture time)."),
    ] = None,
    baseline_store: Annotated[
        str | None,
        typer.Option("--baseline-store", help="Store file or lake URL the baselines (--baseline, --baseline-label) "
                     "come from, opened read-only and never written; candidates come from --store (default: "
                     "--store holds both). E.g. a PR job's local store against the team lake.",
                     show_default=False),
    ] = None,
    min_change: Annotated[
        str | None,
        typer.Option("--min-change", help="Smallest change that counts, for metrics without their own in the "
                     "config: a percentage (3%) or an amount in the metric's unit (default: 2%)",
                     show_default=False),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", envvar="TRACEKIT_CHECK_CONFIG",
                     help="TOML file: gated metrics and their minimum change, test, levels (docs/MATH.md) "
                     "[env TRACEKIT_CHECK_CONFIG]."),
    ] = None,
    test: Annotated[
        str | None, typer.Option("--test", help="PR-tier test: mann-whitney (default) or welch.", show_default=False)
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Output: markdown or json.",
                                     callback=choice("markdown", "json"))] = "markdown",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the message to this file (an existing file "
                                  "only with --force; never a store, a directory or a device).",
                                  show_default=False)
    ] = None,
    force: ForceOpt = False,
    post: Annotated[
        list[str], typer.Option("--post", help="Post the message: github (PR comment, updated in place) or "
                                "slack (incoming webhook); repeat for both.", callback=choice("github", "slack"))
    ] = [],  # noqa: B006
    pr: Annotated[
        int | None, typer.Option("--pr", help="Pull request number for --post github (default: from GITHUB_REF).",
                                 show_default=False)
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="owner/name for --post github (default: $GITHUB_REPOSITORY).",
                                 show_default=False)
    ] = None,
    post_on: Annotated[
        str, typer.Option("--post-on", help="When to post: always, or regression (only when the check fails).",
                          callback=choice("always", "regression"))
    ] = "always",
    comment_key: Annotated[
        str | None, typer.Option("--comment-key", help="Keep one comment per key on a PR (e.g. the workload) "
                                 "instead of one per PR.", show_default=False)
    ] = None,
    dashboard_url: Annotated[
        str | None,
        typer.Option("--dashboard-url", envvar="TRACEKIT_DASHBOARD_URL",
                     help="Base URL of `tracekit dashboard`, for compare links [env TRACEKIT_DASHBOARD_URL]."),
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Check for performance regressions: candidate runs against a baseline (PR tier) or change
    points in a workload's history (main-branch tier). Exit 0 no regression, 1 regression, 2 error.

    \b
    tracekit check --candidate C1 ... --candidate C5 --baseline B1 ... --baseline B5
    tracekit check --candidate C1 --candidate C2 --baseline-label main --min-change 3%
    tracekit check --history llama3-8b-decode --post slack
    """
    from tracekit.check import run_check
    from tracekit.check.message import to_json, to_markdown

    _check_runs_given(candidate, baseline, baseline_label, history)
    try:
        if output is not None:  # a refused --output fails before anything is computed or posted
            from tracekit.outputs import check_output

            check_output(output, store=_store(store), force=force)
        cfg = _check_config(config, min_change, test)
        result = run_check(store, candidates=candidate, baselines=baseline, baseline_label=baseline_label,
                           history=history, config=cfg, dashboard_url=dashboard_url,
                           baseline_store=baseline_store)
    except TracekitError as exc:
        fail(str(exc))
        return
    markdown = to_markdown(result, comment_key)
    text = to_json(result) if fmt == "json" else markdown
    sys.stdout.write(text)
    for note in result.notes:  # said in the log too, not only inside the message
        if note.startswith("warning:"):
            err.print(note, markup=False)
    if output is not None:
        from tracekit.outputs import write_output

        try:
            write_output(output, text, store=_store(store), force=force)
        except TracekitError as exc:
            fail(str(exc))
    if post_on == "always" or result.regression:
        _post_check(result, markdown, post, repo=repo, pr=pr, comment_key=comment_key)
    raise typer.Exit(1 if result.regression else 0)


def _check_runs_given(candidate: list[str], baseline: list[str], baseline_label: str | None,
                      history: str | None) -> None:
    """Refuse a ``tracekit check`` that names no runs to compare, or both tiers at once."""
    if history is not None and (candidate or baseline or baseline_label):
        fail("--history: give either --history or --candidate/--baseline runs, not both")
    if history is None and not candidate:
        fail("give --candidate RUN (with --baseline RUN or --baseline-label LABEL) or --history WORKLOAD")
    if history is None and not baseline and baseline_label is None:
        fail("--candidate: give --baseline RUN (repeat per run) or --baseline-label LABEL")


def _check_config(config: Path | None, min_change: str | None, test: str | None) -> "CheckConfig":
    """The ``--config`` file's gate settings, with ``--min-change`` and ``--test`` put over them."""
    import dataclasses

    from tracekit.check import load_config, parse_min_change
    from tracekit.check.gate import validate

    cfg = load_config(config)
    if min_change is not None:
        try:
            cfg = dataclasses.replace(cfg, min_change=parse_min_change(min_change, "--min-change"))
        except ValueError as exc:
            fail(str(exc))
    if test is not None:
        cfg = dataclasses.replace(cfg, test=test)
        try:
            validate(cfg)
        except ValueError as exc:
            fail(f"--test {exc}")
    return cfg


def _post_check(result: "CheckResult", markdown: str, post: list[str], repo: str | None, pr: int | None,
                comment_key: str | None) -> None:
    """Post a check's message to each ``--post`` destination once, saying where on stderr."""
    from tracekit.check.message import to_slack
    from tracekit.check.post import post_github, post_slack

    try:
        for dest in dict.fromkeys(post):
            if dest == "github":
                done = post_github(markdown, repo=repo, pr=pr, key=comment_key)
                err.print(f"github: comment {done.action}" + (f" ({done.url})" if done.url else ""), markup=False)
            else:
                post_slack(to_slack(result))
                err.print("slack: message sent", markup=False)
    except TracekitError as exc:
        fail(str(exc))


def main(started: "Startup | None" = None) -> None:
    """Run the CLI (what :func:`tracekit.cli.entry` runs, with what it started; tests run it with
    ``python -c``, and then the read-ahead starts here)."""
    from tracekit.cli.startup import fixed_mmap_threshold, start

    fixed_mmap_threshold()
    try:
        app(obj=started if started is not None else start(sys.argv[1:]))
    except KeyboardInterrupt:
        err.print("error: interrupted; the store is unchanged")
        sys.exit(130)
