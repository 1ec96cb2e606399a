"""Transient Redis faults in the data source: recognised, waited out, bounded in time.

A Redis that stalls, restarts, loads its data set, fails over or refuses commands for a
while must not end a streaming query that runs for days. Every Redis call of the data
source goes through a :class:`Link`: on the driver whole calls (listing queues, last
ids, ``latestOffset``, planning, ``commit``: reads, and a commit that never moves a
position back, so doing them again is safe), on executors one XRANGE page at a time
(a read resumes after the last page it handed to Spark) and one send of the writer.
A transient fault drops the client, waits (exponential backoff with jitter: 0.1 s
growing to 5 s) and tries again on a new connection, until option ``retryTimeout``
(seconds, default 600) has passed since the outage began; then :class:`RedisOutage`
ends the query with one clear line. Each outage is logged once when it starts and once
when Redis answers again, never once per try.

Except at a batch read's first contact: the driver's link of a batch read
(``spark.read``) that has never reached Redis and finds its address refusing connections
(nothing listens there) or not resolving fails at once — a wrong port or host name, not
an outage, which 10 minutes of waiting would only hide. Once it answered, and for
streaming queries and writes (which may start while Redis restarts), faults are waited
out as above.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import redis
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    ClusterError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from redisq_django.core.errors import (
    RedisqError,
    RedisRefused,
    RedisUnavailable,
    refusal_condition,
)
from redisq_django.core.retry import compute_backoff
from redisq_django.core.types import RedisClient
from redisq_django.pipeline import redis_io
from redisq_django.pipeline.options import redact_url
from redisq_django.pipeline.source_options import SourceOptions

logger = logging.getLogger("redisq.pipeline")

P = ParamSpec("P")
T = TypeVar("T")

#: First and longest wait between two tries (seconds).
BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0

#: The condition of a connection failure or timeout (refusals are named after Redis's
#: error code, as :data:`redisq_django.core.errors.REFUSALS`).
UNREACHABLE = "unreachable"


class RedisOutage(RedisqError, redis.ConnectionError):
    """Redis did not answer, or kept refusing, for longer than option ``retryTimeout``.

    Also a ``redis.ConnectionError``, so code that handles a lost connection handles it;
    it is never retried itself.
    """


def transient(exc: BaseException) -> str | None:
    """The condition of a fault worth waiting out, or None for any other error.

    Transient: no connection, a lost one, a timeout (a stalled or hung server), and every
    refusal that passes (``loading``, ``readonly`` after a failover, ``masterdown``,
    ``clusterdown``, ``busy``, ``noreplicas``, ``oom``: see
    :data:`~redisq_django.core.errors.REFUSALS`), raised by redis-py or by the core as
    :class:`~redisq_django.core.errors.RedisUnavailable`. Not transient: a wrong password
    or missing permission, any other error reply, and :class:`RedisOutage` itself.
    """
    if isinstance(exc, RedisOutage):
        return None
    if isinstance(exc, RedisRefused):
        return exc.condition
    cause = exc.__cause__ if isinstance(exc, RedisUnavailable) else exc
    if isinstance(cause, AuthenticationError | AuthorizationError):
        return None
    if isinstance(exc, RedisUnavailable):
        return UNREACHABLE
    condition = refusal_condition(exc)
    if condition is not None:
        return condition
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | ConnectionError | TimeoutError):
        return UNREACHABLE
    if isinstance(exc, SlotNotCoveredError | ClusterError | TryAgainError):
        return "clusterdown"
    if isinstance(exc, RedisClusterException) and "cannot be connected" in str(exc):
        return UNREACHABLE  # building a cluster client: no node answered
    return None


def nothing_there(exc: BaseException) -> bool:
    """Whether ``exc`` says nothing listens at the address (the connection was refused)
    or the host name does not resolve: at first contact, a wrong URL."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError | socket.gaierror):
            return True
        text = str(current)
        if "Connection refused" in text or "Name or service not known" in text:
            return True
        current = current.__cause__ or current.__context__
    return False


