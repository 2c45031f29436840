"""tools/check_duplicates.py: the CI gate fails on a pair of places outside the protobuf files,
on a report the tool could not finish, and passes (saying so) where the tool is not installed."""

from __future__ import annotations

import stat
from pathlib import Path

import check_duplicates
import pytest
from conftest import ROOT

PROTO_PAIR = "D1 parsers/proto/a_pb2.py:13-38 ~ parsers/proto/b_pb2.py:13-38 shape"
PROTO_SOURCE_PAIR = "D2 parsers/proto/x.proto:28-37 ~ parsers/proto/y.proto:52-62 shape (+1 more run)"
CODE_PAIR = "D3 cli/main.py:246-253 ~ cli/main.py:561-568 shape boilerplate (+5 more runs)"
HALF_PROTO_PAIR = "D4 parsers/proto/a_pb2.py:1-9 ~ parsers/rocpd.py:10-18"


def report(*rows: str, tail: str = "") -> str:
    head = f"{len(rows)} pairs of places (113 files read), each sharing runs of 6 or more lines"
    return "\n".join([head, *rows, tail]) + "\n"


def test_protobuf_pairs_pass_and_others_fail() -> None:
    assert check_duplicates.problems(report(PROTO_PAIR, PROTO_SOURCE_PAIR)) == []
    assert check_duplicates.problems(report(PROTO_PAIR, CODE_PAIR, HALF_PROTO_PAIR)) == [CODE_PAIR, HALF_PROTO_PAIR]
    assert check_duplicates.problems("no duplicates (113 files read)\n") == []


def test_an_unfinished_report_fails() -> None:
    left_out = "left out: 5 runs of 6 lines that stand in more than 8 places each (too common to list)"
    assert check_duplicates.problems(report(PROTO_PAIR, tail=left_out)) == []
    incomplete = "incomplete: time: 30 of 113 files paired in 60 s"
    assert check_duplicates.problems(report(PROTO_PAIR, tail=incomplete)) == [incomplete]
    assert check_duplicates.problems(report(PROTO_PAIR, tail="(+7 more pairs)")) == ["(+7 more pairs)"]


def test_skipped_without_the_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no duplicates anywhere
    assert check_duplicates.main() == 0
    assert capsys.readouterr().out == "skipped: duplicates not installed\n"


def _fake_tool(folder: Path, output: str) -> Path:
    """A ``duplicates`` on PATH that records its folder and arguments and prints ``output``."""
    calls = folder / "calls"
    tool = folder / "duplicates"
    tool.write_text(f"#!/bin/sh\npwd > {calls}\necho \"$@\" >> {calls}\ncat <<'EOF'\n{output}EOF\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return calls


@pytest.mark.parametrize(("rows", "code"), [((PROTO_PAIR,), 0), ((PROTO_PAIR, CODE_PAIR), 1)])
def test_runs_the_tool_in_the_package(rows: tuple[str, ...], code: int, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls = _fake_tool(tmp_path, report(*rows))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert check_duplicates.main() == code
    where, args = calls.read_text().splitlines()
    assert Path(where).resolve() == (ROOT / "tracekit").resolve()
    assert args.split()[:2] == ["--most", "200"]
    printed = capsys.readouterr().out
    assert (CODE_PAIR in printed) == (code == 1)
