"""XLA profiler XSpace protobufs: ``<host>.xplane.pb`` (and ``.xplane.pb.gz``), one file per host.

Written by ``jax.profiler``, ``torch_xla.debug.profiler`` and TensorFlow on TPU, GPU and CPU. This
module registers the format and recognizes files; the reading itself (protobuf from the project's
own schema in ``proto/``, NumPy column batches into DuckDB) lives in ``_xplane_read`` and is
imported only when an XPlane file is ingested. What goes where is documented there and in
``docs/schema.md``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tracekit.errors import TraceInputError
from tracekit.parsers._io import read_head
from tracekit.parsers.base import IngestContext, Parser


class XPlaneParser(Parser, format_name="xplane"):
    """Reads XSpace protobufs; a directory (a profile session) is one run, one rank per host."""

    suffixes = (".xplane.pb", ".xplane.pb.gz")

    def sniff(self, path: Path) -> bool:
        if not path.name.lower().endswith(self.suffixes):
            return False
        try:
            head = read_head(path, 2)
        except TraceInputError:
            return True  # let parse() say what is wrong with it
        return not head or head[:1] == b"\x0a"  # XSpace field 1 (planes), length-delimited

    def explain(self, path: Path) -> str:
        from tracekit.parsers._xplane_read import decode_xspace

        try:
            decode_xspace(path).close()  # streamed: bounded memory whatever the file
        except TraceInputError as exc:
            return exc.reason
        return "not an XPlane profile"

    def prepare(self, files: list[Path], *, python_events: bool = False, started: Any = None) -> None:
        """Import the protobuf/NumPy reader and decode the first file in a background thread
        while ingest opens (or creates) the store: DuckDB releases the GIL meanwhile, so the
        imports and decoding overlap the store's set-up."""
        first = min(files)  # parse() reads the files in sorted order: this one first
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                from tracekit.parsers._xplane_read import decode_xspace

                box["decoded"] = decode_xspace(first)
            except BaseException as exc:  # noqa: BLE001 - re-raised by parse(), inside the ingest transaction
                box["error"] = exc

        thread = threading.Thread(target=work, name="tracekit-xplane-prepare", daemon=True)
        thread.start()
        self._prepared: tuple[Path, threading.Thread, dict[str, Any]] | None = (first, thread, box)

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        from tracekit.parsers._xplane_read import XSpaceReader, decode_xspace

        prepared = getattr(self, "_prepared", None)
        self._prepared = None
        for rank, path in enumerate(sorted(files)):
            if prepared is not None and prepared[0] == path:
                _, thread, box = prepared
                thread.join()
                if "error" in box:
                    raise box["error"]
                decoded = box["decoded"]
            else:
                decoded = decode_xspace(path)
            try:
                XSpaceReader(decoded, path, rank, ctx).run()
            finally:
                decoded.close()


