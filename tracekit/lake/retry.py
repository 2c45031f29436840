"""Retrying a lake transaction that a concurrent writer made fail.

DuckLake commits optimistically: two writers' commits that it cannot merge, and a SQLite catalog
that another process holds for a moment, fail with a retryable error, and the transaction is
rolled back. :func:`with_retries` runs the whole transaction again with jittered exponential
back-off (0.05 s doubling to 2 s, ×0.5–1.5): a SQLite catalog failed 35 of 80 concurrent commits
without it and none with it (``docs/team-store.md``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import duckdb

__all__ = ["MAX_RETRIES", "retryable", "with_retries"]

T = TypeVar("T")

#: How many times a commit that conflicted or found the catalog busy is tried again.
MAX_RETRIES = 30


def retryable(exc: duckdb.Error) -> bool:
    """Whether ``exc`` is a concurrent writer's doing (conflict, busy or locked catalog)."""
    text = str(exc).lower()
    return any(s in text for s in ("database is locked", "conflict", "busy", "could not serialize",
                                   "deadlock", "retry"))


def with_retries(transaction: Callable[[], T], is_retryable: Callable[[duckdb.Error], bool] = retryable) -> T:
    """``transaction()`` (which must BEGIN, COMMIT and roll back on failure itself), run again
    while it fails retryably (``is_retryable``, default :func:`retryable`), at most
    :data:`MAX_RETRIES` more times."""
    for attempt in range(MAX_RETRIES + 1):
        try:
            return transaction()
        except duckdb.Error as exc:
            if attempt == MAX_RETRIES or not is_retryable(exc):
                raise
            time.sleep(min(2.0, 0.05 * 2 ** min(attempt, 6)) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")
