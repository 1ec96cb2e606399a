"""``drain()``: run the declared consumers' handlers in the test's thread until their
queues are empty; and the test's hands on time: delayed messages, schedule ticks.

``drain`` is ``runconsumer --burst`` without the process: the consumers are selected,
their rows synchronised and their effective settings read as ``runconsumer`` does
(``runner.select``, ``runner.load_specs``), and each runs the worker's own handler loop
in the calling thread (``core.worker.run_burst``), with the middleware its handlers
bring (the Tasks backend's). Two things differ, both said on the testing page:

- **retries are due at once**: when a handler fails and its message is scheduled for a
  retry (``fail.lua``, the attempt counted), a hook moves that retry into the
  consumer's input at once with the script the admin's *Deliver now* runs
  (``deliver_now.lua``): backoff is skipped, the attempts, ``max_retries`` and the dead
  letter at the end are the real ones. (Moving Redis's clock is not possible: every
  script reads ``TIME``, C13.)
- handlers run one at a time, to the end: time limits, rate and concurrency limits,
  heartbeats and lease renewal, which a worker's main thread adds, do not apply.

Every loop is bounded: a drain handles at most ``max_messages`` messages, in at most
``max_rounds`` rounds over its consumers (a handler may publish to another queue being
drained) and ``timeout`` seconds, and raises :class:`DrainError` past them.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from redisq_django.connection import get_broker
from redisq_django.consuming.consumer_sync import sync_declarations
from redisq_django.consuming.declarations import ConsumerDeclaration, declarations
from redisq_django.core import Broker
from redisq_django.core.clock import datetime_to_ms
from redisq_django.core.dead_entry import DeadEntry
from redisq_django.core.delivery import Delivery
from redisq_django.core.errors import RedisqError
from redisq_django.core.handler import ConsumerSpec
from redisq_django.core.outcome import Outcome, Settlement
from redisq_django.core.worker import Middleware, MiddlewareChain, Quota, Tally, run_burst
from redisq_django.runner import handler_middleware, load_specs, select
from redisq_django.schedules.spec import ScheduleSpec
from redisq_django.testing import isolation

#: Messages one drain handles at most, unless told otherwise.
DEFAULT_MAX_MESSAGES = 10_000
#: Rounds over the consumers one drain makes at most: a round runs each consumer until
#: its queue is empty; another follows while the last one handled something.
DEFAULT_MAX_ROUNDS = 100
#: Seconds a drain may take, checked between consumers (a handler is never interrupted).
DEFAULT_TIMEOUT_S = 60.0


class DrainError(RedisqError, RuntimeError):
    """A drain did not end with its queues empty within its bounds."""


@dataclass
class Counts:
    """What a drain did for one consumer (or for all: :attr:`Drained.total`).

    Attributes:
        handled: messages handled (acknowledged).
        failed: handler runs that raised (each a retry or a dead letter).
        retried: failures scheduled for another attempt.
        dead: messages that became dead letters.
    """

    handled: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0


@dataclass(frozen=True)
class HandlerFailure:
    """One handler run that raised during a drain.

    Attributes:
        queue, consumer: whose handler it was.
        message_id: the message it ran on.
        attempt: the delivery it was (1 for the first).
        error: what it raised.
    """

    queue: str
    consumer: str
    message_id: str
    attempt: int
    error: BaseException


@dataclass
class Drained:
    """What :func:`drain` did.

    Attributes:
        counts: per (queue, consumer) that ran, its :class:`Counts`.
        failures: every handler run that raised, in order (a failing test shows them:
            ``assert not result.failures, result.failures``).
        rounds: rounds made over the consumers.
    """

    counts: dict[tuple[str, str], Counts] = field(default_factory=dict)
    failures: list[HandlerFailure] = field(default_factory=list)
    rounds: int = 0

    @property
    def total(self) -> Counts:
        """The counts of every consumer added up."""
        out = Counts()
        for c in self.counts.values():
            out.handled += c.handled
            out.failed += c.failed
            out.retried += c.retried
            out.dead += c.dead
        return out

    def __getitem__(self, key: tuple[str, str]) -> Counts:
        """The counts of ``(queue, consumer)`` (all zero when it did nothing)."""
        return self.counts.get(key, Counts())


class _TestHooks(Middleware):
    """The drain's own hooks: each retry delivered at once, each failure recorded."""

    def __init__(self, broker: Broker, failures: list[HandlerFailure]) -> None:
        self.broker = broker
        self.failures = failures

    def after_process(self, delivery: Delivery, *, error: BaseException | None) -> None:
        if error is not None:
            self.failures.append(
                HandlerFailure(
                    delivery.queue, delivery.consumer, delivery.id, delivery.attempts, error
                )
            )

    def after_settle(self, delivery: Delivery, settlement: Settlement) -> None:
        if settlement.outcome is Outcome.RETRIED:
            # The admin's "Deliver now": the retry goes to the consumer's input, its
            # attempts counted, instead of waiting for its backoff.
            self.broker.operator.deliver_waiting(delivery.queue, delivery.consumer, [delivery.id])


