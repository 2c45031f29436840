"""Changes to stored runs after ingest, each in one transaction: a run's label, workload and tags
(:func:`update_runs`), removing runs (:func:`delete_runs`), the model a run served
(:func:`attach_model`) and its per-request token lengths (:func:`store_token_lengths`). Runs are
named by id or unique prefix. (A load's request records are attached by
:func:`tracekit.api.store_requests`.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tracekit.errors import TraceInputError
from tracekit.parsers.store_writer import insert_rows
from tracekit.store import delete_runs as store_delete_runs
from tracekit.store import open_store, resolve_run_id, resolve_store, update_run_meta, utc_now


def update_runs(
    run_ids: list[str], store: str | Path | None = None, *, label: str | None = None, workload: str | None = None,
    tags: dict[str, str] | None = None,
) -> dict[str, list[str]]:
    """Set the label and workload and merge tags of runs (ids or unique prefixes), in one
    transaction; return each full run id with the fields that changed."""
    path = resolve_store(store)
    with open_store(path) as con:
        ids = list(dict.fromkeys(resolve_run_id(con, r, path) for r in run_ids))
        con.execute("BEGIN")
        try:
            out = {rid: update_run_meta(con, rid, label=label, workload=workload, tags=tags) for rid in ids}
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return out


def delete_runs(run_ids: list[str], store: str | Path | None = None) -> list[str]:
    """Remove runs (ids or unique prefixes) with all their rows in one transaction; return their ids."""
    path = resolve_store(store)
    with open_store(path) as con:
        ids = list(dict.fromkeys(resolve_run_id(con, r, path) for r in run_ids))
        store_delete_runs(con, ids)
    return ids


def attach_model(
    run_id: str,
    model: str,
    store: str | Path | None = None,
    *,
    tp: int | None = None,
    weights: str | None = None,
    expert_weights: str | None = None,
    kv_cache: str | None = None,
) -> dict[str, Any]:
    """Attach the model a run served (a catalog name or a Hugging Face ``config.json`` path,
    :func:`tracekit.analysis.models.load`) so the analyzers cost its steps by what they must move.

    ``tp``: ranks the weights are split over; without it the trace's world size
    (``ranks.world_size``, else 1), and ``tp_source`` says which. ``weights``/``expert_weights``/
    ``kv_cache`` override the storage formats. Replaces an earlier attachment; returns the stored
    row as a dict (``model``, ``origin``, ``tensor_parallel``, ``tp_source``)."""
    from tracekit.analysis import models
    try:
        spec = models.load(model, weights=weights, expert_weights=expert_weights, kv_cache=kv_cache)
    except models.ModelError as exc:
        raise TraceInputError(Path(model), str(exc).removeprefix(f"{model}: ")) from None
    if tp is not None and tp < 1:
        raise TraceInputError(Path(model), f"--tp must be ≥ 1, got {tp}")
    path = resolve_store(store)
    with open_store(path) as con:
        run_id = resolve_run_id(con, run_id, path)
        if tp is None:
            ws = con.execute("SELECT max(world_size) FROM ranks WHERE run_id = ?", [run_id]).fetchall()[0][0]
            if ws:
                tp, tp_source = int(ws), "the trace's world size (ranks.world_size)"
            else:
                tp, tp_source = 1, "default (no world size in the trace)"
        else:
            tp_source = "--tp"
        row = {"model": spec.key, "origin": spec.origin, "tensor_parallel": tp, "tp_source": tp_source}
        con.execute("BEGIN")
        con.execute("DELETE FROM model_rows WHERE run_id = ?", [run_id])
        insert_rows(con, "model_rows", [{
            "run_id": run_id, "model": spec.key, "origin": spec.origin, "spec": models.to_json(spec),
            "tensor_parallel": tp, "tp_source": tp_source, "constants": json.dumps(spec.step_constants(tp)),
            "attached_at": utc_now(),
        }], source=None)
        con.execute("COMMIT")
    return row


def store_token_lengths(run_id: str, lengths_file: str | Path, store: str | Path | None = None) -> int:
    """Attach real (and padded) token counts per request to a run, for the padding analysis.

    The file has one request per line: ``real`` or ``real,padded`` (comma, tab or spaces; a
    header line and ``#`` comments are skipped). Without ``padded`` the request ran unpadded.
    Replaces the run's previous lengths; returns the number of requests stored.
    """
    src = Path(lengths_file)
    try:
        text = src.read_text()
    except OSError as exc:
        raise TraceInputError(src, f"cannot read: {exc.strerror or exc}") from None
    lengths: list[tuple[int, int]] = []  # (real, padded) tokens per request, in file order
    for n, line in enumerate(text.splitlines(), 1):
        fields = [f for f in re.split(r"[,\s]+", line.split("#", 1)[0].strip()) if f]
        if not fields:
            continue
        if not fields[0].isdigit():
            if lengths or n > 1:
                raise TraceInputError(src, f"line {n}: expected 'real[,padded]' token counts, got {line.strip()!r}")
            continue  # a header
        if len(fields) > 2 or not all(f.isdigit() for f in fields):
            raise TraceInputError(src, f"line {n}: expected 'real[,padded]' token counts, got {line.strip()!r}")
        real = int(fields[0])
        padded = int(fields[1]) if len(fields) == 2 else real
        if padded < real:
            raise TraceInputError(src, f"line {n}: padded length {padded} is below the real length {real}")
        lengths.append((real, padded))
    if not lengths:
        raise TraceInputError(src, "no token counts found")
    path = resolve_store(store)
    with open_store(path) as con:
        run_id = resolve_run_id(con, run_id, path)
        con.execute("BEGIN")
        con.execute("DELETE FROM token_length_rows WHERE run_id = ?", [run_id])
        insert_rows(con, "token_length_rows", [
            {"run_id": run_id, "request": i, "real_tokens": real, "padded_tokens": padded, "source": str(src)}
            for i, (real, padded) in enumerate(lengths)
        ], source=src, what="bad token count")
        con.execute("COMMIT")
    return len(lengths)
