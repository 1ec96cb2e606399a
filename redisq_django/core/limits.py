"""Flow control a logical consumer's instances share on every host: a rate limit
(``rate="100/s"``) and a concurrency limit (``max_in_flight=5``), kept in Redis and
decided on Redis's clock, never on a host's.

* :class:`RateLimit` is a GCRA token bucket (``rate.lua``): one number per consumer, the
  time its bucket is full again. Taking a token before fetching means a message over
  the limit waits in the queue: never fetched, so never failed, retried, counted as an
  attempt or reclaimed as stuck.
* :class:`Slots` are leases (``slots.lua``): an instance takes a slot before it starts a
  handler and gives it back after; its heartbeat renews the lease, so a SIGKILLed
  instance's slots come back when their leases end (the heartbeat TTL, 15 s by
  default), never leak.

The worker's side (waiting for a token or a slot, one thread per process at a time) is
``core/worker/flow.py``. PROTOCOL.md, "Flow control", says what a worker in another
language must do to honour the same limits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from redisq_django.core.errors import ConfigurationError
from redisq_django.core.keys import GroupKeys
from redisq_django.core.scripts import ScriptName, Scripts
from redisq_django.core.types import RedisClient

#: The periods a rate may name, in seconds.
PERIODS = {"s": 1, "m": 60, "h": 3600}
_RATE_RE = re.compile(r"^\s*(\d{1,9})\s*/\s*([smh])\s*\Z")
#: The default burst lets a start this late (seconds) keep its turn: a worker that
#: wakes a millisecond after a token is due must not lose that token.
BURST_SLACK_S = 0.05
#: The highest rate accepted (per second): beyond it, the scripts' µs clock is too coarse.
MAX_PER_SECOND = 100_000


def run_scripts(
    client: RedisClient, scripts: Scripts, calls: Sequence[tuple[ScriptName, list[str], list[Any]]]
) -> list[Any]:
    """Each call's reply, in one round trip (a pipeline, which loads no script: on
    NOSCRIPT the scripts are loaded and the calls sent again); one call after another on
    a cluster, whose client pipelines no script."""
    if isinstance(client, redis.cluster.RedisCluster):
        return [scripts(name, keys, args) for name, keys, args in calls]

    def send() -> list[Any]:
        with client.pipeline(transaction=False) as pipe:
            for name, keys, args in calls:
                scripts(name, keys, args, client=pipe)
            return list(pipe.execute())

    try:
        return send()
    except redis.exceptions.NoScriptError:
        for name in {name for name, _, _ in calls}:
            scripts.load(name)
        return send()


class RateError(ConfigurationError, ValueError):
    """A rate's text is not ``"<count>/<s|m|h>"`` or is out of bounds."""


@dataclass(frozen=True)
class Rate:
    """A rate limit: at most ``count`` messages per ``period_s`` seconds, ``burst`` of
    them at once after a pause.

    Over any span of ``t`` seconds at most ``burst + count * t / period_s`` messages
    start, whichever instances start them.
    """

    count: int
    period_s: int
    burst: int

    @classmethod
    def parse(cls, text: str, burst: int | None = None) -> Rate:
        """``"100/s"``, ``"600/m"`` or ``"5000/h"``; ``burst`` defaults to
        :func:`default_burst`.

        Raises:
            RateError: saying what is wrong and what is valid.
        """
        found = _RATE_RE.match(text) if isinstance(text, str) else None
        if found is None:
            raise RateError(
                f"rate {text!r} is not a rate: write it as '<count>/s', '<count>/m' or "
                "'<count>/h', e.g. '100/s' (at most 100 messages a second)"
            )
        count, period = int(found[1]), PERIODS[found[2]]
        if count < 1 or count / period > MAX_PER_SECOND:
            raise RateError(
                f"rate {text!r} is out of bounds: at least 1 message per period, at most "
                f"{MAX_PER_SECOND} a second"
            )
        if burst is None:
            burst = default_burst(count, period)
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise RateError(f"burst {burst!r} must be an integer >= 1 (messages at once)")
        return cls(count, period, burst)

    @property
    def per_second(self) -> float:
        return self.count / self.period_s

    @property
    def interval_us(self) -> float:
        """Microseconds between two messages at the steady rate."""
        return self.period_s * 1_000_000 / self.count

    def __str__(self) -> str:
        unit = {v: k for k, v in PERIODS.items()}[self.period_s]
        return f"{self.count}/{unit}"

    def describe(self) -> str:
        """``"100/s, bursts of 6"``: what the admin and the banner show."""
        return f"{self}, bursts of {self.burst}"


