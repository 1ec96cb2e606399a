"""What a selection of dead letters holds: its causes (dead letters that failed the same
way), and the summary a confirmation page shows before a bulk retry or discard (a few
aggregate queries each, whatever the number of rows)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count, Max, Min, QuerySet
from django.db.models.functions import Substr

from redisq_django.core.dead_entry import DeadReason
from redisq_django.models import DeadLetter

#: The most causes a listing of causes returns (the largest first).
CAUSES_LIMIT = 200
#: Characters of a cause's sample error message.
SAMPLE_CHARS = 300

DEAD = DeadLetter.Status.DEAD


#: What makes a cause: the same error (consumer, task, error class and normalised
#: message), or the same task (consumer and task, whatever the error).
BY_ERROR, BY_TASK = "error", "task"
_KEYS = {
    BY_ERROR: ("queue", "consumer", "task", "error_class", "error_key"),
    BY_TASK: ("queue", "consumer", "task"),
}


@dataclass(frozen=True, kw_only=True)
class Cause:
    """A cause of dead letters: those of one consumer (and task, for a task queue) that
    failed with one error (class and normalised message; by task: any), with their
    count, earliest first failure, latest last failure and one raw error message as a
    sample (docs/layout.md, "Words")."""

    queue: str
    consumer: str
    task: str = ""
    error_class: str = ""
    error_key: str = ""
    count: int
    first_seen: dt.datetime | None
    last_seen: dt.datetime | None
    sample: str = ""
    by: str = BY_ERROR

    @property
    def lookup(self) -> dict[str, str]:
        """The filter that selects exactly this cause's rows."""
        found = {key: getattr(self, key) for key in _KEYS[self.by]}
        if not self.task:  # no task queue: every row has task ""
            del found["task"]
        return found


def causes(
    rows: QuerySet[DeadLetter], limit: int = CAUSES_LIMIT, *, by: str = BY_ERROR
) -> tuple[list[Cause], int]:
    """The causes of ``rows``: their dead letters by consumer, task, error class and
    normalised message (by :data:`BY_TASK`: consumer and task), the largest first (at
    most ``limit``), with counts, first/last failure and a sample error message; and how
    many causes there are. Two queries, whatever the number of rows."""
    keys = _KEYS[by]
    found = (
        rows.order_by()
        .values(*keys)
        .annotate(
            count=Count("pk"),
            first_seen=Min("first_failed_at"),
            last_seen=Max("last_failed_at"),
            # One raw message of the cause, as written (the key has placeholders).
            sample=Max(Substr("error_message", 1, SAMPLE_CHARS)),
        )
    )
    top = found.order_by("-count", *keys)[:limit]
    return [Cause(**c, by=by) for c in top], found.count()


@dataclass
class Summary:
    """What a bulk action would act on: the dead letters in status ``dead``."""

    count: int
    undecodable: int
    consumers: list[tuple[str, str, int]] = field(default_factory=list)
    more_consumers: int = 0
    error_classes: list[tuple[str, int]] = field(default_factory=list)
    more_error_classes: int = 0
    sample: list[DeadLetter] = field(default_factory=list)


def summary(rows: QuerySet[DeadLetter], top: int = 10, sample: int = 10) -> Summary:
    """Count, consumers and error classes (the ``top`` largest, with how many more) and
    a sample of the dead rows among ``rows``, in a few aggregate queries."""
    dead = rows.filter(status=DEAD).order_by()
    by_consumer = dead.values("queue", "consumer").annotate(n=Count("pk")).order_by("-n", "queue")
    by_class = dead.values("error_class").annotate(n=Count("pk")).order_by("-n", "error_class")
    consumers = [(c["queue"], c["consumer"], c["n"]) for c in by_consumer[:top]]
    classes = [(c["error_class"], c["n"]) for c in by_class[:top]]
    return Summary(
        count=dead.count(),
        undecodable=dead.filter(reason=DeadReason.UNDECODABLE).count(),
        consumers=consumers,
        more_consumers=max(0, by_consumer.count() - len(consumers)),
        error_classes=classes,
        more_error_classes=max(0, by_class.count() - len(classes)),
        sample=list(dead.order_by("-last_failed_at", "-pk")[:sample]),
    )
