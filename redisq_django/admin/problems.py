"""What is wrong right now, for the top of the overview: the lines an operator must see
before any chart — Redis unreachable, work waiting with no worker alive, work not
moving, messages held back behind an ordering key, new dead letters. Each line names
the queue or consumer, says what is wrong in figures, and links to the page where it is
dealt with. Built from what the overview read anyway (its stats and one database query),
so it costs no extra Redis round trip. (Messages dropped by a hard cap are a count since
the queue began: the table shows it.)"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Count
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from redisq_django.models import DeadLetter

#: Work waiting longer than this while workers are alive is "not moving".
NOT_MOVING_S = 300.0
#: Dead letters stored within this long count as new.
NEW_DEAD = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Problem:
    """One line of the overview's *Problems*.

    Attributes:
        kind: ``redis``, ``no_worker``, ``not_moving``, ``held_back`` or ``new_dead`` (a
            CSS class and what tests look for).
        where: the queue, or ``queue/consumer``.
        text: what is wrong, in figures.
        url: the page where it is dealt with.
        action: that link's words.
    """

    kind: str
    where: str
    text: str
    url: str
    action: str


def new_dead_letters(since: dt.datetime | None = None) -> dict[tuple[str, str], int]:
    """(queue, consumer) -> dead letters that died since ``since`` (an hour ago), one
    query (on the indexed time of their last failure)."""
    since = since or timezone.now() - NEW_DEAD
    rows = (
        DeadLetter.objects.filter(status=DeadLetter.Status.DEAD, last_failed_at__gte=since)
        .order_by()
        .values_list("queue", "consumer")
        .annotate(n=Count("pk"))
    )
    return {(q, c): n for q, c, n in rows}


def _consumer_url(queue: str, consumer: str) -> str:
    return reverse("admin:redisq_django_consumer_live", args=[queue, consumer])


def problems(
    queues: Sequence[Any], redis_error: str, new_dead: dict[tuple[str, str], int]
) -> list[Problem]:
    """The problems of the overview's ``queues`` (its ``QueueLine`` objects), worst
    first: Redis, then no worker, not moving, held back, new dead letters."""
    found: list[Problem] = []
    if redis_error:
        found.append(
            Problem(
                "redis",
                _("Redis"),
                _("Redis does not answer (%(error)s): every figure below is unknown.")
                % {"error": redis_error},
                "#redisq-banner",
                _("What to do"),
            )
        )
    found += _no_worker(queues)
    found += _not_moving(queues)
    found += _held_back(queues)
    found += _new_dead(queues, new_dead)
    return found


def _working(queues: Iterable[Any]) -> Iterable[tuple[Any, Any]]:
    """(queue line, consumer line) of every consumer with live figures, not paused."""
    for q in queues:
        if q.paused:
            continue
        for c in q.consumers:
            if c.stats is not None and not (c.row is not None and c.row.paused):
                yield q, c


def _no_worker(queues: Sequence[Any]) -> list[Problem]:
    out = []
    for q, c in _working(queues):
        waiting = c.stats.backlog + c.stats.held_back + c.stats.in_flight
        if waiting and c.stats.instances_alive == 0:
            out.append(
                Problem(
                    "no_worker",
                    f"{q.name}/{c.name}",
                    ngettext(
                        "%(n)d message waits and no worker is alive: start `manage.py "
                        "runconsumer %(queue)s` (or see why its workers died).",
                        "%(n)d messages wait and no worker is alive: start `manage.py "
                        "runconsumer %(queue)s` (or see why its workers died).",
                        waiting,
                    )
                    % {"n": waiting, "queue": q.name},
                    _consumer_url(q.name, c.name),
                    _("Its live page"),
                )
            )
    return out


def _not_moving(queues: Sequence[Any]) -> list[Problem]:
    out = []
    for q, c in _working(queues):
        age, alive = c.stats.oldest_undelivered_age_s, c.stats.instances_alive
        if alive and c.stats.backlog and age is not None and age > NOT_MOVING_S:
            out.append(
                Problem(
                    "not_moving",
                    f"{q.name}/{c.name}",
                    _(
                        "%(n)d waiting, the oldest for %(minutes)d min, although %(alive)d "
                        "instance(s) are alive: handlers are slow or stuck (see its In "
                        "flight list)."
                    )
                    % {
                        "n": c.stats.backlog,
                        "minutes": age // 60,
                        "alive": c.stats.instances_alive,
                    },
                    _consumer_url(q.name, c.name) + "?list=in_flight",
                    _("What runs now"),
                )
            )
    return out


def _held_back(queues: Sequence[Any]) -> list[Problem]:
    out = []
    for q in queues:
        for c in q.consumers:
            if c.stats is not None and c.stats.held_back:
                out.append(
                    Problem(
                        "held_back",
                        f"{q.name}/{c.name}",
                        ngettext(
                            "%(n)d message waits behind an earlier message of its ordering "
                            "key (running, retrying or lost): see Keys held back.",
                            "%(n)d messages wait behind earlier messages of their ordering "
                            "keys (running, retrying or lost): see Keys held back.",
                            c.stats.held_back,
                        )
                        % {"n": c.stats.held_back},
                        _consumer_url(q.name, c.name) + "#redisq-held",
                        _("Keys held back"),
                    )
                )
    return out


def _new_dead(queues: Sequence[Any], new_dead: dict[tuple[str, str], int]) -> list[Problem]:
    out = []
    causes = reverse("admin:redisq_django_deadletter_causes")
    for q in queues:
        for c in q.consumers:
            n = new_dead.get((q.name, c.name), 0)
            if n:
                out.append(
                    Problem(
                        "new_dead",
                        f"{q.name}/{c.name}",
                        ngettext(
                            "%(n)d new dead letter in the last hour.",
                            "%(n)d new dead letters in the last hour.",
                            n,
                        )
                        % {"n": n},
                        f"{causes}?"
                        + urlencode({"queue": q.name, "consumer": c.name, "status__exact": "dead"}),
                        _("By cause"),
                    )
                )
    return out