def drain(
    *queues: str,
    delayed: bool = False,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Drained:
    """Run the handlers of the declared consumers of ``queues`` (every declared
    consumer, the Django task queues' included, when none is named) in this thread
    until none of them has a message waiting.

    A name that is no queue with declared consumers but a task queue of the redisq Tasks
    backend (``"default"``) means its three levels. Retries are delivered at once
    (their attempts count: a message that keeps failing ends as a dead letter after
    ``max_retries + 1`` attempts, see :func:`dead_letters`). Inside :func:`isolated`
    (the ``redisq`` fixture, :class:`~redisq_django.testing.RedisqTestMixin`), the first
    drain of a consumer starts it at the beginning of the test's log, so it gets every
    message published during the test whatever its ``start``.

    Args:
        queues: the queues to drain (all declared when none).
        delayed: deliver the delayed messages now as well, at each round (else they
            wait for their due time: :func:`deliver_delayed` does it on demand).
        max_messages: handle at most this many messages.
        max_rounds: make at most this many rounds over the consumers.
        timeout: give up after this many seconds (checked between consumers).

    Returns:
        What was done, per consumer (:class:`Drained`).

    Raises:
        DrainError: a bound was reached with messages still coming (a handler that
            publishes to its own queue every time?); the message says which.
        SelectionError: a queue has no declared consumer.
    """
    chosen = _chosen(queues)
    sync_declarations()
    specs = [s for s in load_specs(chosen) if s.enabled and not s.paused]
    broker = get_broker()
    _open(broker, specs)
    result = Drained()
    hooks = MiddlewareChain([*handler_middleware(chosen), _TestHooks(broker, result.failures)])
    # One more than the bound: a drain that handled exactly max_messages and found the
    # queues empty succeeded; only a message past the bound means they never empty.
    quota, tally = Quota(max_messages + 1), Tally()
    deadline = time.monotonic() + timeout
    for _ in range(max_rounds):
        result.rounds += 1
        if delayed:
            deliver_delayed(*sorted({s.queue for s in specs}))
        before = sum(tally.snapshot().values())
        for spec in specs:
            run_burst(broker, spec, quota=quota, tally=tally, hooks=hooks)
            if quota.exhausted:
                raise DrainError(
                    f"drain() handled more than its max_messages={max_messages} messages "
                    f"({spec.queue}/{spec.name} still had some): does a handler publish to a "
                    "queue being drained on every message? Fix it, or pass a larger "
                    "max_messages."
                )
            if time.monotonic() > deadline:
                raise DrainError(
                    f"drain() ran past its timeout of {timeout:g} s with messages still "
                    f"coming (last consumer run: {spec.queue}/{spec.name}); pass a larger "
                    "timeout= if handlers are slow."
                )
        _count(result, tally)
        if sum(tally.snapshot().values()) == before:
            return result
    raise DrainError(
        f"drain() made its max_rounds={max_rounds} rounds over "
        f"{', '.join(sorted({s.queue for s in specs}))} and each handled new messages: "
        "handlers keep publishing to each other's queues. Fix that, or pass a larger "
        "max_rounds."
    )


def _chosen(queues: Sequence[str]) -> list[ConsumerDeclaration]:
    declared = {d.queue for d in declarations()}
    if not queues:
        return select(sorted(declared))
    names: list[str] = []
    for queue in queues:
        if queue in declared:
            names.append(queue)
        else:  # a Django task queue's name: its levels (or select() says what exists)
            names += _task_levels(queue) or [queue]
    return select(list(dict.fromkeys(names)))


def _task_levels(name: str) -> list[str]:
    try:
        from redisq_django.tasks.task_queues import task_queues

        return task_queues([name])
    except (ImportError, RedisqError):  # no Tasks backend (Django 5.2), or not its queue
        return []


def _open(broker: Broker, specs: Sequence[ConsumerSpec]) -> None:
    """Register each consumer (as a worker's start does); in an isolated test, move it
    once to the start of the test's log, which holds only what the test published."""
    inside = isolation.current()
    for spec in specs:
        if inside is None:
            broker.consumers.ensure(spec.queue, spec.name, spec.start)
            continue
        if spec.key in inside.opened:
            continue
        if not broker.consumers.ensure(spec.queue, spec.name, "earliest"):
            broker.consumers.reset(spec.queue, spec.name, "earliest")
        inside.opened.add(spec.key)


def _count(result: Drained, tally: Tally) -> None:
    result.counts = {}
    for (queue, consumer, what), n in tally.snapshot().items():
        counts = result.counts.setdefault((queue, consumer), Counts())
        if what == "handled":
            counts.handled = n
        elif what == "failed":
            counts.failed = n
        elif what == Outcome.RETRIED.counted_as:
            counts.retried = n
        elif what == Outcome.DEAD.counted_as:
            counts.dead = n


def dead_letters(queue: str, consumer: str | None = None) -> list[DeadEntry]:
    """The dead letters of ``consumer`` on ``queue`` (of each of its consumers when
    None) still in Redis, oldest first: a drain leaves them there (no worker's sink
    moves them into ``DeadLetter`` rows). Each has ``payload``, ``attempts``,
    ``reason``, ``error_class``, ``error_message`` and ``traceback``."""
    broker = get_broker()
    names = [consumer] if consumer is not None else broker.consumers.names(queue)
    found: list[DeadEntry] = []
    for name in names:
        found += broker.dead_letters.read(queue, name, count=10_000)
    return found


def deliver_delayed(*queues: str) -> int:
    """Deliver now the delayed messages of ``queues`` (of every queue when none), as the
    admin's *Deliver now* does: each goes to the end of its queue's log, for every
    consumer. Returns how many."""
    broker = get_broker()
    return sum(broker.operator.deliver_waiting(q, None).count for q in queues or broker.queues())


def fire_schedule(name: str, at: dt.datetime | None = None) -> str:
    """Publish the tick of periodic schedule ``name`` due at ``at`` (default: its next
    tick after now), as a worker publishes it once that tick is due: the same message
    or task, with the same id (``<name>@<tick ms>``, published once: firing one tick
    twice publishes it once). Returns the message id (a task's result id for a task).

    Raises:
        LookupError: no schedule of that name is declared or in the database.
    """
    from redisq_django.schedules.targets import firer

    spec = _schedule_spec(name)
    broker = get_broker()
    if at is not None:
        tick = datetime_to_ms(at)
    else:
        upcoming = spec.timing.next_after(broker.schedule_ledger.redis_time())
        if upcoming is None:
            raise LookupError(f"Schedule {name!r} has no tick after now; pass at=.")
        tick = upcoming
    return firer(broker)(spec, tick)


def _schedule_spec(name: str) -> ScheduleSpec:
    from redisq_django.models import Schedule, default_timezone
    from redisq_django.schedules.declared import declarations as schedule_declarations

    for declaration in schedule_declarations():
        if declaration.name == name:
            return declaration.spec(default_timezone())
    row = Schedule.objects.filter(name=name).first()
    if row is None:
        known = ", ".join(sorted(d.name for d in schedule_declarations())) or "none"
        raise LookupError(f"No schedule named {name!r}. Declared: {known}.")
    return row.to_spec()
