"""What an archive run did, counted from its streaming queries' progress reports.

Nothing is read back from the archive to count it: every micro-batch reports how many
rows it read (``numInputRows``) and, through ``DataFrame.observe``, how many of them
belong to each queue. A :class:`TableTally` collects those reports while the query runs;
:class:`ArchiveSummary` is the result the job returns and the CLI prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The per-queue count of rows that belong to no queue known when the run started (a queue
#: created while a continuous run goes on).
OTHER_QUEUES = "new queues"


@dataclass(frozen=True, slots=True)
class TableSummary:
    """One archived table (``messages`` or ``events``) of a run.

    Attributes:
        rows: rows written to the archive by this run.
        per_queue: those rows by queue (queues with none are left out).
        batches: micro-batches that wrote rows.
        busy_ms: the time those micro-batches took (Spark's ``triggerExecution``), ms.
    """

    rows: int = 0
    per_queue: Mapping[str, int] = field(default_factory=dict)
    batches: int = 0
    busy_ms: int = 0

    @property
    def busy_rate(self) -> float:
        """Rows per second while a micro-batch was running (0 when nothing ran)."""
        return self.rows * 1000 / self.busy_ms if self.busy_ms else 0.0


@dataclass(frozen=True, slots=True)
class ArchiveSummary:
    """The result of an ``archive`` run.

    Attributes:
        messages: what was archived from the queues' logs.
        events: what was archived from the queues' events streams.
        seconds: wall time from starting the queries to their end.
        notes: what the user should know (an archive registered again).
        gaps: entries skipped because they were removed before the archive stored them
            (``failOnDataLoss`` false), one line each; also in ``ROOT/_gaps``.
    """

    messages: TableSummary
    events: TableSummary
    seconds: float
    notes: tuple[str, ...] = ()
    gaps: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        """Messages and events archived."""
        return self.messages.rows + self.events.rows

    @property
    def rate(self) -> float:
        """Rows archived per second of the run's wall time."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """``archived messages=N events=M (q: n/m, ...) in S s, R rows/s``."""
        # Known queues by name, rows of queues created during the run last.
        queues = sorted(
            set(self.messages.per_queue) | set(self.events.per_queue),
            key=lambda q: (q == OTHER_QUEUES, q),
        )
        detail = ", ".join(
            f"{q}: {self.messages.per_queue.get(q, 0)}/{self.events.per_queue.get(q, 0)}"
            for q in queues
        )
        never = "".join(
            f"\nnever archived (failOnDataLoss off, recorded in ROOT/_gaps): {gap}"
            for gap in self.gaps
        )
        return (
            f"archived messages={self.messages.rows} events={self.events.rows}"
            + (f" ({detail})" if detail else "")
            + f" in {self.seconds:.1f} s, {self.rate:,.0f} rows/s"
            + never
        )


class TableTally:
    """Counts one streaming query's progress reports, each once.

    ``recentProgress`` returns the last reports (100 by default), oldest first, every
    time it is asked; only reports newer than the newest one counted are counted, so that
    polling it repeatedly counts each batch once (and a long run keeps no list of them).
    Reports of idle triggers (no new rows) count nothing.

    Args:
        metric: the name given to ``DataFrame.observe``.
        queue_columns: the observed column holding each queue's count, by queue name.
        only_queue: the one queue every row belongs to (nothing observed then).
    """

    def __init__(
        self, metric: str, queue_columns: Mapping[str, str], *, only_queue: str | None = None
    ) -> None:
        self.metric = metric
        self.queue_columns = dict(queue_columns)
        self.only_queue = only_queue
        self._newest: tuple[str, int] = ("", -1)  # (timestamp, batch id) counted last
        self.rows = 0
        self.batches = 0
        self.busy_ms = 0
        self.per_queue: dict[str, int] = {}

    def add(self, progresses: Iterable[Any]) -> None:
        """Count the reports (``StreamingQueryProgress``) not counted yet."""
        for progress in progresses:
            if self.counted(progress):
                continue
            self._newest = _key(progress)
            rows = progress.numInputRows or 0
            if rows <= 0:
                continue
            self.rows += rows
            self.batches += 1
            self.busy_ms += int((progress.durationMs or {}).get("triggerExecution", 0))
            self._add_queues(rows, progress.observedMetrics or {})

    def counted(self, progress: Any) -> bool:
        """Whether ``progress`` (or a newer report) was counted already."""
        return _key(progress) <= self._newest

    def _add_queues(self, rows: int, observed: Mapping[str, Any]) -> None:
        if self.only_queue is not None:
            self.per_queue[self.only_queue] = self.per_queue.get(self.only_queue, 0) + rows
            return
        metrics = observed.get(self.metric)
        values = metrics.asDict() if metrics is not None else {}
        known = 0
        for queue, column in self.queue_columns.items():
            n = int(values.get(column) or 0)
            if n:
                self.per_queue[queue] = self.per_queue.get(queue, 0) + n
                known += n
        if rows > known:
            self.per_queue[OTHER_QUEUES] = self.per_queue.get(OTHER_QUEUES, 0) + rows - known

    def summary(self) -> TableSummary:
        """What was counted so far."""
        return TableSummary(
            rows=self.rows,
            per_queue=dict(self.per_queue),
            batches=self.batches,
            busy_ms=self.busy_ms,
        )


def _key(progress: Any) -> tuple[str, int]:
    # Trigger start times (ISO 8601, UTC, ms) order the reports; the batch id breaks ties.
    return (str(progress.timestamp), int(progress.batchId))
