"""Load driver: streaming requests against an OpenAI-compatible endpoint, timed per token.

:func:`run_load` applies a load (a :class:`LoadSpec`) and returns a :class:`LoadResult` with one
:class:`RequestRecord` per request; :func:`tracekit.api.store_requests` puts them in a run (the
``requests`` view) and the ``serving`` analyzer turns them into metrics. docs/capture.md ("Load
driver and request metrics") documents the options and the definitions. The parts:

* :mod:`~tracekit.collectors.load.prompts`: prompt-length distributions and prompts files.
* :mod:`~tracekit.collectors.load.client`: the HTTP/SSE client (:func:`run_load`,
  :func:`wait_for_endpoint`, :func:`check_spec`).
* :mod:`~tracekit.collectors.load.records`: a load's result and its summary (the ``serving``
  analyzer's SQL over the records).
* :mod:`~tracekit.collectors.load.prometheus`: parsing and scraping the server's Prometheus
  ``/metrics`` while the load runs (stored by :mod:`tracekit.server_metric_rows`).
* :mod:`tracekit.request_rows` (the store layer): :class:`RequestRecord`, the request log file
  and the ``request_rows`` inserts; re-exported here.
"""

from __future__ import annotations

from tracekit.collectors.load.client import (
    PROGRESS_INTERVAL_S,
    Endpoint,
    LoadProgress,
    LoadSpec,
    check_spec,
    run_load,
    wait_for_endpoint,
)
from tracekit.collectors.load.prompts import (
    MAX_PROMPT_TOKENS,
    VOCAB,
    LengthDist,
    Prompt,
    parse_length_dist,
    read_prompts,
)
from tracekit.collectors.load.records import LoadResult, LoadSummary, Percentiles, summarize
from tracekit.request_rows import (
    RequestRecord,
    insert_requests,
    read_requests,
    store_requests,
    write_requests,
)

__all__ = [
    "MAX_PROMPT_TOKENS", "PROGRESS_INTERVAL_S", "VOCAB", "Endpoint", "LengthDist", "LoadProgress", "LoadResult",
    "LoadSpec", "LoadSummary", "Percentiles", "Prompt", "RequestRecord", "check_spec", "insert_requests",
    "parse_length_dist", "read_prompts", "read_requests", "run_load", "store_requests", "summarize",
    "wait_for_endpoint", "write_requests",
]
