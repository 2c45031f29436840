#!/usr/bin/env python3
"""The duplicates gate: no two places in ``tracekit/`` may share six or more same lines.

Runs the ``duplicates`` tool (``duplicates --most 200``, inside ``tracekit/``) when it is on
PATH and fails when it lists any pair of places with a side outside the protoc-generated protobuf
files (``tracekit/parsers/proto/``: generated code repeats itself by design). Where the tool is
not installed (CI images do not carry it) it says ``skipped: duplicates not installed`` and
passes: the gate is kept on the machines that have the tool.

Exit codes: 0 no pair (or skipped); 1 a pair outside the protobuf files, or the tool could not
read the whole tree (an ``incomplete:`` line, or more pairs than it listed).

Usage::

    .venv/bin/python tools/check_duplicates.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

#: Where generated code may repeat itself (relative to ``tracekit/``).
EXEMPT = ("parsers/proto/",)

#: ``D3 a.py:10-24 ~ b.py:40-54 shape (+2 more runs)``: the two places of one pair.
_ROW = re.compile(r"^D\d+ (\S+):\d+-\d+ ~ (\S+):\d+-\d+")


def problems(report: str) -> list[str]:
    """The lines of a ``duplicates`` report that fail the gate: pairs with a side outside
    :data:`EXEMPT`, ``incomplete:`` lines, and a ``(+N more pairs)`` line (pairs not listed)."""
    bad = []
    for line in report.splitlines():
        row = _ROW.match(line)
        if row is not None:
            if not all(side.startswith(EXEMPT) for side in row.groups()):
                bad.append(line)
        elif line.startswith("incomplete:") or re.match(r"^\(\+\d+ more pairs\)", line):
            bad.append(line)
    return bad


def main() -> int:
    """Run the gate on this checkout's ``tracekit/``; print what fails it."""
    tool = shutil.which("duplicates")
    if tool is None:
        print("skipped: duplicates not installed")
        return 0
    package = Path(__file__).resolve().parent.parent / "tracekit"
    report = subprocess.run([tool, "--most", "200", "--seconds", "300"], cwd=package, text=True,
                            capture_output=True, check=False).stdout
    bad = problems(report)
    if bad:
        print(f"duplicates in {package} (one piece of code should serve each of these):")
        print("\n".join(bad))
        return 1
    print("no duplicates outside the protobuf files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
