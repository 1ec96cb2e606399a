"""One running instance of a logical consumer: fetch, ack, fail, extend, reclaim."""

from __future__ import annotations

import random
import traceback as tb
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from redisq_django.core import codec
from redisq_django.core._util import flatten, now_ms, to_str, translate_errors
from redisq_django.core.backoff import compute_backoff, should_retry
from redisq_django.core.envelope import (
    REASON_FAILED,
    REASON_LEASE_EXPIRED,
    REASON_REJECTED,
    dead_fields,
    retry_fields,
    undecodable_fields,
)
from redisq_django.core.errors import ConsumerNotFound
from redisq_django.core.message import Message

if TYPE_CHECKING:
    from redisq_django.core.broker import Broker

LOG, DIRECT = "log", "direct"

#: Outcomes of :meth:`Subscription.fail`.
RETRIED, DEAD, LOST = "retried", "dead", "lost"


class Subscription:
    """An instance of logical consumer ``group`` on ``queue`` (see ``Broker.subscribe``).

    Not thread-safe: give each thread its own (they may share the broker).
    """

    def __init__(
        self,
        broker: Broker,
        queue: str,
        group: str,
        consumer: str,
        *,
        max_retries: int | None = None,
        backoff_s: float | None = None,
        max_backoff_s: float | None = None,
        visibility_timeout_ms: int | None = None,
    ) -> None:
        cfg = broker.config
        self.broker = broker
        self.client = broker.client
        self.queue = queue
        self.group = group
        self.consumer = consumer
        self.keys = broker.keys(queue)
        self.gkeys = self.keys.group(group)
        self.max_retries = cfg.max_retries if max_retries is None else max_retries
        self.backoff_s = cfg.backoff_s if backoff_s is None else backoff_s
        self.max_backoff_s = cfg.max_backoff_s if max_backoff_s is None else max_backoff_s
        self.visibility_timeout_ms = (
            cfg.visibility_timeout_ms if visibility_timeout_ms is None else visibility_timeout_ms
        )
        self._streams = {
            self.keys.log.encode(): LOG,
            self.gkeys.direct.encode(): DIRECT,
        }
        #: When (ms) due delayed messages and retries should next be promoted: the next
        #: known due time, or one poll interval after the last check.
        self.next_promote_ms = 0
        self._cursors = ["0-0", "0-0"]
        self._rng = random.Random()

    def __repr__(self) -> str:
        return f"<Subscription {self.queue}/{self.group} as {self.consumer}>"

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.leave()

    # -- receiving ---------------------------------------------------------------------

    @translate_errors
    def promote(self, now: int | None = None) -> int | None:
        """Move due delayed messages and retries into the streams.

        Returns:
            When the next delayed message or retry is due (ms), or None.
        """
        now = now_ms() if now is None else now
        _, _, next_due = self.broker.scripts(
            "promote",
            [self.keys.delayed, self.keys.log, self.gkeys.retry, self.gkeys.direct],
            [now, self.broker.config.script_batch],
        )
        next_due = int(next_due)
        poll = now + self.broker.config.poll_interval_ms
        self.next_promote_ms = min(poll, next_due) if next_due >= 0 else poll
        return next_due if next_due >= 0 else None

    @translate_errors
    def fetch(self, count: int = 10, block_ms: int = 1000) -> list[Message]:
        """Receive up to ``count`` new messages from the log and up to ``count`` from the
        consumer's private input (retries, re-drives).

        Waits up to ``block_ms`` (0: do not wait) for the first one. Due delayed messages
        and retries are promoted on the way, so no separate scheduler is needed.
        Entries that are not valid envelopes become dead letters (reason
        ``undecodable``) and are not returned.

        Raises:
            ConsumerNotFound: the logical consumer is not registered.
        """
        deadline = now_ms() + max(0, block_ms)
        while True:
            now = now_ms()
            if now >= self.next_promote_ms:
                self.promote(now)
                now = now_ms()
            wait = min(deadline, self.next_promote_ms) - now
            reply = self._xreadgroup(count, wait if wait > 0 else None)
            messages = self._decode(reply)
            if messages or now_ms() >= deadline:
                return messages

    def _xreadgroup(self, count: int, block: int | None) -> Any:
        args: list[Any] = ["XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count]
        if block is not None:
            args += ["BLOCK", block]
        args += ["STREAMS", self.keys.log, self.gkeys.direct, ">", ">"]
        try:
            return self.client.execute_command(*args)
        except redis.ResponseError as exc:
            if not str(exc).startswith("NOGROUP"):
                raise
        # The group is missing on the log or the direct stream: repair the direct side
        # when the consumer is registered on the log, else tell the caller.
        if self.group not in self.broker.consumers(self.queue):
            raise ConsumerNotFound(self.queue, self.group)
        self.broker.ensure_consumer(self.queue, self.group)
        return self.client.execute_command(*args)

    def _decode(self, reply: Any) -> list[Message]:
        if not reply:
            return []
        # RESP2: [[key, entries], ...]; RESP3: {key: [entries]}.
        items = reply.items() if isinstance(reply, dict) else reply
        messages: list[Message] = []
        for stream_key, value in items:
            key = stream_key if isinstance(stream_key, bytes) else stream_key.encode()
            stream = self._streams[key]
            entries = value[0] if isinstance(reply, dict) else value
            for entry_id, fields in entries:
                message = self._message(stream, entry_id, fields, 1)
                if message is not None:
                    messages.append(message)
        return messages

    def _message(
        self, stream: str, entry_id: bytes, fields: Any, delivery_count: int
    ) -> Message | None:
        if isinstance(fields, list):  # flat list from a script reply
            fields = dict(zip(fields[::2], fields[1::2], strict=False))
        try:
            parts = codec.decode_fields(entry_id, fields)
        except codec.UndecodableEntry as exc:
            self._dead_undecodable(stream, entry_id, fields, str(exc))
            return None
        return Message(
            id=parts.id,
            queue=self.queue,
            payload=parts.payload,
            headers=parts.headers,
            attempts=parts.attempts + delivery_count,
            group=self.group,
            published_at_ms=parts.published_at_ms,
            due_at_ms=parts.due_at_ms,
            first_failed_at_ms=parts.first_failed_at_ms,
            stream=stream,
            entry_id=entry_id,
            fields=fields,
        )

    def _dead_undecodable(self, stream: str, entry_id: bytes, fields: Any, reason: str) -> None:
        dead = undecodable_fields(
            entry_id, fields or {}, group=self.group, reason=reason, now=now_ms()
        )
        self._settle(stream, entry_id, "dead", 0, dead)

    # -- settling ----------------------------------------------------------------------

    @translate_errors
    def ack(self, messages: Iterable[Message]) -> int:
        """Acknowledge handled messages (one round trip for the batch).

        Returns:
            How many were still pending (the rest were acknowledged already).
        """
        log_ids: list[bytes] = []
        direct_ids: list[bytes] = []
        for m in messages:
            (log_ids if m.stream == LOG else direct_ids).append(m.entry_id)
        if not direct_ids:
            if not log_ids:
                return 0
            # The usual batch: one plain command, no script (cheaper for Redis too).
            return int(self.client.execute_command("XACK", self.keys.log, self.group, *log_ids))
        return int(
            self.broker.scripts(
                "ack",
                [self.keys.log, self.gkeys.direct],
                [self.group, len(log_ids), *log_ids, *direct_ids],
            )
        )

    def _settle(
        self, stream: str, entry_id: bytes, mode: str, due: int, fields: dict[bytes, bytes]
    ) -> bool:
        source = self.keys.log if stream == LOG else self.gkeys.direct
        done = self.broker.scripts(
            "fail",
            [source, self.gkeys.retry, self.gkeys.dead],
            [
                self.group,
                self.consumer,
                entry_id,
                "1" if stream == DIRECT else "0",
                mode,
                due,
                *flatten(fields),
            ],
        )
        return bool(done)

    @translate_errors
    def fail(
        self,
        message: Message,
        exc: BaseException | None = None,
        *,
        error_class: str | None = None,
        error_message: str | None = None,
        traceback: str | None = None,
        retry: bool = True,
        reason: str | None = None,
    ) -> str:
        """Settle a failed delivery: retry after a backoff, or dead-letter it.

        The message is retried while it has had fewer than ``max_retries + 1``
        deliveries (and ``retry`` is true); otherwise it becomes a dead letter with the
        error class, message and traceback (taken from ``exc`` unless given).

        Returns:
            ``"retried"``, ``"dead"``, or ``"lost"`` when this instance no longer holds
            the message (its lease expired; the instance that took it over settles it).
        """
        now = now_ms()
        if exc is not None:
            error_class = error_class or type(exc).__qualname__
            error_message = error_message if error_message is not None else str(exc)
            if traceback is None:
                traceback = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
        fields = retry_fields(message, now)
        if retry and should_retry(message.attempts, self.max_retries):
            wait = compute_backoff(
                message.attempts, base_s=self.backoff_s, max_s=self.max_backoff_s, rng=self._rng
            )
            due = now + max(1, int(wait * 1000))
            settled = self._settle(message.stream, message.entry_id, "retry", due, fields)
            return RETRIED if settled else LOST
        dead = dead_fields(
            fields,
            group=self.group,
            reason=reason or (REASON_FAILED if retry else REASON_REJECTED),
            error_class=error_class or "Error",
            error_message=error_message or "",
            traceback=traceback or "",
            failed_at_ms=now,
        )
        return DEAD if self._settle(message.stream, message.entry_id, "dead", 0, dead) else LOST

    def reject(self, message: Message, exc: BaseException | None = None, **error: Any) -> str:
        """Dead-letter ``message`` at once, without retries (reason ``rejected``)."""
        return self.fail(message, exc, retry=False, **error)

    @translate_errors
    def extend(self, messages: Sequence[Message]) -> list[Message]:
        """Renew the lease (visibility timeout) of messages still being handled.

        Returns:
            The messages another instance holds now (it took them over after the lease
            expired) and will settle. Messages settled meanwhile are not reported.
        """
        log = [m for m in messages if m.stream == LOG]
        direct = [m for m in messages if m.stream != LOG]
        if not messages:
            return []
        lost = self.broker.scripts(
            "extend",
            [self.keys.log, self.gkeys.direct],
            [
                self.group,
                self.consumer,
                len(log),
                *(m.entry_id for m in log),
                *(m.entry_id for m in direct),
            ],
        )
        lost_ids = set(lost)
        return [m for m in messages if m.entry_id in lost_ids]

    @translate_errors
    def reclaim(self, count: int = 100) -> list[Message]:
        """Take over messages whose lease expired or whose instance is known dead.

        Each takeover counts as a delivery. A message that has now been delivered more
        than ``max_retries + 1`` times without ever being settled (instances keep
        crashing on it) becomes a dead letter (reason ``lease_expired``) instead of
        being returned.
        """
        cur_log, cur_direct, log_entries, direct_entries = self.broker.scripts(
            "reclaim",
            [self.keys.log, self.gkeys.direct, self.gkeys.instances],
            [
                self.group,
                self.consumer,
                self.visibility_timeout_ms,
                count,
                now_ms(),
                self._cursors[0],
                self._cursors[1],
            ],
        )
        self._cursors = [to_str(cur_log), to_str(cur_direct)]
        out: list[Message] = []
        for stream, entries in ((LOG, log_entries), (DIRECT, direct_entries)):
            for entry_id, fields, deliveries in entries:
                message = self._message(stream, entry_id, fields, int(deliveries))
                if message is None:
                    continue
                if not should_retry(message.attempts - 1, self.max_retries):
                    # This claim is not a delivery: the dead letter records the
                    # deliveries actually made (max_retries + 1).
                    message.attempts -= 1
                    self.fail(
                        message,
                        retry=False,
                        reason=REASON_LEASE_EXPIRED,
                        error_class="LeaseExpired",
                        error_message=(
                            f"delivered {message.attempts} times without being "
                            "acknowledged: the handler crashed or outran the visibility "
                            "timeout each time"
                        ),
                        traceback="",
                    )
                    continue
                out.append(message)
        return out

    # -- liveness ----------------------------------------------------------------------

    @translate_errors
    def heartbeat(self, ttl_ms: int) -> None:
        """Announce this instance alive for ``ttl_ms``; once that passes without a new
        heartbeat, other instances take over its messages at once."""
        self.client.zadd(self.gkeys.instances, {self.consumer: now_ms() + ttl_ms})

    @translate_errors
    def waiting_retries(self) -> int:
        """Failed messages of this logical consumer waiting for their backoff."""
        return int(self.client.zcard(self.gkeys.retry))

    @translate_errors
    def leave(self) -> None:
        """Withdraw this instance's heartbeat; if it holds no message, also remove it
        from the consumer group (what it still holds is reclaimed by others)."""
        self.client.zrem(self.gkeys.instances, self.consumer)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.xpending_range(self.keys.log, self.group, "-", "+", 1, self.consumer)
            pipe.xpending_range(self.gkeys.direct, self.group, "-", "+", 1, self.consumer)
            held = pipe.execute(raise_on_error=False)
        if all(isinstance(h, list) and not h for h in held):
            with self.client.pipeline(transaction=False) as pipe:
                pipe.xgroup_delconsumer(self.keys.log, self.group, self.consumer)
                pipe.xgroup_delconsumer(self.gkeys.direct, self.group, self.consumer)
                pipe.execute(raise_on_error=False)

    @translate_errors
    def release(self, messages: Sequence[Message]) -> int:
        """Hand fetched-but-unstarted messages back at once (graceful shutdown).

        Each goes to the consumer's retry set due now, without counting an attempt, so
        another instance receives it within one poll interval instead of waiting for the
        visibility timeout. Returns how many were released (held by this instance).
        """
        released = 0
        for m in messages:
            fields = retry_fields(m, now_ms(), failed=False)
            released += self._settle(m.stream, m.entry_id, "retry", 0, fields)
        return released
