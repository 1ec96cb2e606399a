"""Sending a transaction's messages once it commits: one round trip per queue.

Every ``publish_on_commit``, model event and outbox row of a transaction joins one
:class:`CommitBatch`, registered once with ``transaction.on_commit``; after the commit it
sends the messages of each queue together and relays the outbox rows together. Each
queue's messages go as one batch with an id of its own, which Redis publishes once
(``publish_batch_once.lua``): after a timeout the batch is sent again, safely.

A batch is tied to a savepoint context, exactly as Django ties ``on_commit`` callbacks:
a message published inside a savepoint that rolls back must not go out. So a message
joins the newest batch only while that batch is the last callback registered and was
registered in the same savepoints; otherwise (inside a new savepoint, or after another
``on_commit`` callback, whose order we keep) a new batch starts. In the common case,
a transaction without savepoints, that is one batch.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.db import transaction

from redisq_django.connection import get_broker
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import RedisRefused, RedisUnavailable
from redisq_django.core.ids import new_message_id

logger = logging.getLogger("redisq.publish")

#: How much of a payload the "not published" error log shows.
LOG_PREVIEW_CHARS = 500

#: Seconds to wait before each new try of a batch whose outcome is unknown (a timeout, a
#: lost connection): three tries in all. Short and bounded: the code that committed waits.
RETRY_BACKOFF_S = (0.05, 0.25)


def send_batch(queue: str, envelopes: list[Envelope]) -> None:
    """Send one queue's messages of a transaction, all or none, under a batch id of
    their own; after an unknown outcome the same batch is sent again (safe: Redis
    publishes a batch id once), up to ``len(RETRY_BACKOFF_S)`` more times.

    Raises:
        RedisUnavailable: every try failed; the outcome is unknown.
        RedisRefused: Redis refused the batch, so published none of it (not retried:
            the refusal lasts longer than our short backoff).
    """
    batch_id = new_message_id()
    for wait_s in (*RETRY_BACKOFF_S, None):
        try:
            get_broker().send(envelopes, batch=batch_id)
            return
        except RedisRefused:
            raise  # certain: nothing was published, and sending again now is refused too
        except RedisUnavailable:
            if wait_s is None:
                raise
            logger.warning(
                "Sending %d message(s) for queue %r after the commit: outcome unknown, "
                "trying again in %.2f s (safe: the batch is published at most once)",
                len(envelopes),
                queue,
                wait_s,
            )
            time.sleep(wait_s)


@dataclass(eq=False)
class CommitBatch:
    """The messages one transaction sends after it commits (see the module docstring)."""

    using: str | None
    envelopes: list[Envelope] = field(default_factory=list)
    outbox_rows: list[int] = field(default_factory=list)
    #: Run already. Django's ``captureOnCommitCallbacks(execute=True)`` runs a test's
    #: callbacks and leaves them registered (a ``TestCase`` never commits): a batch run
    #: once takes no new message (it would never be sent) and never sends twice.
    sent: bool = False

    # The transaction is committed: nothing here may raise into the code that committed
    # it (its data is saved), so every failure is logged instead.
    def __call__(self) -> None:
        if self.sent:
            return
        self.sent = True
        by_queue: dict[str, list[Envelope]] = {}
        for envelope in self.envelopes:
            by_queue.setdefault(envelope.queue, []).append(envelope)
        for queue, envelopes in by_queue.items():
            try:
                send_batch(queue, envelopes)
            except Exception as exc:
                _log_not_published(queue, envelopes, exc)
        if self.outbox_rows:
            from redisq_django.publishing.outbox import relay_rows

            try:
                relay_rows(self.outbox_rows, using=self.using)
            except Exception:  # the rows wait in the outbox for the relay
                logger.exception(
                    "Sending %d outbox message(s) after the commit failed; the relay "
                    "(runconsumer, or manage.py redisq relay) sends them later",
                    len(self.outbox_rows),
                )


def _log_not_published(queue: str, envelopes: list[Envelope], exc: Exception) -> None:
    # A refusal is certain: Redis executed nothing. Anything else (a timeout, a connection
    # lost mid-command, an unexpected error) may have happened after Redis stored it.
    outcome = (
        "was NOT published" if isinstance(exc, RedisRefused) else "may not have been published"
    )
    for e in envelopes:
        preview = e.payload_json.decode("utf-8", "replace")[:LOG_PREVIEW_CHARS]
        logger.error(
            "Message %s for queue %r %s after the commit: %s. Payload: %s. Check the "
            "queue and publish it again by hand if it is missing; to keep messages through "
            "Redis outages, enable the outbox: REDISQ['OUTBOX'] = True (or a list of queues).",
            e.id,
            queue,
            outcome,
            str(exc).rstrip("."),
            preview,
            exc_info=not isinstance(exc, RedisUnavailable),  # unexpected: show where
        )


def current_batch(using: str | None) -> CommitBatch | None:
    """The batch that messages published now in ``using``'s transaction join, or None
    outside a transaction (autocommit: send at once, as ``on_commit`` would)."""
    connection = transaction.get_connection(using)
    if not connection.in_atomic_block:
        return None
    # Django keeps (savepoint ids, callback, robust) tuples in run_on_commit; reading
    # the last one is the only way to know whether our batch is still the newest
    # callback of the same savepoint context (see the module docstring).
    hooks = connection.run_on_commit
    if hooks:
        sids, last, _ = hooks[-1]
        if (
            isinstance(last, CommitBatch)
            and not last.sent
            and sids == set(connection.savepoint_ids)
        ):
            return last
    batch = CommitBatch(using)
    transaction.on_commit(batch, using=using)
    return batch


def send_after_commit(envelope: Envelope, using: str | None) -> None:
    """Send ``envelope`` once ``using``'s transaction commits (at once in autocommit)."""
    batch = current_batch(using)
    if batch is None:
        CommitBatch(using, envelopes=[envelope])()
    else:
        batch.envelopes.append(envelope)


def relay_after_commit(row_pk: int, using: str | None) -> None:
    """Relay outbox row ``row_pk`` once ``using``'s transaction commits (at once in
    autocommit)."""
    batch = current_batch(using)
    if batch is None:
        CommitBatch(using, outbox_rows=[row_pk])()
    else:
        batch.outbox_rows.append(row_pk)
