"""When a schedule ticks: a cron expression in a time zone (parsed by ``cronsim``), or a
fixed interval; and which due ticks fire after a pause (:class:`Missed`).

Pure functions of times in milliseconds since the epoch (UTC), tested without Redis. A
tick is an instant, so its id is the same for every worker wherever its clock's zone.

Time zones and daylight saving time (cron only; intervals are absolute durations,
aligned to the Unix epoch):

- Cron fields are matched against the wall clock of the schedule's time zone.
- A time that does not exist (spring forward, e.g. 02:30 in Paris on the last Sunday of
  March) fires at the first minute after the jump (03:00 local) for an expression with
  a fixed minute and hour; an expression with ``*`` (or ``*/n``) in its hour or minute
  field simply has no tick in the missing hour.
- A time that happens twice (fall back) fires once, at its first occurrence, for an
  expression with a fixed minute and hour; hourly or finer expressions fire in both
  occurrences (they follow elapsed time).

These are Debian cron's rules, which ``cronsim`` implements.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from redisq_django.core.errors import ConfigurationError

#: The shortest interval of an ``every=`` schedule, ms (workers look at most once a
#: second when nothing is due, about every 0.1 s when a tick is near).
MIN_EVERY_MS = 1000
#: A tick of a ``missed="skip"`` schedule fires while it is at most this late, and
#: ``missed="all"`` fires the ticks at most this old, unless the schedule says (ms).
DEFAULT_CATCH_UP_MS = 60_000
#: ``missed="all"`` fires at most this many ticks per evaluation; the rest follow at the
#: next one (a second later), so catching up never blocks a worker for long.
MAX_TICKS_PER_ROUND = 100
#: Most cron matches examined in one call (a per-second expression over a repeated DST
#: hour yields up to 3600 already-passed instants before the next real tick).
_MAX_STEPS = 20_000
#: Windows before "now" in which the most recent tick is looked for, smallest first, so
#: that finding it costs about as many steps as the ticks in the smallest window that
#: holds one (ms): a minute, an hour, a day, 35 days, 400 days, 5 years. A schedule
#: whose last tick is older than that (or than its start) has none to catch up.
_LOOKBACK_MS = (60_000, 3_600_000, 86_400_000, 35 * 86_400_000, 400 * 86_400_000, 1827 * 86_400_000)


class ScheduleError(ConfigurationError):
    """A schedule's timing, time zone or target is invalid; the message says which."""


class Missed(StrEnum):
    """Which due ticks fire when a schedule is evaluated late (workers were down, or
    stalled): the most recent one, none that is late, or each one within a bound."""

    LATEST = "latest"
    SKIP = "skip"
    ALL = "all"


