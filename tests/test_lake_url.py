"""``lake:`` URLs (``--store`` / ``TRACEKIT_STORE``): what they mean and how a bad one is refused.

Needs no DuckLake extension: parsing is plain Python and runs on every DuckDB version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.errors import StoreError
from tracekit.lake.url import is_lake, parse_lake_url
from tracekit.store import resolve_store


def test_postgresql_url_parts_and_libpq() -> None:
    url = parse_lake_url("lake:postgresql://ci@db.internal:6543/perf?data=s3://bucket/tracekit")
    assert (url.catalog, url.host, url.port, url.user, url.database) == ("postgresql", "db.internal", 6543, "ci", "perf")
    assert url.on_s3 and url.data == "s3://bucket/tracekit"
    assert url.libpq() == "dbname=perf host=db.internal port=6543 user=ci"
    assert url.ducklake() == "ducklake:postgres:dbname=perf host=db.internal port=6543 user=ci"


def test_postgresql_without_user_or_port_keeps_libpq_defaults(tmp_path: Path) -> None:
    url = parse_lake_url(f"lake:postgresql://localhost/perf?data={tmp_path}")
    assert url.libpq() == "dbname=perf host=localhost"  # libpq's own port and user apply
    assert url.data == str(tmp_path) and not url.on_s3


def test_sqlite_paths_follow_sqlalchemy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = parse_lake_url("lake:sqlite:///team/cat.sqlite?data=files")
    assert relative.catalog_file == str(tmp_path / "team" / "cat.sqlite")
    assert relative.data == str(tmp_path / "files")  # made absolute: the catalog records it
    absolute = parse_lake_url("lake:sqlite:////srv/lake/cat.sqlite?data=/srv/lake/data")
    assert absolute.catalog_file == "/srv/lake/cat.sqlite"
    assert absolute.ducklake() == "ducklake:sqlite:/srv/lake/cat.sqlite"


@pytest.mark.parametrize(("text", "reason"), [
    ("lake:mysql://h/db?data=/x", "unknown lake catalog 'mysql'"),
    ("lake:postgresql://h/db", "no data location"),
    ("lake:postgresql://h/db?data=/x&mode=rw", "unknown lake URL parameter 'mode'"),
    ("lake:postgresql:///db?data=/x", "no host"),
    ("lake:postgresql://h:99999/db?data=/x", "port '99999'"),
    ("lake:postgresql://h/?data=/x", "no database name"),
    ("lake:postgresql://h/db?data=gs://b/p", "gs:// is not supported"),
    ("lake:sqlite:///cat.sqlite?data=s3://b/p", "its data must be a local directory"),
    ("lake:sqlite://host/cat.sqlite?data=/x", "a local file"),
])
def test_bad_urls_are_one_line_store_errors(text: str, reason: str) -> None:
    with pytest.raises(StoreError) as info:
        parse_lake_url(text)
    assert reason in info.value.reason and "\n" not in str(info.value)
    assert info.value.path == text


def test_a_password_in_the_url_is_refused_without_printing_it() -> None:
    with pytest.raises(StoreError) as info:
        parse_lake_url("lake:postgresql://ci:hunter2secret@db/perf?data=/x")
    assert "hunter2secret" not in str(info.value)
    assert "PGPASSWORD" in info.value.reason


def test_resolve_store_keeps_lake_urls_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "lake:postgresql://db/perf?data=/x"
    assert is_lake(url) and not is_lake(Path("lake.duckdb")) and not is_lake("lake.duckdb")
    assert resolve_store(url) == url  # a Path would fold the // of the URL
    monkeypatch.setenv("TRACEKIT_STORE", url)
    assert resolve_store(None) == url
    monkeypatch.setenv("TRACEKIT_STORE", "team.duckdb")
    assert resolve_store(None) == Path("team.duckdb")
