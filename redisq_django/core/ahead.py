"""Batches sent in order on one connection, each one's replies read when the next is ready.

A caller that sends batch after batch (the Spark writer, a replay) otherwise waits for
Redis to append each batch before it builds the next: Redis's time and the caller's add
up. :class:`SendAhead` writes a batch without waiting and reads its replies when the
next batch is handed over, so Redis appends one batch while the caller builds the next
(bench/RESULTS.md, issue 37). The caller waits no longer for a batch than Redis needs
beyond the building of the next.

What stays as :meth:`Broker.send <redisq_django.core.broker.Broker.send>` has it:

* order: one connection, one batch written after the previous one's replies were read,
  so Redis runs the batches in the order given;
* all or none per batch (``MULTI``/``EXEC``) and the same commands, counters and queue
  registration;
* at most one batch unconfirmed at any time: after a failure :attr:`SendAhead.unsure`
  is that batch (whether it was published is unknown, as after a failed ``send``), and
  nothing was written after it;
* a batch refused for the queue's layout (partitioned meanwhile, or a record Redis lost)
  did nothing, and is sent again by ``Broker.send``, which reads the record first.

Only a plain batch to one queue goes ahead. A first send to a queue (its layout
checked), a partitioned queue, delayed messages, ``once``: those are sent by
``Broker.send`` itself, after the batch in flight is confirmed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis

from redisq_django.core.batch import transaction_data, transaction_replies
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import RedisRefused, translate_errors
from redisq_django.core.partitions import refused
from redisq_django.core.pipelining import Expect, Pipe
from redisq_django.core.sending import QueueSend
from redisq_django.core.types import RedisClient

if TYPE_CHECKING:
    from redisq_django.core.broker import Broker

_REPLY: Expect[None] = Expect(None)


class SendAhead:
    """Sends batches of envelopes through ``broker`` in the order given, each one's
    replies read when the next is sent or at :meth:`settle` (not thread-safe: one per
    thread).

    Args:
        broker: the broker whose client and queues the batches go through.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.client: RedisClient = broker.client  # for translate_errors
        self._pipe: Pipe[None] = Pipe(broker.client)
        # The batch written and not confirmed yet, and its plan.
        self._flight: tuple[Sequence[Envelope], QueueSend] | None = None
        #: The batch whose outcome a failure left unknown (None: none): it may or may
        #: not have been published; nothing was written after it.
        self.unsure: Sequence[Envelope] | None = None

    @translate_errors
    def send(self, envelopes: Sequence[Envelope], *, once: bool = False) -> None:
        """Send ``envelopes`` after every batch sent before: the batch in flight is
        confirmed first, then this one is written without waiting for its replies
        (or sent with ``Broker.send`` and confirmed, when it cannot go ahead; ``once``
        as there).

        Raises:
            RedisUnavailable, RedisRefused: as ``Broker.send``, for this batch or the
                one in flight before it (:attr:`unsure` says which is unknown).
        """
        self.settle()
        if not envelopes:
            return
        plan = None if once else self._ahead_plan(envelopes)
        if plan is None:
            self._send_now(envelopes, once)
            return
        data, count = transaction_data(plan.commands, plan.quiet)
        try:
            self._pipe.write(data, [_REPLY] * count)
        except BaseException:
            plan.failed()
            self._pipe.read_replies()  # the failure, as the reply of each: none unread
            self.unsure = envelopes
            raise
        self._flight = (envelopes, plan)

    @translate_errors
    def settle(self) -> None:
        """Confirm the batch in flight: wait for its replies.

        Raises:
            RedisUnavailable, RedisRefused: as ``Broker.send`` (:attr:`unsure` is the
                batch when its outcome is unknown; a refused batch did nothing).
        """
        if self._flight is None:
            return
        (envelopes, plan), self._flight = self._flight, None
        replies = self._pipe.read_replies()
        last = replies[-1] if replies else None
        try:
            if isinstance(last, BaseException) and not isinstance(last, redis.ResponseError):
                self.unsure = envelopes  # lost: whether it ran is unknown
                raise last
            transaction_replies(replies, len(plan.commands))
        except redis.ResponseError as exc:  # refused: it did nothing
            plan.failed()
            if not refused(exc, plan.keys):
                raise
            # Refused for the queue's layout (partitioned since, or a record Redis
            # lost): Broker.send reads the record again and sends it as it must go.
            self._send_now(envelopes)
            return
        except BaseException:
            plan.failed()
            raise
        self.broker.recorded(plan.keys.queue)

    def _send_now(self, envelopes: Sequence[Envelope], once: bool = False) -> None:
        """``Broker.send`` of ``envelopes``, :attr:`unsure` while its outcome is not
        known."""
        self.unsure = envelopes
        try:
            self.broker.send(envelopes, once=once)
        except (redis.ResponseError, RedisRefused):
            self.unsure = None  # refused: it did nothing
            raise
        self.unsure = None

    def close(self) -> None:
        """Give the connection back (a batch in flight is not confirmed: :meth:`settle`
        first to know its outcome)."""
        self._flight = None
        self._pipe.release()

    def _ahead_plan(self, envelopes: Sequence[Envelope]) -> QueueSend | None:
        """The plan of a batch that may go ahead (a plain transaction to one queue whose
        layout this process has checked), else None."""
        if not self._pipe.available:
            return None
        _, plans = self.broker.plan_send(envelopes)
        if len(plans) != 1:
            return None
        plan = plans[0][1]
        if plan.check is not None or plan.script is not None or not plan.transaction:
            return None
        return plan