@functools.lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """The ``ZoneInfo`` of an IANA time zone name.

    Raises:
        ScheduleError: no such time zone.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"Unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Paris'."
        ) from None


def every_to_ms(every: dt.timedelta | float | int) -> int:
    """An interval (a timedelta or seconds) in whole ms.

    Raises:
        ScheduleError: not a number, or shorter than :data:`MIN_EVERY_MS`.
    """
    if isinstance(every, dt.timedelta):
        ms = every // dt.timedelta(milliseconds=1)
    elif isinstance(every, int | float) and not isinstance(every, bool):
        ms = int(every * 1000)
    else:
        raise ScheduleError(f"every= must be a timedelta or seconds, not {every!r}.")
    if ms < MIN_EVERY_MS:
        raise ScheduleError(f"every= must be at least 1 second, got {ms / 1000:g} s.")
    return ms


def check_cron(expr: str) -> str:
    """``expr`` when it is a valid cron expression (5 fields, or 6 with seconds first).

    Raises:
        ScheduleError: naming the field at fault.
    """
    if not isinstance(expr, str) or not expr.strip():
        raise ScheduleError("cron= must be a cron expression such as '*/5 * * * *'.")
    try:
        CronSim(expr, dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    except CronSimError as exc:
        raise ScheduleError(f"Invalid cron expression {expr!r}: {exc}.") from None
    return " ".join(expr.split())


def _to_ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


@dataclass(frozen=True)
class Timing:
    """When a schedule ticks: ``cron`` in ``timezone``, or every ``every_ms``.

    Interval ticks are the multiples of ``every_ms`` since the Unix epoch (an ``every``
    of 5 minutes ticks at :00, :05, … UTC), so every worker computes the same instants.
    """

    cron: str | None = None
    every_ms: int | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_ms is None):
            raise ScheduleError("A schedule needs either cron= or every= (not both).")
        if self.cron is not None:
            object.__setattr__(self, "cron", check_cron(self.cron))
        if self.every_ms is not None and self.every_ms < MIN_EVERY_MS:
            raise ScheduleError("every= must be at least 1 second.")
        zone(self.timezone)

    @classmethod
    def of(
        cls,
        cron: str | None = None,
        every: dt.timedelta | float | None = None,
        timezone: str = "UTC",
    ) -> Timing:
        """A timing from the arguments users write (``every`` a timedelta or seconds)."""
        if cron is not None and every is not None:
            raise ScheduleError("A schedule needs either cron= or every= (not both).")
        return cls(cron, every_to_ms(every) if every is not None else None, timezone)

    def describe(self) -> str:
        """``"cron */5 * * * * (Europe/Paris)"`` or ``"every 30s"``."""
        if self.cron is not None:
            return f"cron {self.cron} ({self.timezone})"
        return f"every {_human(self.every_ms or 0)}"

    def _cron_after(self, after_ms: int) -> Iterator[int]:
        """Cron ticks strictly after ``after_ms``, ascending (at most :data:`_MAX_STEPS`
        matches examined)."""
        assert self.cron is not None
        start = dt.datetime.fromtimestamp(after_ms / 1000, zone(self.timezone))
        matches = CronSim(self.cron, start)
        last = after_ms
        for _ in range(_MAX_STEPS):
            try:
                tick = _to_ms(next(matches))
            except StopIteration:  # no match for 50 years (e.g. "0 0 30 2 *")
                return
            # Around a DST fall-back cronsim may answer an instant already passed (it
            # matches wall-clock times): skip those, keep strictly increasing ticks.
            if tick > last:
                last = tick
                yield tick

    def next_after(self, after_ms: int) -> int | None:
        """The first tick strictly after ``after_ms`` (None: there is none)."""
        if self.every_ms is not None:
            return (after_ms // self.every_ms + 1) * self.every_ms
        return next(self._cron_after(after_ms), None)

    def ticks(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """The first ``limit`` ticks in ``(after_ms, until_ms]``, ascending."""
        if self.every_ms is not None:
            step = self.every_ms
            first = (after_ms // step + 1) * step
            return list(range(first, until_ms + 1, step))[:limit]
        out: list[int] = []
        for tick in self._cron_after(after_ms):
            if tick > until_ms or len(out) >= limit:
                break
            out.append(tick)
        return out

    def latest(self, after_ms: int, until_ms: int) -> int | None:
        """The most recent tick in ``(after_ms, until_ms]`` (None: there is none)."""
        if until_ms <= after_ms:
            return None
        if self.every_ms is not None:
            tick = until_ms // self.every_ms * self.every_ms
            return tick if tick > after_ms else None
        for window in _LOOKBACK_MS:
            start = max(after_ms, until_ms - window)
            found = None
            for tick in self._cron_after(start):
                if tick > until_ms:
                    break
                found = tick
            if found is not None or start == after_ms:
                return found
        return None

    def due(self, after_ms: int, now_ms: int, missed: Missed, catch_up_ms: int) -> list[int]:
        """The ticks to fire now, ascending, when the last one fired (or the start) is
        ``after_ms``.

        - ``LATEST``: the most recent due tick, however late; older ones are dropped.
        - ``SKIP``: the most recent due tick if it is at most ``catch_up_ms`` late.
        - ``ALL``: every due tick at most ``catch_up_ms`` old (at most
          :data:`MAX_TICKS_PER_ROUND` per call, the oldest first).
        """
        if missed is Missed.ALL:
            return self.ticks(max(after_ms, now_ms - catch_up_ms - 1), now_ms, MAX_TICKS_PER_ROUND)
        if missed is Missed.SKIP:
            after_ms = max(after_ms, now_ms - catch_up_ms - 1)
        tick = self.latest(after_ms, now_ms)
        return [] if tick is None else [tick]


def _human(ms: int) -> str:
    parts = []
    seconds, rest = divmod(ms, 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or rest or not parts:
        parts.append(f"{seconds + rest / 1000:g}s")
    return "".join(parts)
