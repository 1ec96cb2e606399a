"""Settling what did not succeed: the retries, dead letters and hand-backs of a consumer."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from redisq_django.core import lifecycle, settle, trends
from redisq_django.core.clock import now_ms
from redisq_django.core.dead_entry import DeadReason, Failure, dead_fields
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.errors import translate_errors
from redisq_django.core.instances import Report
from redisq_django.core.keys import GroupKeys
from redisq_django.core.lifecycle import EventName
from redisq_django.core.outcome import Settlement
from redisq_django.core.renamed import renamed_keyword
from redisq_django.core.retry import RetryPolicy


class FailureSettling:
    """Retry, dead-letter, reject and hand back deliveries (``fail.lua``, one call each)."""

    gkeys: GroupKeys
    consumer: str
    instance: str
    policy: RetryPolicy
    history: bool
    ordered: bool
    report: Report
    _rng: random.Random
    _call: trends.CountedCalls

    def _holder(self, delivery: Delivery) -> tuple[str, str] | None:
        """An ordered consumer's delivery: its ``(ordering key or "", message id)``."""
        return (delivery.key or "", delivery.id) if self.ordered else None

    def _event(self, name: EventName, records: list[bytes], **details: Any) -> list[bytes]:
        """The event entry of a settle, or nothing when history is off."""
        if not self.history:
            return []
        return lifecycle.fields(name, self.consumer, self.instance, records, **details)

    def _settle(
        self,
        stream: Stream,
        entry_id: bytes,
        mode: str,
        due: int | str,
        fields: dict[bytes, bytes],
        event: list[bytes],
        counts: dict[str, int],
        holder: tuple[str | bytes, str | bytes] | None = None,
    ) -> bool:
        keys, args = settle.settle_call(
            self.gkeys,
            self.instance,
            stream,
            entry_id,
            mode,
            due,
            fields,
            event,
            self.history,
            holder,
        )
        return bool(self._call("fail", keys, args, counts))

    @renamed_keyword("message", "delivery")
    @translate_errors
    def fail(self, delivery: Delivery, failure: Failure | BaseException) -> Settlement:
        """Settle a failed delivery: retry after a backoff, or dead-letter it.

        The delivery is retried while it has had fewer than ``max_retries + 1``
        deliveries; otherwise it becomes a dead letter (reason ``failed``) with the
        error class, message and traceback of ``failure`` (or of the exception).

        Returns:
            Its settlement: ``RETRIED`` (with its backoff), ``DEAD`` (with the reason),
            or ``LOST`` when this instance no longer holds the delivery (its lease
            expired; the instance that took it over settles it).
        """
        if not self.policy.should_retry(delivery.attempts):
            return self.dead_letter(delivery, failure, DeadReason.FAILED)
        now = now_ms()  # the failure time kept for the operators: this host's clock
        wait_ms = max(1, int(self.policy.backoff(delivery.attempts, self._rng) * 1000))
        failure = Failure.of(failure)
        fields = settle.next_delivery(delivery, now, failed=True, error=failure)
        # Without `next_due`: fail.lua adds the due time it makes, by Redis's clock.
        event = self._event(
            EventName.RETRIED,
            [lifecycle.record(delivery.id, delivery.attempts, delivery.duration_ms)],
            failure=failure,
        )
        self.report.failed += 1
        counts = trends.settle_counts(self.consumer, True, trends.RETRIED, delivery.duration_ms)
        # "+<ms>": fail.lua makes it a due time by Redis's clock, never this host's.
        due = f"+{wait_ms}"
        settled = self._settle(
            delivery.stream,
            delivery.entry_id,
            settle.RETRY,
            due,
            fields,
            event,
            counts,
            self._holder(delivery),
        )
        return Settlement.retried(wait_ms) if settled else Settlement.lost()

    @renamed_keyword("message", "delivery")
    @translate_errors
    def dead_letter(
        self, delivery: Delivery, failure: Failure | BaseException, reason: DeadReason
    ) -> Settlement:
        """Make ``delivery`` a dead letter now, whatever its retry budget.

        Returns:
            Its settlement: ``DEAD`` (for ``reason``), or ``LOST`` when this instance no
            longer holds the delivery.
        """
        now = now_ms()  # the failure time kept for the operators: this host's clock
        failure = Failure.of(failure)
        dead = dead_fields(
            settle.next_delivery(delivery, now, failed=True),
            consumer=self.consumer,
            reason=reason,
            failure=failure,
            failed_at_ms=now,
        )
        event = self._event(
            EventName.DEAD,
            [lifecycle.record(delivery.id, delivery.attempts, delivery.duration_ms)],
            failure=failure,
            reason=reason,
        )
        ran = reason in (DeadReason.FAILED, DeadReason.REJECTED)  # its handler raised
        self.report.failed += ran
        counts = trends.settle_counts(self.consumer, ran, trends.DEAD, delivery.duration_ms)
        settled = self._settle(
            delivery.stream,
            delivery.entry_id,
            settle.DEAD,
            0,
            dead,
            event,
            counts,
            self._holder(delivery),
        )
        return Settlement.dead(reason) if settled else Settlement.lost()

    @renamed_keyword("message", "delivery")
    def reject(self, delivery: Delivery, failure: Failure | BaseException) -> Settlement:
        """Dead-letter ``delivery`` at once, without retries (reason ``rejected``)."""
        return self.dead_letter(delivery, failure, DeadReason.REJECTED)

    @renamed_keyword("messages", "deliveries")
    @translate_errors
    def release(self, deliveries: Sequence[Delivery]) -> int:
        """Hand fetched-but-unstarted deliveries back at once (graceful shutdown).

        Each goes to the consumer's retry set due now, without counting an attempt, so
        another instance receives it within one poll interval instead of waiting for the
        visibility timeout. Returns how many were released (held by this instance).
        """
        released = 0
        for m in deliveries:
            fields = settle.next_delivery(m, now_ms(), failed=False)
            event = self._event(EventName.RELEASED, [lifecycle.record(m.id, m.attempts - 1)])
            released += self._settle(
                m.stream, m.entry_id, settle.RETRY, 0, fields, event, {}, self._holder(m)
            )
        return released
