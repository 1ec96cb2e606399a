"""What a selection of dead letters holds: its groups by error, and the summary a
confirmation page shows before a bulk retry or discard (a few aggregate queries each,
whatever the number of rows)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count, Max, Min, QuerySet

from redisq_django.core.dead_entry import DeadReason
from redisq_django.models import DeadLetter

#: The most groups a listing of groups returns (the largest first).
GROUPS_LIMIT = 200

DEAD = DeadLetter.Status.DEAD


@dataclass(frozen=True)
class Group:
    """Dead letters of one consumer that failed with one error (class and normalised
    message), with their earliest first failure and latest last failure."""

    queue: str
    consumer: str
    error_class: str
    error_key: str
    count: int
    first_seen: dt.datetime | None
    last_seen: dt.datetime | None

    @property
    def lookup(self) -> dict[str, str]:
        """The filter that selects exactly this group's rows."""
        return {
            "queue": self.queue,
            "consumer": self.consumer,
            "error_class": self.error_class,
            "error_key": self.error_key,
        }


def groups(rows: QuerySet[DeadLetter], limit: int = GROUPS_LIMIT) -> tuple[list[Group], int]:
    """The groups of ``rows`` by consumer, error class and normalised message, the
    largest first (at most ``limit``), with counts and first/last failure; and how
    many groups there are. Two queries, whatever the number of rows."""
    keys = ("queue", "consumer", "error_class", "error_key")
    grouped = (
        rows.order_by()
        .values(*keys)
        .annotate(
            count=Count("pk"),
            first_seen=Min("first_failed_at"),
            last_seen=Max("last_failed_at"),
        )
    )
    top = grouped.order_by("-count", *keys)[:limit]
    return [Group(**g) for g in top], grouped.count()


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
