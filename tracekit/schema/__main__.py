"""``python -m tracekit.schema [PATH]``: write ``docs/schema.md`` (or PATH) from the schema's SQL files."""

from __future__ import annotations

import sys
from pathlib import Path

from tracekit.schema.doc import markdown

target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "schema.md"
target.write_text(markdown(), encoding="utf-8")
print(f"wrote {target}")
