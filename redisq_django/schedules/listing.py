"""What each schedule is and does now, as ``manage.py redisq schedules``, the
``runconsumer`` banner and the admin show it.

The schedules listed are what the workers evaluate: the ``Schedule`` rows (see
``schedules.job.RowLoader``), plus the code's declarations that have no row yet (written
at the next ``runconsumer`` start or ``migrate``). The last tick is the one the workers
recorded in Redis (``core.keys.schedule_keys``: ``claimed`` and ``sent``), and the next
tick is computed from the clock *when asked*: a value stored at the last save or fire
would be stale after downtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from redisq_django.core.clock import ms_to_datetime
from redisq_django.core.errors import RedisUnavailable
from redisq_django.core.schedule_ledger import ScheduleLedger
from redisq_django.schedules.spec import ScheduleSpec
from redisq_django.schedules.timing import ScheduleError

if TYPE_CHECKING:
    from redisq_django.models import Schedule

#: The states a schedule is listed in.
ENABLED, DISABLED, NOT_DECLARED, INVALID, NO_ROW = (
    "enabled",
    "disabled",
    "not declared (not run)",
    "invalid (not run)",
    "declared, no row yet",
)


@dataclass(frozen=True)
class ScheduleState:
    """One schedule as listed.

    Attributes:
        name: the schedule's name.
        expression: its cron expression, or ``"every 30s"``; the raw columns when invalid.
        timezone: the cron's time zone (``"-"`` for an interval: it does not apply).
        target: ``"queue reports"`` or ``"task shop.tasks.refresh"``.
        state: one of :data:`ENABLED`, :data:`DISABLED`, :data:`NOT_DECLARED`,
            :data:`INVALID` (``error`` says why), :data:`NO_ROW`.
        next_tick_ms: the first tick after "now" it would fire (None: none, it is off or
            invalid).
        last_sent_ms: the latest tick a worker published (Redis; None: none recorded).
        last_claimed_ms: the latest tick a worker claimed (Redis; None: none); above
            ``last_sent_ms`` while its publishing is under way or failed.
        error: why an invalid schedule is not run.
    """

    name: str
    expression: str
    timezone: str
    target: str
    state: str
    next_tick_ms: int | None
    last_sent_ms: int | None = None
    last_claimed_ms: int | None = None
    error: str = ""

    @property
    def runs(self) -> bool:
        """Whether the workers fire its ticks."""
        return self.state == ENABLED


def next_tick(spec: ScheduleSpec, now_ms: int) -> int | None:
    """The first tick strictly after ``now_ms`` that ``spec`` fires (None: it is off, or
    has none). Ticks at or before its start (``since``) or its last run never fire."""
    if not spec.enabled:
        return None
    return spec.timing.next_after(max(now_ms, spec.floor_ms))


def row_next_tick(row: Schedule, now_ms: int) -> int | None:
    """:func:`next_tick` of a ``Schedule`` row (None too when the row is invalid)."""
    try:
        return next_tick(row.to_spec(), now_ms)
    except (ScheduleError, ValueError):
        return None


def _expression(spec: ScheduleSpec) -> tuple[str, str]:
    timing = spec.timing
    if timing.cron is not None:
        return timing.cron, timing.timezone
    return timing.describe(), "-"


def row_state(row: Schedule, now_ms: int) -> ScheduleState:
    """How row ``row`` is listed at ``now_ms`` (without its Redis state)."""
    try:
        spec = row.to_spec()
    except (ScheduleError, ValueError) as exc:
        expression = row.cron or (f"every {row.every}" if row.every is not None else "-")
        target = f"task {row.task}" if row.task else f"queue {row.queue}"
        return ScheduleState(
            row.name, expression, row.timezone, target, INVALID, None, error=str(exc)
        )
    # Off because staff disabled it, or because the code no longer declares it.
    state = ENABLED if spec.enabled else (DISABLED if not row.enabled else NOT_DECLARED)
    expression, zone = _expression(spec)
    return ScheduleState(
        row.name, expression, zone, spec.target.describe(), state, next_tick(spec, now_ms)
    )


def spec_state(spec: ScheduleSpec, now_ms: int, state: str) -> ScheduleState:
    """How a schedule without a row (a declaration not written yet) is listed."""
    expression, zone = _expression(spec)
    return ScheduleState(
        spec.name, expression, zone, spec.target.describe(), state, next_tick(spec, now_ms)
    )


def listed(now_ms: int) -> list[ScheduleState]:
    """Every schedule the workers evaluate (rows), and declarations without a row yet,
    sorted by name, as at ``now_ms`` (no Redis state)."""
    from redisq_django.models import Schedule, default_timezone
    from redisq_django.schedules.declared import declarations

    found = {row.name: row_state(row, now_ms) for row in Schedule.objects.all()}
    zone = default_timezone()
    for decl in declarations():
        if decl.name not in found:
            found[decl.name] = spec_state(decl.spec(zone), now_ms, NO_ROW)
    return [found[name] for name in sorted(found)]


def with_ticks(
    states: list[ScheduleState], ticks: Mapping[str, tuple[int, int]]
) -> list[ScheduleState]:
    """``states`` with the last claimed and sent ticks of ``ticks`` (``ScheduleLedger.ticks``)."""
    out = []
    for s in states:
        claimed, sent = ticks.get(s.name, (0, 0))
        out.append(replace(s, last_sent_ms=sent or None, last_claimed_ms=claimed or None))
    return out


def current(ledger: ScheduleLedger) -> tuple[list[ScheduleState], str]:
    """Every schedule (:func:`listed`) with its ticks in Redis, "now" being Redis's clock
    as for the workers.

    Returns:
        The schedules, and what went wrong with Redis ("" if nothing): then "now" is this
        host's clock and the last ticks are unknown (None).
    """
    from redisq_django.core.clock import now_ms
    from redisq_django.schedules.scheduler import RedisClock

    try:
        now = RedisClock(ledger)()
    except RedisUnavailable as exc:
        return listed(now_ms()), str(exc)
    states = listed(now)
    try:
        return with_ticks(states, ledger.ticks(s.name for s in states)), ""
    except RedisUnavailable as exc:
        return states, str(exc)


def when(ms: int | None) -> str:
    """A tick as listed: ISO 8601 UTC to the second, ``"-"`` for none."""
    if ms is None:
        return "-"
    return ms_to_datetime(ms).isoformat(timespec="seconds")


def banner_lines(states: list[ScheduleState]) -> list[str]:
    """The ``runconsumer`` banner's lines about the schedules it evaluates."""
    running = [s for s in states if s.runs]
    if not running:
        lines = ["  schedules: none to evaluate"]
    else:
        lines = [f"  schedules evaluated here ({len(running)}; each tick fires once in all):"]
        for s in running:
            zone = "" if s.timezone == "-" else f" ({s.timezone})"
            lines.append(
                f"    {s.name}: {s.expression}{zone} -> {s.target}, next {when(s.next_tick_ms)}"
            )
    idle = [f"{s.name} ({s.state})" for s in states if not s.runs]
    if idle:
        lines.append(f"  schedules not run: {', '.join(idle)}")
    return lines
