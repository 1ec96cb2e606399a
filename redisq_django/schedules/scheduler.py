"""Evaluating the schedules in every worker, each tick published exactly once.

There is no beat process: every ``runconsumer`` runs a :class:`Scheduler` as one of its
housekeeping jobs. Two records in Redis, per schedule name, make each tick go out once
however many workers evaluate it (``core.keys.schedule_keys``):

1. **claim** — ``schedule_claim.lua`` raises the schedule's latest claimed tick
   (``ZADD claimed GT CH``) once the tick is due by Redis's own clock; it answers 1 to
   exactly one worker (Redis runs scripts one at a time), and a worker whose clock lags
   cannot claim a tick older than one already claimed, so after downtime two workers
   never fire two different "latest" ticks;
2. **publish** the tick's message with an id derived from (schedule, tick) at most once
   per id (``Broker.send(once=True)``, or the Tasks backend's ``enqueue_once``);
3. **sent** — ``ZADD sent GT name tick`` records that it went out.

A worker that dies between 1 and 3 leaves a claimed tick not marked sent: any worker
that sees that publishes the same tick again :data:`REPAIR_AFTER_MS` after it was due,
which the publish-once id turns into a no-op when the first send did go through. So a
tick is published at least once (claims and repairs) and at most once (ids).

"Now" is Redis's clock, like every other due time of redisq: :class:`RedisClock` reads
``TIME`` and counts the time elapsed since on this host's monotonic clock, which a
wall-clock step (NTP, a resumed VM) does not move; and the claim script refuses a tick
that Redis's clock says is not due yet, whatever clock the worker was given. A refused
claim writes nothing, so it cannot make the ticks before it unclaimable: the worker
evaluates again by the "now" Redis answered, and looks at the tick again when it is due.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redisq_django.core.errors import RedisUnavailable
from redisq_django.core.schedule_ledger import ScheduleLedger
from redisq_django.schedules.spec import ScheduleSpec
from redisq_django.schedules.timing import Missed

logger = logging.getLogger("redisq.schedules")

#: A tick claimed but not marked sent this long after it fell due is published again by
#: whichever worker sees it (its claimer died mid-send, or its send failed), ms.
REPAIR_AFTER_MS = 2000
#: Attempts of one process at publishing one tick before it gives up on that tick.
MAX_FIRE_ATTEMPTS = 5
#: How often the schedules are read again (admin edits reach workers this fast), s.
RELOAD_INTERVAL_S = 2.0
#: How often :class:`RedisClock` reads Redis's clock again, s.
CLOCK_SYNC_INTERVAL_S = 10.0
#: Longest and shortest pause between two evaluations, s.
MAX_PAUSE_S = 1.0
MIN_PAUSE_S = 0.05


class RedisClock:
    """Redis's time in ms: the last ``TIME`` reading plus the time elapsed since, on this
    host's monotonic clock (never its wall clock, which NTP or a resumed VM may step),
    read again every :data:`CLOCK_SYNC_INTERVAL_S` (no round trip per reading).

    The reading is taken as of when its reply arrived, so this clock lags Redis's by at
    most a round trip and never runs ahead of it (but for the drift between the two
    clocks over an interval, a few ppm); the claim script has the last word anyway.
    """

    def __init__(self, ledger: ScheduleLedger, *, resync_s: float = CLOCK_SYNC_INTERVAL_S) -> None:
        self.ledger = ledger
        self.resync_ns = int(resync_s * 1e9)
        #: (Redis's ms, this host's monotonic ns) of the last reading; one tuple, so a
        #: thread never sees half of a new reading.
        self._base: tuple[int, int] | None = None

    def _sync(self) -> tuple[int, int]:
        redis_ms = self.ledger.redis_time()
        self._base = base = (redis_ms, time.monotonic_ns())
        return base

    def observe(self, redis_ms: int) -> None:
        """Take ``redis_ms``, Redis's clock read just now (a script's reply), when this
        clock says later: Redis's clock was stepped back, or ran slower than ours."""
        if redis_ms < self():
            self._base = (redis_ms, time.monotonic_ns())

    def __call__(self) -> int:
        now = time.monotonic_ns()
        base = self._base
        if base is None or now - base[1] >= self.resync_ns:
            base = self._sync()
            now = time.monotonic_ns()
        return base[0] + (now - base[1]) // 1_000_000


