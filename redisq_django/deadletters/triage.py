"""Dead-letter triage: retry or discard one dead letter, a selection, or every one
matching a filter (server side, in chunks, at any size). The admin and ``manage.py
redisq dead`` call these functions (their causes and summaries are
:mod:`~redisq_django.deadletters.breakdown`'s).

Every retry and discard is recorded in the admin history (``LogEntry``, one per row: who
and when) when a user is given, and sent as the ``dead_letters_retried`` /
``dead_letters_discarded`` signals once per chunk.

A retry of a chunk is one database transaction and one write to Redis (a second one for
the results of task dead letters, after the commit), in this order:

1. claim: its rows still dead are marked retried, by whom and when (one ``UPDATE …
   WHERE status = 'dead'``, which takes their locks, the database's write lock on
   SQLite). When rows another operator retried or discarded since they were read are
   among them, the transaction starts again without those, before anything is sent: two
   operators retrying the same rows at once never both send one;
2. every claimed row's envelope is re-driven to its own consumer, all in one write to
   Redis (``redrive.lua`` per row);
3. the rows Redis refused (logged) are dead again as they were, the others get their
   admin history; then the commit.

What a failure costs: none loses a dead letter, since a row leaves status ``dead`` only
in the commit that follows Redis's acceptance of its message. Redis unreachable at step
2: the transaction is rolled back, the chunk stays dead and nothing of it was sent
(earlier chunks stay done); run it again. The process dying, the database failing, or
Redis's reply lost (a timeout) after Redis accepted a chunk and before the commit: the
chunk stays dead though its messages were sent, and retrying it again sends them a second
time. So delivery is at least once, and a duplicate needs a failure in that window; it
costs at most one chunk (:data:`CHUNK` rows).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from redisq_django import admin_log
from redisq_django.connection import get_broker
from redisq_django.core import Broker, Place
from redisq_django.core.dead_entry import DeadReason
from redisq_django.core.errors import RedisqError, RedisUnavailable
from redisq_django.core.wire import loggable
from redisq_django.models import DeadLetter
from redisq_django.signals import dead_letters_discarded, dead_letters_retried

if TYPE_CHECKING:
    from typing import TypeAlias

    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser, User

    #: Who acts: a user (written on the rows and in the admin history), an anonymous
    #: one, or None (the shell); only a saved user is recorded.
    Operator: TypeAlias = AbstractBaseUser | AnonymousUser | None

logger = logging.getLogger("redisq.deadletters")

#: Dead letters retried or discarded per transaction (and Redis round trip).
CHUNK = 500

DEAD = DeadLetter.Status.DEAD

#: The change messages recorded in the admin history (stored as is, read by anyone).
DISCARDED_LOG = "Discarded"


def retried_log(row: DeadLetter) -> str:
    """The history text of retrying ``row``."""
    return f"Retried: sent again to {row.queue}/{row.consumer}"


def not_redrivable_reason(row: DeadLetter) -> str:
    """Why a dead letter cannot be delivered again, or "" when it can."""
    if row.reason == DeadReason.UNDECODABLE:
        return (
            "It is undecodable: its Redis entry was not a valid message, so a handler "
            "would only get raw fields and fail again. Download its raw fields, publish a "
            "corrected message, and discard this one."
        )
    if not row.envelope:
        return (
            "It is a bare record: the database refused its details when it was stored, "
            "so its envelope is missing. Download its raw fields and discard it."
        )
    return ""


def redrivable(row: DeadLetter) -> bool:
    """Whether a dead letter can be delivered again: not undecodable (it would only die
    again), and stored with its envelope (a bare record has none)."""
    return not not_redrivable_reason(row)


@dataclass
class BulkResult:
    """What a retry or discard of many dead letters did.

    Attributes:
        done: rows retried (or discarded).
        skipped: dead rows that cannot be retried (undecodable, bare records): left dead.
        remaining: rows still matching and dead that were not reached (time budget
            spent, or Redis unreachable): run it again to continue.
        error: why it stopped early ("" when it did not).
    """

    done: int = 0
    skipped: int = 0
    remaining: int = 0
    error: str = ""


def _user(user: Operator) -> User | None:
    """``user`` when it is one the database knows (never an anonymous one), as the row's
    ``retried_by`` takes it (``AUTH_USER_MODEL``, which the type checker sees as
    ``User``)."""
    # An anonymous user's pk is None: it cannot be written on a row nor in the history.
    return cast("User", user) if getattr(user, "pk", None) else None


def record(
    user: Operator, rows: Iterable[DeadLetter], message: Callable[[DeadLetter], str]
) -> None:
    """Write one admin-history entry per row (bulk, per distinct message) for ``user``;
    nothing without a user (the shell) or without ``django.contrib.admin``."""
    if _user(user) is None or not admin_log.is_kept():
        return
    by_message: dict[str, list[DeadLetter]] = defaultdict(list)
    for row in rows:
        by_message[message(row)].append(row)
    for text, same_text in by_message.items():
        admin_log.log_change(user, same_text, text)


#: Times a chunk is claimed again after other operators changed some of its rows between
#: the read and the claim, before the retry gives up (:class:`RetryConflict`).
CLAIM_ATTEMPTS = 3


class RetryConflict(RedisqError):
    """Other operators kept retrying or discarding these dead letters while this retry
    claimed them; nothing of the chunk was sent."""


class _Changed(RedisqError):
    """Rows of the chunk left status ``dead`` between the read and the claim (rolls the
    chunk's transaction back before anything is sent)."""


def _redrive_all(broker: Broker, rows: list[DeadLetter]) -> list[object]:
    """Deliver each row's envelope again to its own consumer only (to the partition it
    died in, or a keyed one to its key's): one write to Redis (one pipeline routed by
    slot on a Cluster client). Returns each row's reply (an exception for one Redis
    refused).

    Raises:
        RedisUnavailable: Redis cannot be reached.
    """
    targets: list[tuple[str | Place, str, dict[str | bytes, object]]] = []
    for row in rows:
        envelope: dict[str | bytes, object] = dict(row.envelope)
        if "payload" not in envelope:
            envelope["payload"] = row.payload
        if "id" not in envelope:
            envelope["id"] = row.message_id
        targets.append((Place(row.queue, row.partition), row.consumer, envelope))
    return broker.dead_letters.redrive_envelopes(targets)


def _claim_and_redrive(todo: list[DeadLetter], user: Operator, broker: Broker) -> list[DeadLetter]:
    """One chunk's transaction (the module's steps 1-3); returns the rows re-driven.

    Raises:
        _Changed: some of ``todo`` were not dead any more (nothing was sent).
        RedisUnavailable: Redis cannot be reached (nothing is marked).
    """
    now = timezone.now()
    who = _user(user)
    with transaction.atomic():
        claimed = DeadLetter.objects.filter(pk__in=[r.pk for r in todo], status=DEAD).update(
            status=DeadLetter.Status.RETRIED,
            retry_count=F("retry_count") + 1,
            retried_at=now,
            retried_by=who,
            updated_at=now,
        )
        if claimed != len(todo):
            raise _Changed
        sent, refused = [], []
        for row, reply in zip(todo, _redrive_all(broker, todo), strict=True):
            if isinstance(reply, Exception):
                logger.error(
                    "Dead letter %s was not sent again: %s", loggable(row.message_id), reply
                )
                refused.append(row)
            else:
                sent.append(row)
        if refused:  # dead again, as they were (the objects still say how)
            DeadLetter.objects.filter(pk__in=[r.pk for r in refused]).update(
                retry_count=F("retry_count") - 1
            )
            DeadLetter.objects.bulk_update(
                refused, ["status", "retried_at", "retried_by", "updated_at"]
            )
        for row in sent:  # the objects say what the rows say (history, signal receivers)
            row.status = DeadLetter.Status.RETRIED
            row.retry_count += 1
            row.retried_at, row.retried_by, row.updated_at = now, who, now
        record(user, sent, retried_log)
    return sent


def _retry_chunk(
    rows: list[DeadLetter], user: Operator, broker: Broker
) -> tuple[list[DeadLetter], list[DeadLetter]]:
    """Retry ``rows`` (one chunk, one transaction); returns (retried, skipped).

    Raises:
        RedisUnavailable: Redis cannot be reached (the chunk stays dead).
        RetryConflict: see :data:`CLAIM_ATTEMPTS` (the chunk stays as others left it).
    """
    dead = [r for r in rows if r.status == DEAD]
    skipped = [r for r in dead if not redrivable(r)]
    if skipped:
        logger.warning(
            "%d dead letter(s) cannot be sent again (undecodable or bare records), e.g. "
            "%s of %s/%s; discard them",
            len(skipped),
            loggable(skipped[0].message_id),
            skipped[0].queue,
            skipped[0].consumer,
        )
    todo: list[DeadLetter] = []
    seen: set[object] = set()
    for row in dead:  # one object per row: a row given twice is sent once
        if redrivable(row) and row.pk not in seen:
            seen.add(row.pk)
            todo.append(row)
    for _ in range(CLAIM_ATTEMPTS):
        if not todo:
            return [], skipped
        try:
            sent = _claim_and_redrive(todo, user, broker)
            break
        except _Changed:
            # Only rows still dead: another operator retried or discarded some meanwhile.
            still = set(
                DeadLetter.objects.filter(pk__in=[r.pk for r in todo], status=DEAD).values_list(
                    "pk", flat=True
                )
            )
            todo = [r for r in todo if r.pk in still]
    else:
        raise RetryConflict(
            f"Other operators kept retrying or discarding these {len(todo)} dead letters "
            "at the same time; none of them was sent. Run the retry again."
        )
    if sent:
        logger.info(
            "%d dead letter(s) re-driven, each to its own consumer, by %s",
            len(sent),
            getattr(user, "username", None) or "the shell",
        )
        dead_letters_retried.send(sender=DeadLetter, rows=sent, user=user)
    return sent, skipped


def _discard_chunk(
    rows: list[DeadLetter], user: Operator
) -> tuple[list[DeadLetter], list[DeadLetter]]:
    """Discard ``rows`` (one chunk, one transaction); returns (discarded, [])."""
    dead = [r for r in rows if r.status == DEAD]
    with transaction.atomic():
        still = set(
            DeadLetter.objects.select_for_update()
            .filter(pk__in=[r.pk for r in dead], status=DEAD)
            .values_list("pk", flat=True)
        )
        changed = [r for r in dead if r.pk in still]
        now = timezone.now()
        DeadLetter.objects.filter(pk__in=still).update(
            status=DeadLetter.Status.DISCARDED, updated_at=now
        )
        for row in changed:
            row.status, row.updated_at = DeadLetter.Status.DISCARDED, now
        record(user, changed, lambda row: DISCARDED_LOG)
    if changed:
        logger.info(
            "%d dead letter(s) discarded by %s",
            len(changed),
            getattr(user, "username", None) or "the shell",
        )
        dead_letters_discarded.send(sender=DeadLetter, rows=changed, user=user)
    return changed, []


def _chunks(rows: Iterable[DeadLetter], size: int) -> Iterable[list[DeadLetter]]:
    batch: list[DeadLetter] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def retry(
    rows: Iterable[DeadLetter], user: Operator = None, *, broker: Broker | None = None
) -> int:
    """Deliver dead letters again, each to its own logical consumer only, with a fresh
    retry budget; records who and when. Rows not in status ``dead``, and those not
    :func:`redrivable` (logged), are skipped; the objects of those re-driven are updated
    in place.

    Returns:
        How many were re-driven.

    Raises:
        RedisUnavailable: Redis cannot be reached (the chunk it met stays dead).
        RetryConflict: other operators kept changing the same rows meanwhile.
    """
    broker = broker or get_broker()
    return sum(len(_retry_chunk(b, user, broker)[0]) for b in _chunks(rows, CHUNK))


def discard(rows: Iterable[DeadLetter], user: Operator = None) -> int:
    """Mark dead letters discarded (kept for the record, never delivered), updating the
    objects in place. Returns how many changed."""
    return sum(len(_discard_chunk(b, user)[0]) for b in _chunks(rows, CHUNK))


def _matching(
    rows: QuerySet[DeadLetter],
    act: Callable[[list[DeadLetter]], tuple[list[DeadLetter], list[DeadLetter]]],
    chunk: int,
    budget_s: float | None,
) -> BulkResult:
    """``act`` on every dead row of ``rows``, ``chunk`` rows at a time in primary-key
    order, until none is left or ``budget_s`` seconds are spent."""
    base = rows.filter(status=DEAD).order_by("pk")
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    result = BulkResult()
    last = 0
    while batch := list(base.filter(pk__gt=last)[:chunk]):
        try:
            done, skipped = act(batch)
        except (RedisUnavailable, RetryConflict) as exc:
            result.error = str(exc)
            result.remaining = base.filter(pk__gte=batch[0].pk).count()
            return result
        last = batch[-1].pk
        result.done += len(done)
        result.skipped += len(skipped)
        if deadline is not None and time.monotonic() > deadline:
            result.remaining = base.filter(pk__gt=last).count()
            break
    return result


def retry_matching(
    rows: QuerySet[DeadLetter],
    user: Operator = None,
    *,
    broker: Broker | None = None,
    chunk: int = CHUNK,
    budget_s: float | None = None,
) -> BulkResult:
    """Retry every dead letter in status ``dead`` among ``rows`` (a filtered queryset,
    never loaded at once), ``chunk`` per transaction, for at most ``budget_s`` seconds
    (None: until done)."""
    broker = broker or get_broker()
    return _matching(rows, lambda batch: _retry_chunk(batch, user, broker), chunk, budget_s)


def discard_matching(
    rows: QuerySet[DeadLetter],
    user: Operator = None,
    *,
    chunk: int = CHUNK,
    budget_s: float | None = None,
) -> BulkResult:
    """Discard every dead letter in status ``dead`` among ``rows`` (see
    :func:`retry_matching`)."""
    return _matching(rows, lambda batch: _discard_chunk(batch, user), chunk, budget_s)