def default_burst(count: int, period_s: int) -> int:
    """One message, and :data:`BURST_SLACK_S` worth of the rate more: ``"50/s"`` -> 3,
    ``"1000/s"`` -> 51, ``"10/s"`` -> 1."""
    return 1 + math.floor(count / period_s * BURST_SLACK_S)


def rate_problem(text: object, burst: object = None) -> str | None:
    """Why ``text`` (with ``burst``) is no valid rate, or None."""
    try:
        Rate.parse(text, burst)  # type: ignore[arg-type]
    except RateError as exc:
        return str(exc)
    return None


class RateLimit:
    """One consumer's rate limit in Redis (``rate.lua``), at ``key``.

    Every method is one script call; a Redis error propagates (the worker waits it out
    as any other).
    """

    def __init__(self, client: RedisClient, scripts: Scripts, key: str, rate: Rate) -> None:
        self.client = client
        self.scripts = scripts
        self.key = key
        self.rate = rate

    def _call(self, op: str, n: float, mark: int = 0) -> tuple[int, float, int]:
        rate = self.rate
        args = [f"{rate.interval_us:.3f}", rate.burst, op, int(n), mark]
        granted, wait_us, after = self.scripts("rate", [self.key], args)
        return int(granted), int(wait_us) / 1_000_000, int(after)

    def take(self, n: int) -> Tokens:
        """Take up to ``n`` tokens now (:attr:`Tokens.count`; when none, ``due_in``
        says the seconds until one is)."""
        granted, wait, mark = self._call("take", n)
        return Tokens(granted, mark, wait)

    def reserve(self, within_s: float) -> Tokens:
        """Reserve the next token if it is due within ``within_s`` seconds: one token,
        ``due_in`` seconds from now; or none, and ``due_in`` the seconds after which to
        ask again."""
        granted, wait, mark = self._call("reserve", within_s * 1_000_000)
        return Tokens(granted, mark, wait)

    def give(self, tokens: Tokens, used: int) -> bool:
        """Give back the tokens of ``tokens`` beyond ``used`` (nothing was fetched for
        them), unless others were taken since: then they are lost (the rate runs a
        little under, never over). True when given back."""
        unused = tokens.count - used
        if unused <= 0 or not tokens.mark:
            return False
        return self._call("give", unused, tokens.mark)[0] == 1


@dataclass(frozen=True)
class Tokens:
    """Tokens a caller took (``count``), what it must show to give them back
    (``mark``), and when none were, the seconds until one is due (``due_in``)."""

    count: int
    mark: int = 0
    due_in: float = 0.0


class KeyRates:
    """One consumer's rate limit per ordering key (``rate_per_key``): a bucket of
    ``rate`` per key, each at ``prefix + key`` (``rate.lua``), asked for many keys in one
    round trip."""

    def __init__(self, client: RedisClient, scripts: Scripts, prefix: str, rate: Rate) -> None:
        self.client = client
        self.scripts = scripts
        self.prefix = prefix
        self.rate = rate

    def take(self, wanted: dict[str, int]) -> dict[str, tuple[int, float]]:
        """Take up to ``wanted[key]`` tokens of each key's bucket: per key, how many were
        taken and, when none, the seconds until one is due."""
        rate = self.rate
        args = [f"{rate.interval_us:.3f}", rate.burst, "take"]
        keys = list(wanted)
        calls: list[tuple[ScriptName, list[str], list[Any]]] = [
            ("rate", [self.prefix + key], [*args, wanted[key]]) for key in keys
        ]
        replies = run_scripts(self.client, self.scripts, calls)
        return {k: (int(r[0]), int(r[1]) / 1_000_000) for k, r in zip(keys, replies, strict=True)}


