"""A logical consumer's limits as one worker process's threads meet them: they wait here
for a slot (``max_in_flight``) and for rate tokens (``rate``) before they fetch.

The limits themselves live in Redis (``core/limits.py``), shared with every other
process. Here, one thread of the process at a time asks Redis while the others wait
their turn, so that eight threads waiting for the next token cost one call per token,
not eight; a slot given back in this process wakes the waiting thread at once.

Every wait is bounded (:data:`LONGEST_WAIT_S`): the thread then returns to its loop,
which looks at stop requests, pauses and unsettled messages, and asks again.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol

from redisq_django.core.delivery import Delivery
from redisq_django.core.handler import ConsumerSpec
from redisq_django.core.keys import GroupKeys
from redisq_django.core.limits import KeyRates, RateLimit, Slots, Tokens
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient
from redisq_django.core.worker.state import StopSignal

#: Longest one call here waits before handing the thread back to its loop (seconds).
LONGEST_WAIT_S = 1.0
#: How often a thread waiting for a slot asks Redis again (slots given back in another
#: process are seen this late at most; in this process, at once).
SLOT_POLL_S = 0.05
#: A message fetched while its token was not yet due waits for it this long at most
#: (seconds), and never more than this share of its visibility timeout.
RESERVE_WITHIN_S = 1.0
RESERVE_SHARE = 0.25


class Holder(Protocol):
    """What the flow knows of a handler thread."""

    slots_held: int
    stop_signal: StopSignal

    @property
    def stopping(self) -> bool: ...

    @property
    def instance(self) -> str: ...


class Flow:
    """The limits of one logical consumer in this process, shared by its threads (and by
    every partition's): built by the worker, changed by :meth:`apply` when the admin
    changes them.

    Args:
        client, scripts: the Redis client the threads use.
        keys: the consumer's keys on the queue's base (``GroupKeys.rate``, ``.slots``).
        spec: its limits (``rate``, ``max_in_flight``).
        lease_ms: how long a slot's lease lasts without renewal (the heartbeat TTL).
    """

    def __init__(
        self,
        *,
        client: RedisClient,
        scripts: Scripts,
        keys: GroupKeys,
        spec: ConsumerSpec,
        lease_ms: int,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.keys = keys
        self.lease_ms = lease_ms
        self.rate: RateLimit | None = None
        self.key_rates: KeyRates | None = None
        self.slots: Slots | None = None
        self._slot_turn = threading.Lock()
        self._token_turn = threading.Lock()
        self._freed = threading.Condition()
        self.apply(spec)

    def apply(self, spec: ConsumerSpec) -> None:
        """Use ``spec``'s limits from the next fetch on (threads holding slots keep them
        until their handlers end)."""
        rate, per_key = spec.rate, spec.rate_per_key
        self.rate = RateLimit(self.client, self.scripts, self.keys.rate, rate) if rate else None
        self.key_rates = (
            KeyRates(self.client, self.scripts, self.keys.key_rate(""), per_key)
            if per_key
            else None
        )
        limit = spec.max_in_flight
        self.slots = (
            Slots(self.client, self.scripts, self.keys.slots, limit, self.lease_ms)
            if limit
            else None
        )
        with self._freed:
            self._freed.notify_all()  # a raised limit lets the waiting thread in at once

    @property
    def active(self) -> bool:
        """Whether any limit applies (none: the threads fetch as without this class)."""
        return self.rate is not None or self.slots is not None or self.key_rates is not None

    # -- slots --------------------------------------------------------------------------

    def take_slots(
        self, holder: Holder, n: int, *, wait: bool = True, within: float = LONGEST_WAIT_S
    ) -> int:
        """Take up to ``n`` slots for ``holder``, waiting (``wait``) up to ``within``
        seconds for one: how many it took (0: none free, or stopping)."""
        deadline = time.monotonic() + (within if wait else 0)
        while not holder.stopping:
            if not _acquire(self._slot_turn, holder, deadline):
                return 0
            try:
                slots = self.slots
                if slots is None:  # the limit was removed meanwhile
                    return n
                got, _ = slots.take(holder.instance, holder.slots_held, n)
                if got:
                    holder.slots_held += got
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    return 0
                with self._freed:  # woken by a slot given back in this process
                    self._freed.wait(min(left, SLOT_POLL_S))
            finally:
                self._slot_turn.release()
        return 0

    def give_slots(self, holder: Holder, n: int | None = None) -> None:
        """Give back ``n`` (default: all) of ``holder``'s slots."""
        held = holder.slots_held
        n = held if n is None else min(n, held)
        if n <= 0:
            return
        self._any_slots().give(holder.instance, held, n)
        holder.slots_held = held - n
        with self._freed:
            self._freed.notify_all()

    def renew(self, holder: Holder) -> None:
        """Renew the leases of ``holder``'s slots (with its heartbeat)."""
        self._any_slots().renew(holder.instance, holder.slots_held)

    def _any_slots(self) -> Slots:
        """The slots, also after the limit was removed: slots still held go back."""
        if self.slots is not None:
            return self.slots
        return Slots(self.client, self.scripts, self.keys.slots, 0, self.lease_ms)

    # -- rate tokens --------------------------------------------------------------------

    def take_tokens(self, holder: Holder, n: int, *, wait: bool = True) -> Tokens:
        """Take up to ``n`` rate tokens, waiting (``wait``) up to :data:`LONGEST_WAIT_S`
        for one (none: 0 tokens, or stopping).

        When none is due, the next turn is reserved and the thread sleeps until it,
        without the process's turn to ask: the next thread reserves the turn after, so
        a late wake-up loses no turn, and the threads' turns follow each other."""
        deadline = time.monotonic() + (LONGEST_WAIT_S if wait else 0)
        while not holder.stopping:
            if not _acquire(self._token_turn, holder, deadline):
                return Tokens(0)
            try:
                rate = self.rate
                if rate is None:
                    return Tokens(n)
                tokens = rate.take(n)
                left = deadline - time.monotonic()
                if tokens.count or left <= 0:
                    return tokens
                tokens = rate.reserve(left)
            finally:
                self._token_turn.release()
            if tokens.count:  # a stop request loses the turn: the rate runs under
                return Tokens(0) if holder.stop_signal.wait(tokens.due_in) else tokens
            holder.stop_signal.wait(min(tokens.due_in, max(0.0, deadline - time.monotonic())))
        return Tokens(0)

    def give_tokens(self, tokens: Tokens, used: int) -> None:
        """Give back those of ``tokens`` beyond ``used`` (nothing was fetched for them, or
        it waits for its ordering key's turn)."""
        if self.rate is not None and tokens.count > used:
            self.rate.give(tokens, used)

    def key_turns(self, deliveries: list[Delivery]) -> list[tuple[Delivery, int]]:
        """The deliveries over their ordering key's rate (``rate_per_key``), each with the
        ms until its turn: the key's next token, and one interval more for each of the
        key's messages before it here, so that they come back one by one. The others took
        their key's token (messages without a key take none)."""
        per_key = self.key_rates
        if per_key is None:
            return []
        wanted: dict[str, int] = {}
        for d in deliveries:
            if d.message.key is not None:
                wanted[d.message.key] = wanted.get(d.message.key, 0) + 1
        if not wanted:
            return []
        granted = per_key.take(wanted)
        interval_ms = per_key.rate.interval_us / 1000
        over: list[tuple[Delivery, int]] = []
        behind: dict[str, int] = {}
        for d in deliveries:
            key = d.message.key
            if key is None:
                continue
            left, wait = granted[key]
            if left > 0:
                granted[key] = (left - 1, wait)
                continue
            n = behind[key] = behind.get(key, -1) + 1
            first = wait * 1000 if wait else interval_ms  # granted some: the next is one on
            over.append((d, max(1, math.ceil(first + n * interval_ms))))
        return over

    def admit_fetched(self, holder: Holder, visibility_timeout_ms: int) -> bool:
        """For a message fetched holding no slot and no token (the thread waited for the
        queue, not for the limits): take a slot, then reserve the next token and sleep
        until it is due. False when stopping, or when either is too far away for a
        fetched message to wait (the caller hands the message back)."""
        within = min(RESERVE_WITHIN_S, visibility_timeout_ms / 1000 * RESERVE_SHARE)
        if (
            self.slots is not None
            and not holder.slots_held
            and not self.take_slots(holder, 1, within=within)
        ):
            return False
        rate = self.rate
        if rate is None:
            return True
        deadline = time.monotonic() + within
        while not holder.stopping:
            tokens = rate.reserve(max(0.0, deadline - time.monotonic()))
            if tokens.count:
                return not holder.stop_signal.wait(tokens.due_in)
            if time.monotonic() + tokens.due_in > deadline:
                return False
            holder.stop_signal.wait(tokens.due_in)
        return False


def _acquire(lock: threading.Lock, holder: Holder, deadline: float) -> bool:
    """Take ``lock``, looking at ``holder``'s stop request meanwhile; False when it is
    stopping or ``deadline`` passed first."""
    while not holder.stopping:
        left = deadline - time.monotonic()
        if left <= 0:
            return lock.acquire(blocking=False)
        if lock.acquire(timeout=min(left, SLOT_POLL_S)):
            return True
    return False