class Link:
    """The data source's way to Redis: a client, and the patience to wait out outages.

    Picklable: the client stays behind (each process builds its own on first use).

    Args:
        options: the source's options (URL, cluster flag, timeouts).
        connect: builds a client from the options (default :func:`redis_io.client`).
        first_contact: ``"fail fast"``: until Redis first answered, an address where
            nothing listens (or that does not resolve) fails at once instead of being
            waited out (a batch read's planning: a wrong URL). Default ``"wait"``.
    """

    def __init__(
        self,
        options: SourceOptions,
        connect: Callable[[SourceOptions], RedisClient] = redis_io.client,
        first_contact: str = "wait",
    ) -> None:
        self.options = options
        self._connect = connect
        self._fail_fast = first_contact == "fail fast"
        self._client: RedisClient | None = None
        self._outage_since: float | None = None  # time.monotonic() of the first failure
        self._condition: str | None = None
        self._depth = 0  # calls of run() under way: only the outermost one retries
        self._answered = False  # Redis answered this link once

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> RedisClient:
        """The client, built on first use (a cluster client connects when built)."""
        if self._client is None:
            self._client = self._connect(self.options)
        return self._client

    def close(self) -> None:
        """Close the client (a later call builds a new one)."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken connection may fail: nothing to do then
                logger.debug("closing a Redis client failed", exc_info=True)

    def run(self, call: Callable[[], T], what: str) -> T:
        """``call()``, tried again on a new client after a transient fault.

        ``call`` must be safe to do again (a read, or a write whose second time is a
        no-op or acceptable): it gets the client through :attr:`client`.

        Args:
            call: the work; it uses :attr:`client`.
            what: what it does, for the log lines (``"listing queues"``).

        Raises:
            RedisOutage: a transient fault lasted longer than option ``retryTimeout``.
            Exception: any error that is not transient, as ``call`` raised it.
        """
        if self._depth:
            return call()  # within another run(), which does it again whole
        tries = 0
        while True:
            self._depth += 1
            try:
                result = call()
            except Exception as exc:
                condition = transient(exc)
                if condition is None:
                    raise
                failure: tuple[Exception, str] | None = (exc, condition)
            else:
                failure = None
            finally:
                self._depth -= 1
            if failure is None:
                self._answered = True
                if self._outage_since is not None:
                    self._recovered(what)
                return result
            if self._fail_fast and not self._answered and nothing_there(failure[0]):
                self.close()
                raise RedisOutage(
                    f"Cannot reach Redis at {self.where} while {what}: {_reason(failure[0])}. "
                    "Nothing answers at that address: check the host and port of the URL "
                    "(option url, --redis-url). Redis was never reached, so this is not "
                    "waited out as an outage (option retryTimeout)."
                ) from failure[0]
            tries += 1
            self._wait(*failure, tries, what)

    def _wait(self, exc: BaseException, condition: str, tries: int, what: str) -> None:
        """Log a new outage, drop the client, sleep before the next try; or give up."""
        self.close()
        now = time.monotonic()
        timeout = self.options.retry_timeout
        if self._outage_since is None or condition != self._condition:
            if self._outage_since is None:
                self._outage_since = now
            self._condition = condition
            logger.warning(
                "redisq data source: Redis at %s is %s (%s) while %s; trying again for "
                "up to %g s since the outage began (option retryTimeout)",
                self.where,
                _describe(condition),
                _reason(exc),
                what,
                timeout,
            )
        elapsed = now - self._outage_since
        if elapsed >= timeout:
            self._outage_since = self._condition = None
            raise RedisOutage(
                f"Redis at {self.where} has been {_describe(condition)} for {elapsed:.0f} s "
                f"({_reason(exc)}) while {what}; the redisq data source gave up after "
                f"option retryTimeout ({timeout:g} s). Check Redis; a streaming query "
                "started again from its checkpoint goes on where it stopped."
            ) from exc
        pause = compute_backoff(tries, base_s=BACKOFF_S, max_s=MAX_BACKOFF_S)
        time.sleep(min(pause, timeout - elapsed))

    def _recovered(self, what: str) -> None:
        assert self._outage_since is not None
        logger.warning(
            "redisq data source: Redis at %s answers again after %.1f s (%s is over; %s)",
            self.where,
            time.monotonic() - self._outage_since,
            self._condition,
            what,
        )
        self._outage_since = self._condition = None

    @property
    def where(self) -> str:
        """The Redis URL without its password."""
        return redact_url(self.options.url)


def _describe(condition: str) -> str:
    return "unreachable" if condition == UNREACHABLE else f"refusing commands ({condition})"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().rstrip(".") or type(exc).__name__
    return text.splitlines()[0][:300]


class HasLink(Protocol):
    """An object of the data source that talks to Redis through a :class:`Link`."""

    link: Link


S = TypeVar("S", bound=HasLink)


def waits_out_outages(
    what: str,
) -> Callable[[Callable[Concatenate[S, P], T]], Callable[Concatenate[S, P], T]]:
    """Run a method of a reader through its ``link``: a transient fault makes it run
    again, whole, on a new client (only for methods that are safe to do twice)."""

    def decorate(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
        def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return self.link.run(lambda: method(self, *args, **kwargs), what)

        functools.update_wrapper(wrapper, method)
        return wrapper

    return decorate
