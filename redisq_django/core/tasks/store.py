"""Task results in Redis (Django-free): a task queue's messages and their results.

The Django tasks backend (``redisq_django.tasks``) stores each task's result in a hash
of the task's queue, ``redisq:{q}:result:<id>`` (the id is the message id), listed in
the queue's ``results`` zset scored by its expiry. Every change of a result happens in
the same script as the change of its message (``task_enqueue.lua``, ``task_start.lua``,
``task_settle.lua``, ``task_ready.lua``), so the two never disagree: no result says
SUCCESSFUL or FAILED for a message still to be handled, and a message acknowledged or
dead-lettered never leaves its result RUNNING (PROTOCOL.md, "Task results").

Fields of a result hash (strings; times in ms since the epoch; absent when unknown):
``task`` (module path), ``backend``, ``queue_name``, ``priority``, ``run_after``,
``takes_context`` (``1``/``0``), ``args`` and ``kwargs`` (JSON), ``status`` (one of
:data:`STATUSES`), ``enqueued_at``, ``started_at``, ``last_attempted_at``,
``finished_at``, ``errors`` (JSON array of ``{"exception_class_path", "traceback"}``),
``worker_ids`` (JSON array) and ``return_value`` (JSON, once SUCCESSFUL).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from redisq_django.core import lifecycle, settle
from redisq_django.core.batch import run_script, run_scripts
from redisq_django.core.clock import now_ms
from redisq_django.core.dead_entry import DeadReason, Failure, dead_fields
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.envelope import F_FAILURES, Envelope
from redisq_django.core.errors import translate_errors
from redisq_django.core.leases import started_tag
from redisq_django.core.lifecycle import EventName
from redisq_django.core.outcome import Settlement
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.scripts import ScriptCall, Scripts
from redisq_django.core.tasks.pipe import TaskPipe
from redisq_django.core.tasks.result_wire import (
    FAILED,
    ONCE,
    PUBLISH,
    READY,
    decode_hash,
    enqueue_call,
    expires,
    found,
    pairs,
    read_commands,
    settle_call,
)
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str


class TaskResultStore:
    """The results of task queues on one Redis (the broker's client and scripts).

    Args:
        client: the broker's redis-py client.
        scripts: its registered scripts.
        keys: builds a queue's keys (``Broker.keys``).
        history: record each settle's lifecycle event (``REDISQ["HISTORY"]``).
        trends_on: count published tasks in the queue's trends (same write as the
            enqueue; see ``core/trends.py``).
    """

    def __init__(
        self,
        client: RedisClient,
        scripts: Scripts,
        keys: Any,
        *,
        history: bool = False,
        trends_on: bool = False,
    ) -> None:
        self.trends_on = trends_on
        self.client = client
        self.scripts = scripts
        self.keys = keys
        self.history = history
        self._rng = random.Random()

    def new_pipe(self) -> TaskPipe:
        """A pipe of this store's task writes for one thread (``core/tasks/pipe.py``)."""
        return TaskPipe(self.client, self.scripts)

    @translate_errors
    def enqueue(
        self,
        envelope: Envelope,
        result: Mapping[str, str],
        *,
        expire_at_ms: int,
        mode: str = PUBLISH,
    ) -> dict[str, str] | None:
        """Write a READY result and publish its message in one script (``PUBLISH``), or
        write the result only if there is none (``ONCE``).

        Returns:
            With ``ONCE``, the result already there (nothing written), else None.
        """
        call = self.enqueue_command(envelope, result, expire_at_ms=expire_at_ms, mode=mode)
        if not call.quiet:
            reply = self.scripts(call.script, call.keys, call.args)
        else:
            try:
                reply = run_script(
                    self.client, self.scripts, call.script, call.keys, call.args, quiet=call.quiet
                )
            except BaseException:
                call.failed()
                raise
        if mode == ONCE and reply:
            return decode_hash(reply)
        return None

    def enqueue_command(
        self,
        envelope: Envelope,
        result: Mapping[str, str],
        *,
        expire_at_ms: int,
        mode: str = PUBLISH,
    ) -> ScriptCall:
        """The ``task_enqueue.lua`` call of :meth:`enqueue` (``task_wire.enqueue_call``),
        for whichever client runs it: this store's, or an asyncio one
        (``core.asyncio_client.run_call``)."""
        keys = self.keys(envelope.queue)
        return enqueue_call(
            keys, envelope, result, expire_at_ms=expire_at_ms, mode=mode, trends_on=self.trends_on
        )

    @translate_errors
    def start(
        self,
        delivery: Delivery,
        *,
        worker_id: str,
        expire_at_ms: int,
        rebuild: Mapping[str, str],
        now: int | None = None,
        lease_ms: int = 0,
    ) -> tuple[list[str], list[dict[str, str]], int]:
        """Record that ``worker_id`` starts an attempt (``task_start.lua``): RUNNING.

        Args:
            rebuild: the result as enqueued, written when the hash is gone (it expired
                while the task waited).
            now: the start time (ms; default this host's clock).
            lease_ms: the task's own visibility timeout; the attempt's lease starts now
                (``core/leases.py``). 0: the consumer's applies.

        Returns:
            ``(worker_ids, errors, started_at_ms)`` after the change.
        """
        now = now_ms() if now is None else now
        keys, args = self.start_call(delivery, worker_id, expire_at_ms, rebuild, now, lease_ms)
        workers, errors, started = self.scripts("task_start", keys, args)
        return json.loads(workers), json.loads(errors), int(started)

    def start_call(
        self,
        delivery: Delivery,
        worker_id: str,
        expire_at_ms: int,
        rebuild: Mapping[str, str],
        now: int,
        lease_ms: int = 0,
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of :meth:`start`, to send through a ``TaskPipe``."""
        keys = self.keys(delivery.queue)
        gkeys = keys.group(delivery.consumer)
        source = keys.log if delivery.stream is Stream.LOG else gkeys.direct
        return (
            [keys.task_result(delivery.id), keys.task_results, source, gkeys.leases],
            [
                expires(expire_at_ms),
                delivery.id,
                worker_id,
                now,
                delivery.consumer,
                delivery.entry_id,
                started_tag(delivery),
                lease_ms,
                *pairs(rebuild),
            ],
        )

    @translate_errors
    def succeed(
        self,
        delivery: Delivery,
        result: Mapping[str, str],
        *,
        expire_at_ms: int,
        duration_ms: int | None = None,
    ) -> bool:
        """Acknowledge ``delivery`` and write its SUCCESSFUL ``result`` fields together
        (with its ``handled`` event, history on: ``duration_ms`` is the task's run time).

        Returns:
            False when this instance no longer holds the message (nothing written).
        """
        keys, args = self.succeed_call(
            delivery, result, expire_at_ms=expire_at_ms, duration_ms=duration_ms
        )
        return bool(self.scripts("task_settle", keys, args))

    def succeed_call(
        self,
        delivery: Delivery,
        result: Mapping[str, str],
        *,
        expire_at_ms: int,
        duration_ms: int | None = None,
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of :meth:`succeed`, to send through a ``TaskPipe``."""
        event = self._event(EventName.HANDLED, delivery, duration_ms)
        keys = self.keys(delivery.queue)
        return settle_call(keys, delivery, "ack", "", result, b"", {}, expire_at_ms, event)

    @translate_errors
    def fail(
        self,
        delivery: Delivery,
        failure: Failure,
        policy: RetryPolicy,
        *,
        error: Mapping[str, str],
        finished_at_ms: int,
        expire_at_ms: int,
        duration_ms: int | None = None,
    ) -> Settlement:
        """Settle a failed attempt with its result: a retry after the policy's backoff
        (status READY) while the task has failed at most ``max_retries`` times, else a
        dead letter (status FAILED), with its ``retried`` or ``dead`` event (history
        on). ``error`` is appended to the result's ``errors``. Only attempts that ended
        in an error count (the envelope's ``failures``), not lost ones (a crash, a kill:
        ``Subscription.reclaim`` bounds those), so FAILED means ``max_retries + 1`` errors.

        Returns:
            Its settlement: ``RETRIED`` (with its backoff), ``DEAD`` (reason
            ``failed``), or ``LOST`` when this instance no longer holds it.
        """
        now = now_ms()
        error_json = json.dumps(dict(error)).encode()
        failed = delivery.failures + 1  # errors so far, this one included
        retry_fields = settle.next_delivery(delivery, now, failed=True)
        retry_fields[F_FAILURES] = str(failed).encode()
        if policy.should_retry(failed):
            wait_ms = max(1, int(policy.backoff(failed, self._rng) * 1000))
            # Without `next_due`: task_settle.lua adds the due time it makes (Redis's clock).
            event = self._event(EventName.RETRIED, delivery, duration_ms, failure=failure)
            keys, args = settle_call(
                self.keys(delivery.queue), delivery, "retry", f"+{wait_ms}", {"status": READY},
                error_json, retry_fields, expire_at_ms, event,
            )  # fmt: skip
            settled = self.scripts("task_settle", keys, args)
            return Settlement.retried(wait_ms) if settled else Settlement.lost()
        return self._dead(
            delivery, failure, DeadReason.FAILED, retry_fields, error_json, now,
            finished_at_ms, expire_at_ms, duration_ms,
        )  # fmt: skip

    @translate_errors
    def reject(
        self,
        delivery: Delivery,
        failure: Failure,
        *,
        error: Mapping[str, str],
        finished_at_ms: int,
        expire_at_ms: int,
        duration_ms: int | None = None,
    ) -> Settlement:
        """Settle an attempt whose task raised ``Reject``: a dead letter at once, whatever
        the retries left (reason ``rejected``, as a consumer's), its result FAILED with
        ``error`` appended to its ``errors``, with its ``dead`` event (history on).

        Returns:
            Its settlement: ``DEAD`` (reason ``rejected``), or ``LOST`` when this
            instance no longer holds it.
        """
        now = now_ms()
        error_json = json.dumps(dict(error)).encode()
        fields = settle.next_delivery(delivery, now, failed=True)
        fields[F_FAILURES] = str(delivery.failures + 1).encode()
        return self._dead(
            delivery, failure, DeadReason.REJECTED, fields, error_json, now,
            finished_at_ms, expire_at_ms, duration_ms,
        )  # fmt: skip

    def _dead(
        self,
        delivery: Delivery,
        failure: Failure,
        reason: DeadReason,
        fields: dict[bytes, bytes],
        error_json: bytes,
        now: int,
        finished_at_ms: int,
        expire_at_ms: int,
        duration_ms: int | None,
    ) -> Settlement:
        """The dead letter of :meth:`fail` and :meth:`reject`: ``fields`` are the
        envelope's for its next delivery, ``now`` the time of the failure."""
        dead = dead_fields(
            fields, consumer=delivery.consumer, reason=reason, failure=failure, failed_at_ms=now
        )
        result = {"status": FAILED, "finished_at": str(finished_at_ms)}
        event = self._event(EventName.DEAD, delivery, duration_ms, failure=failure, reason=reason)
        keys, args = settle_call(
            self.keys(delivery.queue), delivery, "dead", "", result, error_json, dead,
            expire_at_ms, event,
        )  # fmt: skip
        settled = self.scripts("task_settle", keys, args)
        return Settlement.dead(reason) if settled else Settlement.lost()

    def _event(
        self, name: EventName, delivery: Delivery, duration_ms: int | None, **details: Any
    ) -> list[bytes] | None:
        """The lifecycle event of a settle (history on), else None."""
        if not self.history:
            return None
        record = lifecycle.record(delivery.id, delivery.attempts, duration_ms)
        return lifecycle.fields(name, delivery.consumer, delivery.instance, [record], **details)

    def ready(self, queue: str, result_id: str, *, expire_at_ms: int) -> bool:
        """A FAILED result whose dead letter was sent again is READY (``task_ready.lua``).
        Returns False when it was not FAILED (or is gone)."""
        return self.ready_many([(queue, result_id, expire_at_ms)])[0]

    @translate_errors
    def ready_many(self, results: Sequence[tuple[str, str, int]]) -> list[bool]:
        """:meth:`ready` for each ``(queue, result id, expire_at_ms)``, in one write (one
        pipeline routed by slot on a Cluster client): a bulk retry's chunk of task dead
        letters. Returns, for each, whether it changed.

        Raises:
            redis.ResponseError: the first one Redis refused (the others ran).
        """
        calls = []
        for queue, result_id, expire_at_ms in results:
            keys = self.keys(queue)
            calls.append(
                (
                    [keys.task_result(result_id), keys.task_results],
                    [expires(expire_at_ms), result_id],
                )
            )
        replies = run_scripts(self.client, self.scripts, "task_ready", calls)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return [bool(r) for r in replies]

    @translate_errors
    def lost(self, queue: str, result_id: str, *, error: Mapping[str, str], expire_at_ms: int) -> (
        bool
    ):  # fmt: skip
        """A task whose message died without being settled (reason ``lease_expired``):
        its unfinished result is FAILED with ``error`` (``task_lost.lua``)."""
        keys = self.keys(queue)
        return bool(
            self.scripts(
                "task_lost",
                [keys.task_result(result_id), keys.task_results],
                [expires(expire_at_ms), result_id, json.dumps(dict(error)), now_ms()],
            )
        )

    @translate_errors
    def read(self, queues: Sequence[str], result_id: str) -> tuple[str, dict[str, str]] | None:
        """The result ``result_id`` from whichever of ``queues`` holds it, in one round
        trip: ``(queue, fields)``, or None when none does (unknown or expired)."""
        keys = [self.keys(queue) for queue in queues]
        with self.client.pipeline(transaction=False) as pipe:
            for command in read_commands(keys, result_id):
                pipe.execute_command(*command)
            return found(keys, pipe.execute())

    @translate_errors
    def latest(self, queue: str, count: int) -> list[tuple[str, dict[str, str]]]:
        """Up to ``count`` results of ``queue``, the latest to expire (most recently
        changed) first, in two round trips."""
        keys = self.keys(queue)
        ids = [to_str(i) for i in self.client.zrevrange(keys.task_results, 0, count - 1)]
        if not ids:
            return []
        with self.client.pipeline(transaction=False) as pipe:
            for result_id in ids:
                pipe.hgetall(keys.task_result(result_id))
            replies = pipe.execute()
        return [(i, decode_hash(raw)) for i, raw in zip(ids, replies, strict=True) if raw]
