"""rocprofv3 JSON output: ``<pid>_results.json`` (``--output-format json``).

Layout: ``{"rocprofiler-sdk-tool": [{metadata, agents, counters, strings, kernel_symbols,
callback_records, buffer_records, ...}, ...]}``, one list entry per process. Records carry
``kind``/``operation`` as enum integers, resolved through ``strings.buffer_records`` (array
position = enum value: ``{"kind": "KERNEL_DISPATCH", "operations": [...]}``). Kernel names come
from ``kernel_symbols`` (``formatted_kernel_name``, what the CSV writes), agents are referred to by
handle, roctx messages sit in ``strings.marker_api`` keyed by correlation id, and counters are
``callback_records.counter_collection[].records[]``: one value per hardware instance, summed here
per (dispatch, counter) like the CSV's ``Counter_Value``.

The store gets what the rocprofv3 CSV reader stores for the same run (see ``rocprofv3_csv``),
plus what only the JSON has: copy sizes (``bytes``), the thread of each copy, external
correlation ids (0 means none and is stored as NULL), the host name and GPU memory size. LDS
(``shared_mem_bytes``) is the dispatch's group segment size, dynamic LDS included, where the CSV
has the kernel's static LDS rounded up to the allocation granule.

The reading itself lives in ``_rocprofv3_json_read`` (imported only when such a file is ingested).
The file is decoded whole (msgspec into typed structs, then NumPy columns handed to DuckDB), not
streamed: memory grows with the file (about 4x its decompressed size: 1.3 GB for a 310 MB file).
A document whose decompressed size times that factor (``RSS_PER_BYTE``) exceeds the memory
budget (``TRACEKIT_MEMORY_LIMIT``, default 512 MB: 128 MB of JSON) is refused in one line before
it is all read, and so is gzip past the shared decompression-ratio cap; nesting deeper than the
decoder can take is refused as "JSON nesting deeper than N levels". Timestamps that do not fit
a signed 64-bit ns count are skipped and counted (``skipped_records["timestamp out of range"]``).
rocprofv3's docs recommend other formats for large traces; a streaming reader can replace
``_decode`` when that matters.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracekit.errors import TraceInputError
from tracekit.parsers._io import read_head
from tracekit.parsers.base import IngestContext, Parser
from tracekit.parsers.explain import refusal

_HEAD = re.compile(rb'^\s*\{\s*"rocprofiler-sdk-tool"\s*:\s*\[')


class RocprofJsonParser(Parser, format_name="rocprofv3_json"):
    """Reads ``<pid>_results.json`` of rocprofv3; one run per file or directory, a rank per process."""

    run_format = "rocprofv3"
    suffixes = ("_results.json", ".json")

    def sniff(self, path: Path) -> bool:
        name = path.name.lower()
        if not name.endswith((".json", ".json.gz")):
            return False
        try:
            head = read_head(path, 4096)
        except TraceInputError:
            return False
        return _HEAD.match(head.lstrip(b"\xef\xbb\xbf")) is not None

    def explain(self, path: Path) -> str:
        from tracekit.parsers._rocprofv3_json_read import _decode

        return refusal(_decode, path, "not a rocprofv3 results JSON")

    def parse(self, files: list[Path], ctx: IngestContext) -> None:
        from tracekit.parsers._rocprofv3_json_read import RocprofJsonReader

        RocprofJsonReader().parse(files, ctx)
