"""``@consumer`` declarations and their discovery in each app's ``consumers.py``."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from redisq_django import discovery
from redisq_django.consuming import inbox
from redisq_django.core import bounds
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.handler import Handler
from redisq_django.core.keys import validate_name
from redisq_django.core.limits import Rate, rate_problem
from redisq_django.core.start import StartPoint

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ConsumerDeclaration:
    """A logical consumer as declared in code by :func:`consumer`.

    Times are in seconds; ``None`` means "the ``REDISQ`` setting's default".
    """

    queue: str
    name: str
    handler: Handler
    handler_path: str
    max_retries: int | None = None
    backoff: float | None = None
    max_backoff: float | None = None
    visibility_timeout: float | None = None
    concurrency: int = 1
    start: str | dt.datetime = "latest"
    #: One message of an ordering key out at a time, in publish order (``core/ordered.py``).
    ordered: bool = False
    #: An ordered consumer's reads wait for this many replicas (None: the setting's).
    wait_replicas: int | None = None
    #: Seconds a handler may run on one message (None: no limit).
    time_limit: float | None = None
    #: At most this many messages per period across every instance ("100/s"; None: no limit).
    rate: str | None = None
    #: How many of them may start at once after a pause (None: ``limits.default_burst``).
    burst: int | None = None
    #: At most this many messages of each ordering key per period ("10/s"; None: no limit).
    rate_per_key: str | None = None
    #: At most this many handlers running at once across every instance (None: no limit).
    max_in_flight: int | None = None
    #: The database whose transaction an atomic=True consumer's handler runs in, with its
    #: inbox row (``consuming/inbox.py``); None: not atomic.
    atomic: str | None = None
    #: The queue whose keys hold the rate and slots (None: its own): a task queue's
    #: priority levels share theirs. Declared by the tasks backend, not by ``@consumer``.
    flow_queue: str | None = None
    #: ``(ladder, rank)``: one level of a priority ladder read highest first (rank 0);
    #: see ``ConsumerSpec.priority``. Declared by the tasks backend, not by ``@consumer``.
    priority: tuple[str, int] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.queue, self.name)


def _check_number(name: str, value: Any) -> None:
    problem = None if value is None else bounds.problem(name, value, f"@consumer {name}")
    if problem:
        raise ConfigurationError(problem)


def consumer(
    queue: str,
    *,
    name: str | None = None,
    max_retries: int | None = None,
    backoff: float | None = None,
    max_backoff: float | None = None,
    visibility_timeout: float | None = None,
    concurrency: int = 1,
    start: str | dt.datetime = "latest",
    ordered: bool = False,
    wait_replicas: int | None = None,
    time_limit: float | None = None,
    rate: str | None = None,
    burst: int | None = None,
    rate_per_key: str | None = None,
    max_in_flight: int | None = None,
    atomic: bool | str = False,
) -> Callable[[F], F]:
    """Declare ``handler(message)`` as logical consumer ``name`` of ``queue``.

    The handler may be an ``async def`` function: ``runconsumer`` then runs it on an
    event loop of its process, ``concurrency`` handlers at a time, with the same acks,
    retries, dead letters, leases and shutdown as a plain function. It must not block
    the loop: call the ORM through ``asgiref.sync.sync_to_async`` (or its ``a``-prefixed
    async methods) and HTTP APIs with an async client.

    Put it in an installed app's ``consumers.py``; ``manage.py runconsumer QUEUE`` finds
    it there. The handler receives a :class:`~redisq_django.core.Message`. Returning
    acknowledges the message; raising retries it with exponential backoff, up to
    ``max_retries`` times, then makes it a dead letter; raising
    :class:`~redisq_django.Reject` makes it a dead letter at once. Handlers must be
    idempotent: delivery is at least once.

    Args:
        queue: the queue name.
        name: the logical consumer's name (default: the function's name). Each logical
            consumer receives every message of the queue.
        max_retries: retries after the first delivery (default ``REDISQ['MAX_RETRIES']``).
        backoff: base of the exponential backoff with jitter, seconds.
        max_backoff: cap of one backoff wait, seconds.
        visibility_timeout: seconds a delivery may stay unacknowledged before another
            instance gets it (the worker extends it while the handler runs); at least 1.
        concurrency: handler threads per ``runconsumer`` process; for an ``async def``
            handler, how many of its handlers run together (in flight) on the process's
            event loop.
        start: where the consumer starts when first registered: ``"latest"``,
            ``"earliest"``, an aware datetime or a message id.
        ordered: handle the messages of one ordering key (``publish(..., key=...)``) one
            at a time, in publish order, across all instances, crashes and retries: a
            failing message holds back its key's later messages (no other key's) until
            it succeeds or becomes a dead letter. Messages without a key are not held.
        wait_replicas: for an ordered consumer, each read waits (``WAIT``) until this
            many replicas have it before its messages run, so that a failover cannot
            run a key's message again after the key's next one; at most
            ``REDISQ['ORDERED_WAIT_TIMEOUT']``, after which they run all the same
            (logged and counted). Default ``REDISQ['ORDERED_WAIT_REPLICAS']`` (0: no
            wait).
        time_limit: seconds a handler may run on one message (default: no limit). Past
            it the attempt fails with ``TimeLimitExceeded`` ("time limit exceeded after
            30 s"): retried after its backoff, then a dead letter. A plain function gets
            the exception raised into its thread, an ``async def`` one is cancelled; a
            thread blocked in a call Python cannot interrupt (a socket read without a
            timeout, a C extension) is left, and when it is still there
            ``REDISQ['SHUTDOWN_GRACE_PERIOD']`` later its process exits (code 1) to be
            started again by its supervisor. Give network calls timeouts of their own.
        rate: at most this many messages per second, minute or hour (``"100/s"``,
            ``"600/m"``, ``"5000/h"``) handled by all the consumer's instances together,
            on every host (default: no limit). A message over the limit waits in the
            queue: it is not fetched, so it uses no attempt and is never failed or
            reclaimed. Decided in Redis, on Redis's clock.
        burst: how many messages may start at once after a pause, within the rate
            (default: 1, plus 50 ms worth of the rate: 3 for ``"50/s"``).
        rate_per_key: at most this many messages of each ordering key (``publish(...,
            key=...)``: a tenant, a customer) per second, minute or hour, every instance
            together (default: no limit). A message over it is handed back until its
            key's turn, using no attempt; messages without a key are not limited.
            An ordered consumer keeps each key's order.
        max_in_flight: at most this many handlers of the consumer run at once across
            every instance and host (default: no limit). A SIGKILLed worker's slots come
            back when its heartbeat expires (15 s after the last one).
        atomic: ``True`` (the default database) or a database alias: run the handler in
            a transaction on that database whose first statement records the message in
            the inbox table, so that its rows there are written exactly once — a message
            delivered again (a crash after the commit, a lease taken over, a replay) is
            acknowledged without running the handler again. A plain function only
            (``async def`` is refused). Effects outside that database (an e-mail, an
            HTTP call) stay at least once: use ``message.id`` as their idempotency key.
    """
    validate_name("queue", queue)
    _check_number("max_retries", max_retries)
    _check_number("backoff", backoff)
    _check_number("max_backoff", max_backoff)
    _check_number("visibility_timeout", visibility_timeout)
    _check_number("concurrency", concurrency)
    StartPoint.parse(start)
    if not isinstance(ordered, bool):
        raise ConfigurationError(f"@consumer ordered must be True or False, not {ordered!r}.")
    _check_number("wait_replicas", wait_replicas)
    _check_number("time_limit", time_limit)
    _check_number("burst", burst)
    _check_number("max_in_flight", max_in_flight)
    if rate is not None:
        problem = rate_problem(rate, burst)
        if problem:
            raise ConfigurationError(f"@consumer {problem}.")
    if rate_per_key is not None:
        problem = rate_problem(rate_per_key)
        if problem:
            raise ConfigurationError(f"@consumer rate_per_key: {problem}.")
    if burst is not None and rate is None:
        raise ConfigurationError(
            f"@consumer burst={burst!r} needs a rate: burst is how many messages of the rate "
            "may start at once."
        )
    if wait_replicas and not ordered:
        raise ConfigurationError(
            f"@consumer wait_replicas={wait_replicas!r} needs ordered=True: only an ordered "
            "consumer's reads wait for replicas."
        )

    def decorate(handler: F) -> F:
        consumer_name = validate_name("consumer", name or handler.__name__)
        path = f"{handler.__module__}.{handler.__qualname__}"
        using = inbox.database_of(atomic, f"@consumer {queue}/{consumer_name}")
        run: Handler = handler
        if using is not None:  # the function itself stays as written, for its callers
            run = inbox.atomic_handler(handler, queue=queue, consumer=consumer_name, using=using)
        declaration = ConsumerDeclaration(
            queue=queue,
            name=consumer_name,
            handler=run,
            handler_path=path,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            visibility_timeout=visibility_timeout,
            concurrency=concurrency,
            start=start,
            ordered=ordered,
            wait_replicas=wait_replicas,
            time_limit=time_limit,
            rate=None if rate is None else str(Rate.parse(rate)),
            burst=burst,
            rate_per_key=None if rate_per_key is None else str(Rate.parse(rate_per_key)),
            max_in_flight=max_in_flight,
            atomic=using,
        )
        registry.add(declaration)
        return handler

    return decorate


class DiscoveryError(ConfigurationError):
    """An app's ``consumers.py`` failed to import."""


class ConsumerRegistry:
    """The ``@consumer`` declarations of a process, found in every app's ``consumers.py``.

    One instance, :data:`registry`, serves the process; tests may build their own.
    """

    def __init__(self) -> None:
        self._declarations: dict[tuple[str, str], ConsumerDeclaration] = {}
        self._providers: dict[str, Callable[[], list[ConsumerDeclaration]]] = {}
        self._lock = threading.Lock()
        self._discovered = False

    def add_provider(self, name: str, provider: Callable[[], list[ConsumerDeclaration]]) -> None:
        """Add declarations computed on demand (from settings), e.g. the task queues of
        the ``TASKS`` setting; ``name`` makes it idempotent. Each call of
        :meth:`declarations` asks every provider again, so settings changes apply."""
        with self._lock:
            self._providers[name] = provider

    def add(self, declaration: ConsumerDeclaration) -> None:
        """Record a declaration (the same handler declared again replaces itself).

        Raises:
            ConfigurationError: another handler already has this queue and name.
        """
        with self._lock:
            existing = self._declarations.get(declaration.key)
            if existing is not None and existing.handler_path != declaration.handler_path:
                raise ConfigurationError(
                    f"Consumer {declaration.name!r} of queue {declaration.queue!r} is declared "
                    f"twice: by {existing.handler_path} and by {declaration.handler_path}. "
                    "Give one of them another name=."
                )
            self._declarations[declaration.key] = declaration

    def autodiscover(self) -> None:
        """Import ``consumers.py`` of every installed app (once per registry), with
        Django's ``autodiscover_modules`` (:func:`redisq_django.discovery.autodiscover`).

        Raises:
            DiscoveryError: naming the module and the error, when one fails to import.
        """
        if self._discovered:
            return
        discovery.autodiscover("consumers", error=DiscoveryError)
        self._discovered = True

    def declarations(self) -> list[ConsumerDeclaration]:
        """Every declared logical consumer (after :meth:`autodiscover`), sorted."""
        self.autodiscover()
        with self._lock:
            found = dict(self._declarations)
            providers = list(self._providers.values())
        for provider in providers:
            for d in provider():
                found.setdefault(d.key, d)  # a @consumer of the same name wins
        return sorted(found.values(), key=lambda d: d.key)

    def clear(self) -> None:
        """Forget all declarations (for tests)."""
        with self._lock:
            self._declarations.clear()
        self._discovered = False


#: The declarations of this process.
registry = ConsumerRegistry()


def autodiscover() -> None:
    """Import every app's ``consumers.py`` (see :meth:`ConsumerRegistry.autodiscover`)."""
    registry.autodiscover()


def declarations() -> list[ConsumerDeclaration]:
    """Every declared logical consumer, sorted (see :data:`registry`)."""
    return registry.declarations()