@dataclass(frozen=True)
class Fired:
    """A tick this worker published (``repaired``: one another worker had claimed)."""

    name: str
    tick_ms: int
    message_id: str
    repaired: bool = False


#: Publishes the message of one tick (at most once per id); returns its message id.
Fire = Callable[[ScheduleSpec, int], str]
#: Told of each tick this worker published (e.g. to write the schedule's last run).
Record = Callable[[ScheduleSpec, Fired], None]


class Scheduler:
    """Fires the due ticks of the schedules ``load`` returns (see the module docstring).

    Args:
        ledger: the claimed and sent ticks in Redis (``broker.schedule_ledger``).
        load: the current schedules; asked every ``reload_s`` seconds (its failures are
            logged, the schedules known last stay in force).
        fire: publishes a tick (queue message or task); see ``schedules.targets``.
        record: told of each tick published here; its failures are logged.
        clock: "now" in ms since the epoch (default: :class:`RedisClock`). Whatever
            it says, a tick is claimed only once Redis's clock says it is due.
        reload_s: seconds between two calls of ``load``.
    """

    def __init__(
        self,
        ledger: ScheduleLedger,
        load: Callable[[], Sequence[ScheduleSpec]],
        fire: Fire,
        *,
        record: Record | None = None,
        clock: Callable[[], int] | None = None,
        reload_s: float = RELOAD_INTERVAL_S,
    ) -> None:
        self.ledger = ledger
        self.load = load
        self.fire = fire
        self.record = record
        self.clock: Callable[[], int] = clock or RedisClock(ledger)
        self.reload_s = reload_s
        self.specs: dict[str, ScheduleSpec] = {}
        self._loaded_at = float("-inf")
        #: name -> (the spec it was computed for, when to look at it next in ms).
        self._next: dict[str, tuple[ScheduleSpec, int]] = {}
        self._failures: dict[tuple[str, int], int] = {}

    # -- configuration -----------------------------------------------------------------

    def reload(self) -> None:
        """Read the schedules again now (logging what changed)."""
        self._loaded_at = time.monotonic()
        try:
            fresh = {s.name: s for s in self.load()}
        except Exception:
            logger.exception("Could not read the schedules; keeping the %d known", len(self.specs))
            return
        for name, spec in fresh.items():
            old = self.specs.get(name)
            if old is None or _shown(old) != _shown(spec):
                state = "enabled" if spec.enabled else "disabled"
                logger.info("Schedule %s [%s]", spec.describe(), state)
        for name in self.specs.keys() - fresh.keys():
            logger.info("Schedule %s removed", name)
        self.specs = fresh

    def _reload_if_due(self) -> None:
        if time.monotonic() - self._loaded_at >= self.reload_s:
            self.reload()

    # -- evaluation --------------------------------------------------------------------

    def seconds_to_next(self) -> float:
        """Seconds until a schedule may need firing (between 0.05 and 1)."""
        if not self._next:
            return MAX_PAUSE_S
        try:
            wait_ms = min(at for _, at in self._next.values()) - self.clock()
        except Exception:  # Redis away (its clock): evaluate() reports it, not this
            return MAX_PAUSE_S
        return min(MAX_PAUSE_S, max(MIN_PAUSE_S, wait_ms / 1000))

    def evaluate(self) -> list[Fired]:
        """Fire every due tick of every enabled schedule that no worker claimed yet.

        Returns:
            The ticks this worker published, in order.

        Raises:
            RedisUnavailable: Redis cannot be reached (nothing was claimed then).
        """
        self._reload_if_due()
        now = self.clock()
        self._next = {n: v for n, v in self._next.items() if n in self.specs}
        candidates = []
        for spec in self.specs.values():
            if not spec.enabled:
                self._next.pop(spec.name, None)
                continue
            hint = self._next.get(spec.name)
            if hint is None or hint[0] != spec or hint[1] <= now:
                candidates.append(spec)
        if not candidates:
            return []
        ticks = self.ledger.ticks(s.name for s in candidates)
        fired: list[Fired] = []
        for spec in candidates:
            fired += self._evaluate_one(spec, now, *ticks[spec.name])
        return fired

    def _evaluate_one(self, spec: ScheduleSpec, now: int, claimed: int, sent: int) -> list[Fired]:
        fired: list[Fired] = []
        pending = False
        if claimed > sent and claimed > spec.floor_ms:
            # Claimed by a worker that has not (yet) said it published it. (Only a tick
            # due by Redis's clock is ever claimed: publishing it again is never early.)
            if now - claimed >= REPAIR_AFTER_MS:
                done = self._fire(spec, claimed, repaired=True)
                fired += done
                pending = not done and self._attempts_left(spec.name, claimed)
            else:
                pending = True
        last = max(claimed, spec.floor_ms)
        # How far this worker's "now" runs ahead of Redis's, as a refused claim tells.
        ahead = 0
        for _ in range(2):
            refused_at = None
            for tick in spec.timing.due(last, now - ahead, spec.missed, spec.catch_up_ms):
                won, redis_now = self.ledger.claim(spec.name, tick)
                if won is None:
                    refused_at = redis_now
                    break
                if won:
                    done = self._fire(spec, tick)
                    fired += done
                    pending = pending or (not done and self._attempts_left(spec.name, tick))
                last = max(last, tick)
            if refused_at is None:
                break
            # Not due by Redis's clock: nothing was claimed. Evaluate once more by the
            # "now" Redis answered (what is due by it, "latest" included, is claimed
            # now, in order), and time the next look by it.
            ahead = now - refused_at
        redis_now = now - ahead
        # The next look is timed on the scheduler's clock: ``ahead`` of Redis's, unless
        # that is a RedisClock, which takes Redis's answer from now on.
        shift = ahead
        if ahead and isinstance(self.clock, RedisClock):
            self.clock.observe(redis_now)
            shift = 0
        # When to look again: at the next tick (or at once while a tick is unsent). Ticks
        # "latest" and "skip" passed over are never due again; "all" may have more.
        horizon = redis_now - spec.catch_up_ms - 1 if spec.missed is Missed.ALL else redis_now
        upcoming = spec.timing.next_after(max(last, horizon))
        later = upcoming if upcoming is not None else redis_now + 3_600_000
        self._next[spec.name] = (spec, (redis_now if pending else later) + shift)
        return fired

    def _attempts_left(self, name: str, tick: int) -> bool:
        return self._failures.get((name, tick), 0) < MAX_FIRE_ATTEMPTS

    def _fire(self, spec: ScheduleSpec, tick: int, *, repaired: bool = False) -> list[Fired]:
        """Publish one tick and mark it sent; ``[]`` when it failed (logged)."""
        key = (spec.name, tick)
        if not self._attempts_left(*key):
            return []
        try:
            message_id = self.fire(spec, tick)
        except RedisUnavailable:
            raise
        except Exception:
            self._failures[key] = attempts = self._failures.get(key, 0) + 1
            give_up = "; giving up on this tick" if attempts >= MAX_FIRE_ATTEMPTS else ""
            logger.exception(
                "Schedule %s: publishing the tick of %d failed (attempt %d)%s",
                spec.describe(),
                tick,
                attempts,
                give_up,
            )
            return []
        self._failures.pop(key, None)
        self.ledger.mark_sent(spec.name, tick)
        result = Fired(spec.name, tick, message_id, repaired)
        logger.info("Schedule %s fired: %s", spec.name, message_id)
        if self.record is not None:
            try:
                self.record(spec, result)
            except Exception:
                logger.exception("Schedule %s: recording its last run failed", spec.name)
        return [result]


def _shown(spec: ScheduleSpec) -> tuple[Any, ...]:
    """What a change of is worth a log line (not the last run this worker recorded)."""
    return (spec.timing, spec.target, spec.enabled, spec.missed, spec.catch_up_ms)
