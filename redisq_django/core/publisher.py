"""Publishing: one message, a batch, delayed, pre-encoded, at most once.

A mixin of :class:`~redisq_django.core.broker.Broker`, kept apart so each module owns
one concern.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from redisq_django.core import codec
from redisq_django.core._util import now_ms, to_str, translate_errors
from redisq_django.core.config import CoreConfig
from redisq_django.core.keys import QueueKeys
from redisq_django.core.lua import Scripts

#: How long the outbox relay remembers that a message id was published: 1 day (ms).
SENT_MARKER_TTL_MS = 24 * 3600 * 1000

Delay = float | int | dt.timedelta | None
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def new_message_id() -> str:
    """A message id chosen before publishing: 32 hex characters."""
    return uuid.uuid4().hex


class Publisher:
    """The publishing half of the broker (see :class:`Broker` for the constructor)."""

    client: Any
    config: CoreConfig
    codec: codec.JsonCodec
    scripts: Scripts

    def keys(self, queue: str) -> QueueKeys:  # provided by Broker
        raise NotImplementedError

    def _register(self, queue: str) -> None:  # provided by Broker
        raise NotImplementedError

    @staticmethod
    def due_ms(delay: Delay, eta: dt.datetime | None) -> int | None:
        """The due time (ms) of a message published now with ``delay`` or ``eta``, or
        None when it is due at once. Rounded up: a message is never due early.

        Raises:
            ValueError: both given, a negative delay, or a naive ``eta``.
        """
        if delay is not None and eta is not None:
            raise ValueError("Pass either delay= or eta=, not both.")
        if delay is not None:
            seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
            if seconds < 0:
                raise ValueError(f"delay must be >= 0 seconds, got {seconds}")
            # Round up: a due time before publish time + delay would deliver early.
            return now_ms() + math.ceil(seconds * 1000) if seconds > 0 else None
        if eta is not None:
            if eta.tzinfo is None:
                raise ValueError(f"eta {eta!r} has no time zone; pass an aware datetime.")
            # Round up: a due time in whole ms before the eta would deliver early.
            micros = (eta - _EPOCH) // dt.timedelta(microseconds=1)
            due = -(-micros // 1000)
            return due if due > now_ms() else None
        return None

    def _fields(self, queue: str, payload: Any, headers: Mapping[str, Any] | None) -> list[Any]:
        args: list[Any] = [
            codec.F_PAYLOAD,
            self.codec.encode_payload(payload, queue=queue, limit=self.config.max_payload_bytes),
        ]
        encoded_headers = self.codec.encode_headers(headers, queue=queue)
        if encoded_headers is not None:
            args += [codec.F_HEADERS, encoded_headers]
        return args

    def _delayed_member(self, fields: list[Any], due: int) -> tuple[str, bytes]:
        message_id = new_message_id()
        member = {to_str(fields[i]): to_str(fields[i + 1]) for i in range(0, len(fields), 2)}
        member.update(id=message_id, published_at=str(now_ms()), due_at=str(due))
        return message_id, self.codec.dumps(member, queue="")

    @translate_errors
    def publish(
        self,
        queue: str,
        payload: Any,
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
    ) -> str:
        """Publish one message; every logical consumer of ``queue`` receives it.

        Args:
            queue: the queue (topic) name.
            payload: any JSON-serialisable value (datetime, date, time, timedelta,
                Decimal and UUID are converted as Django's JSON encoder does).
            headers: optional JSON-serialisable string-keyed metadata.
            delay: seconds (or a timedelta) before it may be delivered.
            eta: an aware datetime before which it is not delivered.

        Returns:
            The message id. Immediate messages get their log entry id
            (``"1700000000000-0"``); delayed ones a 32-character hex id.

        Raises:
            PayloadTooLarge: the encoded payload is over ``max_payload_bytes``.
            PayloadNotSerializable: payload or headers hold a non-JSON value.
            RedisUnavailable: Redis cannot be reached.
        """
        keys = self.keys(queue)
        fields = self._fields(queue, payload, headers)
        due = self.due_ms(delay, eta)
        self._register(queue)
        if due is None:
            return to_str(self.client.execute_command("XADD", keys.log, "*", *fields))
        message_id, member = self._delayed_member(fields, due)
        self.client.zadd(keys.delayed, {member: due})
        return message_id

    @translate_errors
    def publish_many(
        self,
        queue: str,
        payloads: Iterable[Any],
        *,
        headers: Mapping[str, Any] | None = None,
        delay: Delay = None,
        eta: dt.datetime | None = None,
    ) -> list[str]:
        """Publish several messages in one round trip, all or none.

        Every payload is encoded (and checked against the limit) before anything is
        sent, so an invalid payload publishes nothing. Arguments as :meth:`publish`;
        ``headers``, ``delay`` and ``eta`` apply to every message.

        Returns:
            The message ids, in the order of ``payloads``.
        """
        keys = self.keys(queue)
        all_fields = [self._fields(queue, p, headers) for p in payloads]
        if not all_fields:
            return []
        due = self.due_ms(delay, eta)
        self._register(queue)
        if due is not None:
            members = [self._delayed_member(f, due) for f in all_fields]
            self.client.zadd(keys.delayed, {m: due for _, m in members})
            return [mid for mid, _ in members]
        with self.client.pipeline(transaction=True) as pipe:
            for fields in all_fields:
                pipe.execute_command("XADD", keys.log, "*", *fields)
            return [to_str(i) for i in pipe.execute()]

    def _encoded(
        self,
        queue: str,
        message_id: str,
        payload_json: str | bytes,
        headers_json: str | bytes | None,
        published_at: dt.datetime | None,
        due_at: dt.datetime | None,
    ) -> tuple[list[str], int, bytes]:
        """Envelope fields, due time (0: now) and delayed member of pre-encoded JSON."""
        fields: dict[str, str] = {"payload": to_str(payload_json), "id": message_id}
        if headers_json:
            fields["headers"] = to_str(headers_json)
        if published_at is not None:
            fields["published_at"] = str(int(published_at.timestamp() * 1000))
        due = self.due_ms(None, due_at) if due_at is not None else None
        member = b""
        if due:
            fields["due_at"] = str(due)
            fields.setdefault("published_at", str(now_ms()))
            member = self.codec.dumps(fields, queue=queue)
        return [x for kv in fields.items() for x in kv], due or 0, member

    @translate_errors
    def publish_encoded(
        self,
        queue: str,
        message_id: str,
        payload_json: str | bytes,
        *,
        headers_json: str | bytes | None = None,
        published_at: dt.datetime | None = None,
        due_at: dt.datetime | None = None,
    ) -> None:
        """Publish JSON encoded earlier (see ``JsonCodec``) under a chosen message id.

        Used to validate a payload when a transaction asks for it and send it once the
        transaction commits.
        """
        keys = self.keys(queue)
        flat, due, member = self._encoded(
            queue, message_id, payload_json, headers_json, published_at, due_at
        )
        self._register(queue)
        if due:
            self.client.zadd(keys.delayed, {member: due})
        else:
            self.client.execute_command("XADD", keys.log, "*", *flat)

    @translate_errors
    def publish_encoded_many(
        self, queue: str, messages: list[tuple[str, bytes]], *, headers_json: bytes | None = None
    ) -> None:
        """Publish pre-encoded ``(message_id, payload_json)`` pairs now, in one round
        trip, all or none (see :meth:`publish_encoded`)."""
        keys = self.keys(queue)
        self._register(queue)
        with self.client.pipeline(transaction=True) as pipe:
            for message_id, payload_json in messages:
                flat, _, _ = self._encoded(
                    queue, message_id, payload_json, headers_json, None, None
                )
                pipe.execute_command("XADD", keys.log, "*", *flat)
            pipe.execute()

    @translate_errors
    def publish_once(
        self,
        queue: str,
        message_id: str,
        payload_json: str | bytes,
        *,
        headers_json: str | bytes | None = None,
        published_at: dt.datetime | None = None,
        due_at: dt.datetime | None = None,
        marker_ttl_ms: int = SENT_MARKER_TTL_MS,
    ) -> bool:
        """As :meth:`publish_encoded`, but at most once per message id.

        Used by the outbox relay: a relay that crashed after publishing but before
        marking its row sent publishes again, and that second call is a no-op (a marker
        key remembers the id for ``marker_ttl_ms``).

        Returns:
            True when published now, False when it had been published before.
        """
        keys = self.keys(queue)
        flat, due, member = self._encoded(
            queue, message_id, payload_json, headers_json, published_at, due_at
        )
        self._register(queue)
        done, _ = self.scripts(
            "publish_once",
            [keys.log, keys.delayed, keys.sent_marker(message_id)],
            [marker_ttl_ms, due, member, *flat],
        )
        return bool(done)
