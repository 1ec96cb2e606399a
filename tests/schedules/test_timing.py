"""When schedules tick (pure functions, no Redis): intervals aligned to the epoch, cron
in a time zone across DST transitions (Europe/Paris, America/New_York), and which due
ticks fire after downtime (``missed``)."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest

from redisq_django.schedules.spec import QueueTarget, ScheduleSpec, TaskTarget, tick_id
from redisq_django.schedules.timing import (
    MAX_TICKS_PER_ROUND,
    Missed,
    ScheduleError,
    Timing,
    every_to_ms,
)

MINUTE = 60_000
HOUR = 60 * MINUTE


def ms(text: str, zone: str = "UTC") -> int:
    """Milliseconds of a local wall-clock time ("2025-03-30 01:00", fold 0)."""
    when = dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))
    return int(when.timestamp() * 1000)


def local(tick: int, zone: str) -> str:
    """A tick as "HH:MM+offset" in ``zone``."""
    return dt.datetime.fromtimestamp(tick / 1000, ZoneInfo(zone)).strftime("%H:%M%z")


def fired_over(timing: Timing, start: int, end: int, step_ms: int = 20_000) -> list[int]:
    """Every tick a worker evaluating every ``step_ms`` fires between ``start`` and
    ``end`` (``missed="latest"``, as a worker does it: from the last tick it fired)."""
    last, fired = start, []
    for now in [*range(start, end, step_ms), end]:
        due = timing.due(last, now, Missed.LATEST, 60_000)
        fired += due
        last = max([last, *due])
    return fired


# -- intervals ---------------------------------------------------------------------------


def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch() -> None:
    # Given a 5-minute interval
    timing = Timing.of(every=dt.timedelta(minutes=5))
    start = ms("2025-06-01 10:02:30")
    # Then its ticks fall on :05, :10, ... whatever the start
    assert timing.next_after(start) == ms("2025-06-01 10:05")
    assert timing.ticks(start, ms("2025-06-01 10:20"), 10) == [
        ms("2025-06-01 10:05"),
        ms("2025-06-01 10:10"),
        ms("2025-06-01 10:15"),
        ms("2025-06-01 10:20"),
    ]
    # And a tick is never due twice: the range is (after, until]
    assert timing.ticks(ms("2025-06-01 10:05"), ms("2025-06-01 10:05"), 10) == []
    assert timing.latest(start, ms("2025-06-01 10:14:59")) == ms("2025-06-01 10:10")


def test_interval_accepts_seconds_and_refuses_less_than_one_second() -> None:
    assert every_to_ms(30) == 30_000
    assert every_to_ms(dt.timedelta(seconds=1.5)) == 1500
    with pytest.raises(ScheduleError, match="at least 1 second"):
        Timing.of(every=0.5)
    with pytest.raises(ScheduleError, match="timedelta or seconds"):
        every_to_ms("5m")  # type: ignore[arg-type]


def test_a_timing_needs_exactly_one_of_cron_and_every_and_a_real_time_zone() -> None:
    with pytest.raises(ScheduleError, match="either cron= or every="):
        Timing.of()
    with pytest.raises(ScheduleError, match="either cron= or every="):
        Timing.of(cron="* * * * *", every=60)
    with pytest.raises(ScheduleError, match="Invalid cron expression '61 \\* \\* \\* \\*'"):
        Timing.of(cron="61 * * * *")
    with pytest.raises(ScheduleError, match="Unknown time zone 'Mars/Olympus'"):
        Timing.of(cron="* * * * *", timezone="Mars/Olympus")
    # A valid one is normalised (whitespace) and described
    assert Timing.of(cron=" */5  * * * * ", timezone="Europe/Paris").describe() == (
        "cron */5 * * * * (Europe/Paris)"
    )
    assert Timing.of(every=dt.timedelta(hours=1, seconds=30)).describe() == "every 1h30s"


# -- cron --------------------------------------------------------------------------------


def test_cron_ticks_in_its_time_zone() -> None:
    # Given "every day at 09:00" in New York (UTC-4 in June)
    timing = Timing.of(cron="0 9 * * *", timezone="America/New_York")
    # Then it ticks at 13:00 UTC
    assert timing.next_after(ms("2025-06-01 00:00")) == ms("2025-06-01 13:00")
    # And a cron with seconds (6 fields) ticks to the second
    seconds = Timing.of(cron="*/15 * * * * *")
    assert seconds.ticks(ms("2025-06-01 00:00"), ms("2025-06-01 00:01"), 10) == [
        ms("2025-06-01 00:00:15"),
        ms("2025-06-01 00:00:30"),
        ms("2025-06-01 00:00:45"),
        ms("2025-06-01 00:01"),
    ]


def test_latest_finds_the_most_recent_tick_far_back_without_walking_every_tick() -> None:
    # Given a cron on the first day of each year, last fired long ago
    timing = Timing.of(cron="0 0 1 1 *")
    # Then the latest tick before now is this year's, found in the lookback windows
    assert timing.latest(ms("2020-06-01 00:00"), ms("2025-06-01 00:00")) == ms("2025-01-01 00:00")
    # And a per-second cron's latest tick is just before now
    every_second = Timing.of(cron="* * * * * *")
    assert every_second.latest(0, ms("2025-06-01 12:00:00.500")) == ms("2025-06-01 12:00")


PARIS = "Europe/Paris"
NEW_YORK = "America/New_York"


@pytest.mark.parametrize(
    ("zone", "day", "expr", "expected"),
    [
        # Spring forward, Paris 2025-03-30: 02:00 CET -> 03:00 CEST (02:xx does not exist).
        # A fixed time in the missing hour fires once, when the clock jumps.
        (PARIS, "2025-03-30", "30 2 * * *", ["03:00+0200"]),
        # Hourly: no tick in the missing hour, every other hour once.
        (PARIS, "2025-03-30", "0 * * * *", ["00:00+0100", "01:00+0100", "03:00+0200"]),
        # Fall back, Paris 2025-10-26: 03:00 CEST -> 02:00 CET (02:xx happens twice).
        # A fixed time in the repeated hour fires once, at its first occurrence.
        (PARIS, "2025-10-26", "30 2 * * *", ["02:30+0200"]),
        # Every 30 minutes follows elapsed time: both 02:00 and both 02:30 fire.
        (
            PARIS,
            "2025-10-26",
            "*/30 * * * *",
            [
                *("00:00+0200", "00:30+0200", "01:00+0200", "01:30+0200", "02:00+0200"),
                *("02:30+0200", "02:00+0100", "02:30+0100", "03:00+0100", "03:30+0100"),
            ],
        ),
        # New York 2025-03-09: 02:00 EST -> 03:00 EDT.
        (NEW_YORK, "2025-03-09", "30 2 * * *", ["03:00-0400"]),
        (NEW_YORK, "2025-03-09", "15 1-3 * * *", ["01:15-0500", "03:00-0400", "03:15-0400"]),
        # New York 2025-11-02: 02:00 EDT -> 01:00 EST (01:xx happens twice).
        (NEW_YORK, "2025-11-02", "30 1 * * *", ["01:30-0400"]),
        (
            NEW_YORK,
            "2025-11-02",
            "0 * * * *",
            ["00:00-0400", "01:00-0400", "01:00-0500", "02:00-0500", "03:00-0500"],
        ),
    ],
)
def test_dst_transitions_follow_debian_crons_rules(
    zone: str, day: str, expr: str, expected: list[str]
) -> None:
    # Given a cron in a zone with a DST transition that night
    timing = Timing.of(cron=expr, timezone=zone)
    start, end = ms(f"{day} 00:00", zone) - 1, ms(f"{day} 03:30", zone)
    # When a worker evaluates it every 20 s from midnight to 03:30 local time
    fired = fired_over(timing, start, end)
    # Then it fires exactly the expected local times, each once
    assert [local(t, zone) for t in fired] == expected
    # And ticks() finds the same in one call (it never walks back into the fold)
    assert timing.ticks(start, end, 50) == fired


def test_evaluating_inside_a_repeated_hour_never_fires_a_passed_tick_again() -> None:
    # Given "02:30 every day" in Paris, fired at 02:30 CEST on the fall-back night
    timing = Timing.of(cron="30 2 * * *", timezone=PARIS)
    first = ms("2025-10-26 02:30", PARIS)  # fold 0: CEST, 00:30 UTC
    assert local(first, PARIS) == "02:30+0200"
    # When a worker looks again during the second 02:xx (CET), e.g. at 02:45 CET
    second_pass = first + HOUR + 15 * MINUTE
    assert local(second_pass, PARIS) == "02:45+0100"
    # Then nothing is due, and the next tick is the next day's 02:30
    assert timing.due(first, second_pass, Missed.LATEST, 60_000) == []
    assert timing.next_after(first) == ms("2025-10-27 02:30", PARIS)


# -- missed ticks ------------------------------------------------------------------------


def test_missed_ticks_latest_skip_and_all() -> None:
    # Given an every-minute schedule last fired at 10:00, evaluated again at 11:00:20
    # (workers were down for an hour)
    timing = Timing.of(every=60)
    last, now = ms("2025-06-01 10:00"), ms("2025-06-01 11:00:20")
    # Then "latest" fires the most recent missed tick once
    assert timing.due(last, now, Missed.LATEST, 60_000) == [ms("2025-06-01 11:00")]
    # And "skip" fires it too when it is no later than the bound (20 s <= 60 s)...
    assert timing.due(last, now, Missed.SKIP, 60_000) == [ms("2025-06-01 11:00")]
    # ...and none when it is later (20 s > 10 s)
    assert timing.due(last, now, Missed.SKIP, 10_000) == []
    # And "all" fires every tick within the bound, oldest first
    assert timing.due(last, now, Missed.ALL, 10 * MINUTE) == [
        ms(f"2025-06-01 10:{m:02d}") for m in range(51, 60)
    ] + [ms("2025-06-01 11:00")]
    # And at most MAX_TICKS_PER_ROUND at a time (the rest at the next evaluation)
    many = timing.due(ms("2025-05-01 00:00"), now, Missed.ALL, 30 * 24 * HOUR)
    assert len(many) == MAX_TICKS_PER_ROUND and many[0] == ms("2025-05-02 11:01")


# -- specs and ids -----------------------------------------------------------------------


def test_tick_ids_are_derived_from_the_name_and_the_tick_and_fit_a_message_id() -> None:
    assert tick_id("nightly", 1_700_000_000_000) == "nightly@1700000000000"
    long_a, long_b = "a" * 90 + "x", "a" * 90 + "y"
    ids = {tick_id(long_a, 1), tick_id(long_b, 1)}
    assert len(ids) == 2 and all(len(i) <= 64 for i in ids)


def test_targets_check_their_json_and_shape() -> None:
    with pytest.raises(ScheduleError, match="plain JSON"):
        QueueTarget("reports", {"when": dt.datetime.now(dt.UTC)})
    assert TaskTarget.from_payload("shop.tasks.digest", {"kwargs": {"n": 1}}).kwargs == {"n": 1}
    with pytest.raises(ScheduleError, match=re.escape('{"args": [...], "kwargs"')):
        TaskTarget.from_payload("shop.tasks.digest", {"n": 1})
    spec = ScheduleSpec("r", Timing.of(every=60), QueueTarget("reports", {"a": 1}))
    assert spec.headers(0) == {"schedule": "r", "scheduled_for": "1970-01-01T00:00:00+00:00"}
