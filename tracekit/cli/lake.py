"""``tracekit lake …``: create and maintain a team lake (``docs/team-store.md``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from tracekit.cli.params import OneLineErrorsGroup
from tracekit.errors import TracekitError

lake_app = typer.Typer(
    name="lake", cls=OneLineErrorsGroup, no_args_is_help=True, add_completion=False,
    help="Create and compact a team lake store (DuckLake: PostgreSQL or SQLite catalog, Parquet data).",
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
