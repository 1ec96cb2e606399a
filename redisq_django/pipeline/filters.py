"""Filter pushdown for batch reads (``DataSourceReader.pushFilters``, PySpark >= 4.1).

Spark calls it only when ``spark.sql.python.filterPushdown.enabled`` is true, which
:func:`redisq_django.pipeline.register` turns on. What is pushed:

- ``queue = x`` / ``queue IN (...)`` (every table) and ``consumer = x`` / ``IN`` (dead
  letters): fewer streams are read. These are exact, so Spark does not evaluate them again.
- Comparisons of the time column (``published_at`` for messages, ``time`` for events)
  with a timestamp: they narrow the entry-id range read. Spark still evaluates them,
  because the range is a superset: an event's time is its entry id's millisecond, but a
  message's ``published_at`` may precede its entry id (delayed messages, outbox relays),
  so a message range gets a lower bound only, widened by :data:`CLOCK_SKEW_MS`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from redisq_django.pipeline.schemas import TIME_COLUMNS, Table

#: How much earlier than ``published_at`` a message's entry id may be (clocks of the
#: publishing host and of Redis disagreeing): 5 minutes.
CLOCK_SKEW_MS = 5 * 60 * 1000


@dataclass
class Pushed:
    """What the pushed filters allow: queue and consumer names (None: any) and an
    inclusive millisecond range of entry ids (None: unbounded)."""

    queues: set[str] | None = None
    consumers: set[str] | None = None
    min_ms: int | None = None
    max_ms: int | None = None

    def allows_queue(self, queue: str) -> bool:
        """Whether ``queue`` may hold matching rows."""
        return self.queues is None or queue in self.queues

    def allows_consumer(self, consumer: str | None) -> bool:
        """Whether ``consumer``'s dead letters may hold matching rows."""
        return consumer is None or self.consumers is None or consumer in self.consumers


def _names(f: Filter) -> set[str] | None:
    if isinstance(f, EqualTo) and isinstance(f.value, str):
        return {f.value}
    if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
        return set(f.value)
    return None


def _ms(value: Any) -> float | None:
    # Only aware datetimes are pushed: a naive one's zone is not known here.
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.timestamp() * 1000.0
    return None


def _restrict(current: set[str] | None, names: set[str]) -> set[str]:
    return names if current is None else current & names


def push(table: Table, filters: Iterable[Filter], pushed: Pushed) -> Iterator[Filter]:
    """Record in ``pushed`` what ``filters`` allow; yield those Spark must still apply.

    Args:
        table: the table read (decides which column is the time column).
        filters: the filters Spark offers (ANDed).
        pushed: updated in place.
    """
    time_column = TIME_COLUMNS.get(table)
    exact = table is Table.EVENTS
    for f in filters:
        column = f.attribute[0] if len(f.attribute) == 1 else None  # type: ignore[attr-defined]
        names = _names(f)
        if column == "queue" and names is not None:
            pushed.queues = _restrict(pushed.queues, names)
            continue
        if column == "consumer" and table is Table.DEAD and names is not None:
            pushed.consumers = _restrict(pushed.consumers, names)
            continue
        ms = _ms(getattr(f, "value", None)) if column == time_column else None
        if ms is not None:
            lower = isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo)
            upper = isinstance(f, LessThan | LessThanOrEqual | EqualTo)
            if lower:
                bound = math.floor(ms) - (0 if exact else CLOCK_SKEW_MS)
                pushed.min_ms = bound if pushed.min_ms is None else max(pushed.min_ms, bound)
            if upper and exact:  # published_at gives a message's entry id no upper bound
                bound = math.ceil(ms)
                pushed.max_ms = bound if pushed.max_ms is None else min(pushed.max_ms, bound)
        yield f
