"""``tracekit lake …``: create, maintain and export a team lake (``docs/team-store.md``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from tracekit.cli.params import OneLineErrorsGroup
from tracekit.errors import TracekitError

lake_app = typer.Typer(
    name="lake", cls=OneLineErrorsGroup, no_args_is_help=True, add_completion=False,
    help="Create, compact and export a team lake store (DuckLake: PostgreSQL or SQLite catalog, Parquet data).",
)

UrlArg = Annotated[str, typer.Argument(
    metavar="URL", show_default=False,
    help="lake:postgresql://[USER@]HOST[:PORT]/DB?data=DIR_OR_S3_URL or lake:sqlite:///CATALOG?data=DIR")]


def _fail(exc: TracekitError) -> None:
    sys.stderr.write(f"error: {exc}\n")
    raise typer.Exit(2)


@lake_app.command()
def init(url: UrlArg) -> None:
    """Create the lake's tables and claim table (nothing happens to a lake that exists)."""
    from tracekit.api import init_lake

    try:
        created = init_lake(url)
    except TracekitError as exc:
        _fail(exc)
        return
    sys.stdout.write(f"{'created' if created else 'exists'}: {url}\n")


@lake_app.command()
def compact(
    url: UrlArg,
    keep_days: Annotated[float, typer.Option(
        "--keep-days", help="Keep snapshots (time travel, `check` reproductions) this many days.")] = 7.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was done as JSON.")] = False,
) -> None:
    """Merge small data files, expire old snapshots and delete unused files; run nightly."""
    from tracekit.api import compact_lake

    try:
        done = compact_lake(url, keep_days=keep_days)
    except TracekitError as exc:
        _fail(exc)
        return
    if as_json:
        sys.stdout.write(json.dumps(done.__dict__) + "\n")
    else:
        sys.stdout.write(f"compacted {url}: {done.files_before} → {done.files_after} data files, "
                         f"snapshot {done.snapshot}, {done.seconds:.1f} s\n")


@lake_app.command("export")
def export(
    source: Annotated[str, typer.Argument(
        metavar="SOURCE", show_default=False,
        help="A store file or a lake URL (lake:postgresql://… or lake:sqlite:///…), read read-only.")],
    out: Annotated[str, typer.Argument(
        metavar="OUT", show_default=False,
        help="Directory to create (or an empty one): OUT/<table>/month=YYYY-MM/*.parquet and OUT/_tracekit.json.")],
    since: Annotated[str | None, typer.Option(
        "--since", metavar="DATE", help="Only runs captured (else ingested) on or after this UTC date, "
                                        "YYYY-MM-DD.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a previous export at OUT (one holding _tracekit.json); nothing else.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export's manifest as JSON.")] = False,
) -> None:
    """Export every run table as Hive-partitioned Parquet (by capture month) for Spark and Trino."""
    from tracekit.api import export_parquet

    try:
        done = export_parquet(source, out, since=since, force=force)
    except TracekitError as exc:
        _fail(exc)
        return
    if as_json:
        sys.stdout.write(json.dumps(done, default=str) + "\n")
        return
    tables = done["tables"]
    months = sorted({m for t in tables.values() for m in t["months"]})
    span = f"{months[0]} … {months[-1]}" if months else "no runs"
    snap = f", lake snapshot {done['lake_snapshot']}" if done["lake_snapshot"] is not None else ""
    sys.stdout.write(f"exported {source} → {out}: {len(tables)} tables, "
                     f"{sum(t['rows'] for t in tables.values()):,} rows ({span}){snap}, {done['seconds']:.1f} s\n")