class Slots:
    """One consumer's concurrency slots in Redis (``slots.lua``), at ``key``: at most
    ``limit`` in use, each leased for ``lease_ms`` and renewed by its holder's heartbeat.

    An instance holds slots ``<instance>/1`` to ``<instance>/h``; it says how many it
    holds with each call (it is the only one that changes them).
    """

    def __init__(
        self, client: RedisClient, scripts: Scripts, key: str, limit: int, lease_ms: int
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.key = key
        self.limit = limit
        self.lease_ms = lease_ms

    def take(self, instance: str, held: int, n: int) -> tuple[int, float | None]:
        """Take up to ``n`` more slots for ``instance``: how many were taken and, when
        none, the seconds until the first lease of another ends (None: no lease at all,
        a limit lowered below the slots in use)."""
        granted, wait_ms = self.scripts(
            "slots", [self.key], [instance, held, "take", n, self.limit, self.lease_ms]
        )
        wait = int(wait_ms)
        return int(granted), (wait / 1000 if wait >= 0 else None)

    def give(self, instance: str, held: int, n: int) -> None:
        """Give back ``n`` of the ``held`` slots of ``instance``."""
        if n > 0:
            self.scripts("slots", [self.key], [instance, held, "give", n])

    def renew(self, instance: str, held: int) -> None:
        """Renew the leases of the ``held`` slots of ``instance``."""
        if held > 0:
            self.scripts("slots", [self.key], [instance, held, "renew", 0, 0, self.lease_ms])


def slots_in_use(client: RedisClient, key: str, now_ms: int) -> int:
    """How many slots at ``key`` have a lease that has not ended at ``now_ms`` (Redis's
    clock)."""
    return int(client.zcount(key, now_ms, "+inf"))


def throttled_until(client: RedisClient, key: str) -> int | None:
    """When (µs, Redis's clock) the rate limit at ``key`` has a full bucket again, or
    None when it has one now."""
    value = client.get(key)
    return int(value) if value else None


@dataclass(frozen=True)
class FlowFigures:
    """What a consumer's limits are doing now, as Redis says.

    Attributes:
        slots_in_use: slots of its ``max_in_flight`` held by running handlers.
        rate_ahead_s: how far ahead of now its rate limit has given out tokens, seconds
            (0: its bucket is full). At ``(burst - 1) / rate`` or more, no token is free:
            messages wait for the rate.
    """

    slots_in_use: int = 0
    rate_ahead_s: float = 0.0

    def at_rate_limit(self, rate: Rate | None) -> bool:
        """Whether messages wait for ``rate`` now (no token free)."""
        if rate is None:
            return False
        return self.rate_ahead_s * 1_000_000 > (rate.burst - 1) * rate.interval_us


def read_flow(
    client: RedisClient, scripts: Scripts, keys: Sequence[GroupKeys]
) -> list[FlowFigures]:
    """The :class:`FlowFigures` of each consumer (its keys on the queue's base), in one
    round trip: each read by a script on the node that holds the key, on its clock
    (``slots.lua count``, ``rate.lua peek``; a cluster pipelines no ``TIME``).

    Raises:
        redis.RedisError: Redis did not answer.
    """
    if not keys:
        return []

    calls: list[tuple[ScriptName, list[str], list[Any]]] = []
    for gkeys in keys:
        calls.append(("slots", [gkeys.slots], ["", 0, "count"]))
        calls.append(("rate", [gkeys.rate], [1, 1, "peek", 0]))
    replies = run_scripts(client, scripts, calls)
    out = []
    for i in range(len(keys)):
        slots, rate = replies[2 * i], replies[2 * i + 1]
        out.append(FlowFigures(int(slots[0]), int(rate[1]) / 1_000_000))
    return out
