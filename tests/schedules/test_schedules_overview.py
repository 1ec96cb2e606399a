"""What each schedule is doing now: ``manage.py redisq schedules``, the ``runconsumer``
banner and the admin's next run, all computed when shown (never a value stored at the
last save or fire, stale after downtime)."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from redisq_django import figures
from redisq_django.core.clock import datetime_to_ms, ms_to_datetime, now_ms
from redisq_django.core.keys import schedule_keys
from redisq_django.models import Schedule
from redisq_django.schedules import periodic
from redisq_django.schedules.timing import Timing

pytestmark = pytest.mark.django_db

HOUR_MS = 3_600_000
#: When the stored next run of the tests' schedules says they fire: long past.
STALE = dt.datetime(2020, 1, 1, 3, 0, tzinfo=dt.UTC)


def iso(ms: int) -> str:
    return ms_to_datetime(ms).isoformat(timespec="seconds")


def next_ticks(timing: Timing, before: int, after: int) -> set[str]:
    """The next tick as computed at any instant of ``[before, after]`` (a tick may fall
    in between), as listed."""
    return {iso(t) for t in (timing.next_after(before), timing.next_after(after)) if t}


def lines_by_name(output: str, *names: str) -> dict[str, str]:
    found = {}
    for line in output.splitlines():
        first = line.split(" ", 1)[0]
        if first in names:
            found[first] = line
    assert set(found) == set(names), output
    return found


def downtime(*rows: Schedule) -> None:
    """As after a long downtime: the rows' stored next run is long past."""
    Schedule.objects.filter(pk__in=[r.pk for r in rows]).update(next_run_at=STALE)


# -- manage.py redisq schedules --------------------------------------------------------


def test_redisq_schedules_lists_timing_target_state_last_and_next_tick(
    queue_name: str, declarations: None, redisq_settings: Any, redis_client: redis.Redis
) -> None:
    # Given a cron in Paris that fired (Redis says) 09:00 and claimed 09:05 unsent, a
    # disabled interval, a row the code no longer declares, an invalid row, and a
    # declaration no runconsumer has written yet; all stored next runs long past
    since = timezone.now() - dt.timedelta(days=1)
    paris = Schedule.objects.create(
        name=f"{queue_name}-paris", cron="*/5 * * * *", timezone="Europe/Paris", queue="reports"
    )
    hourly = Schedule.objects.create(
        name=f"{queue_name}-hourly", every=dt.timedelta(hours=1), task="shop.tasks.x"
    )
    hourly.enabled = False
    hourly.save()
    gone = Schedule.objects.create(
        name=f"{queue_name}-gone", every=dt.timedelta(minutes=1), queue="q", origin="code"
    )
    Schedule.objects.filter(pk=gone.pk).update(declared=False)
    bad = Schedule.objects.create(name=f"{queue_name}-bad", cron="* * * * *", queue="q")
    Schedule.objects.filter(pk=bad.pk).update(cron="99 * * * *")
    Schedule.objects.filter(pk=paris.pk).update(since=since)
    downtime(paris, hourly, gone, bad)
    periodic(f"{queue_name}-new", every=30, queue="q")
    keys = schedule_keys("redisq")
    fired, claimed = datetime_to_ms(since) + 300_000, datetime_to_ms(since) + 600_000
    redis_client.zadd(keys.sent, {paris.name: fired})
    redis_client.zadd(keys.claimed, {paris.name: claimed})
    # When the operator lists the schedules
    before = now_ms()
    out = io.StringIO()
    call_command("redisq", "schedules", stdout=out)
    after = now_ms()
    # Then each is a row with its expression, time zone, target, state, last and next tick
    output = out.getvalue()
    assert output.splitlines()[0].split() == [
        "NAME", "WHEN", "TIME", "ZONE", "TARGET", "STATE", "LAST", "TICK", "FIRED", "NEXT", "TICK",
    ]  # fmt: skip
    rows = lines_by_name(output, paris.name, hourly.name, gone.name, bad.name, f"{queue_name}-new")
    line = rows[paris.name]
    assert "*/5 * * * *" in line and "Europe/Paris" in line and "queue reports" in line
    assert " enabled " in line
    assert f"{iso(fired)} (claimed {iso(claimed)}, not sent yet)" in line
    # the next tick is computed now, not the stored one of long ago
    paris_next = next_ticks(Timing("*/5 * * * *", None, "Europe/Paris"), before, after)
    assert line.split()[-1] in paris_next
    assert "2020-01-01" not in output
    line = rows[hourly.name]
    assert "every 1h" in line and "task shop.tasks.x" in line and " disabled " in line
    assert line.split()[-2:] == ["-", "-"]  # never fired, no next tick (it is off)
    assert "not declared (not run)" in rows[gone.name] and rows[gone.name].endswith(" -")
    assert "invalid (not run): Invalid cron expression '99 * * * *'" in rows[bad.name]
    line = rows[f"{queue_name}-new"]
    assert "every 30s" in line and "declared, no row yet" in line
    assert line.split()[-1] in next_ticks(Timing(None, 30_000), before, after)


def test_redisq_schedules_with_redis_stopped_still_lists_and_says_why(
    queue_name: str, settings: Any, declarations: None, volatile_redis_server: Any
) -> None:
    # Given a schedule, and its Redis stopped
    settings.REDISQ = {"URL": volatile_redis_server.url}
    volatile_redis_server.stop()
    Schedule.objects.create(name=queue_name, every=dt.timedelta(minutes=10), queue="q")
    out, err = io.StringIO(), io.StringIO()
    before = now_ms()
    # When the operator lists the schedules
    call_command("redisq", "schedules", stdout=out, stderr=err)
    after = now_ms()
    # Then it is listed, its last tick unknown, its next tick by this host's clock
    line = lines_by_name(out.getvalue(), queue_name)[queue_name]
    assert line.split()[-2] == "?"
    assert line.split()[-1] in next_ticks(Timing(None, 600_000), before, after)
    assert "Cannot reach Redis" in err.getvalue() and "Last ticks unknown" in err.getvalue()


def test_redisq_schedules_says_when_there_are_none(
    declarations: None, redisq_settings: Any
) -> None:
    out = io.StringIO()
    call_command("redisq", "schedules", stdout=out)
    assert out.getvalue().startswith("No schedules")


# -- the runconsumer banner --------------------------------------------------------------


def run_burst(queue: str) -> str:
    out = io.StringIO()
    call_command("runconsumer", queue, "--burst", "--stats-interval", "0", stdout=out)
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_runconsumer_banner_lists_the_schedules_it_evaluates(
    a_consumer: str, queue_name: str, declarations: None, redisq_settings: Any
) -> None:
    # Given a declared cron schedule, an admin interval one and a disabled one
    periodic(f"{queue_name}-nightly", cron="0 3 * * *", timezone="Europe/Paris", queue=a_consumer)
    Schedule.objects.create(
        name=f"{queue_name}-beat", every=dt.timedelta(seconds=30), queue=a_consumer
    )
    Schedule.objects.create(
        name=f"{queue_name}-off", every=dt.timedelta(seconds=30), queue=a_consumer, enabled=False
    )
    # When a worker starts
    banner = run_burst(a_consumer)
    # Then its banner names each schedule it evaluates with its expression and next tick
    assert "schedules evaluated here (2;" in banner
    lines = {line.strip().split(":", 1)[0]: line for line in banner.splitlines()}
    nightly = lines[f"{queue_name}-nightly"]
    assert f"-> queue {a_consumer}" in nightly
    assert "0 3 * * * (Europe/Paris)" in nightly and "next " in nightly
    assert "every 30s" in lines[f"{queue_name}-beat"]
    # And says which it does not run
    assert f"schedules not run: {queue_name}-off (disabled)" in banner


@pytest.mark.django_db(transaction=True)
def test_runconsumer_banner_says_when_there_are_no_schedules(
    a_consumer: str, declarations: None, redisq_settings: Any
) -> None:
    Schedule.objects.all().delete()
    assert "schedules: none to evaluate" in run_burst(a_consumer)


# -- the admin -----------------------------------------------------------------------------


def test_admin_shows_the_next_run_computed_now_not_the_stored_one(
    queue_name: str, redisq_settings: Any
) -> None:
    # Given an hourly schedule and a disabled one whose stored next run is long past
    # (workers were down since)
    hourly = Schedule.objects.create(name=queue_name, every=dt.timedelta(hours=1), queue="q")
    off = Schedule.objects.create(
        name=f"{queue_name}-off", every=dt.timedelta(hours=1), queue="q", enabled=False
    )
    downtime(hourly, off)
    client = Client()
    client.force_login(User.objects.create_superuser("admin", password="pw"))
    before = now_ms()
    # When staff look at the list and at its page
    listing = client.get(reverse("admin:redisq_django_schedule_changelist")).content.decode()
    page = client.get(reverse("admin:redisq_django_schedule_change", args=[hourly.pk]))
    after = now_ms()
    # Then both show the next hour from now, never the stale stored one
    expected = {
        str(figures.clock_ms(t))  # as every table of the console shows a time
        for t in {(before // HOUR_MS + 1) * HOUR_MS, (after // HOUR_MS + 1) * HOUR_MS}
    }
    for html in (listing, page.content.decode()):
        assert "2020" not in html
        assert any(e in html for e in expected), (expected, html)
    # And a disabled schedule has no next run
    row = listing.split(f">{queue_name}-off<", 1)[1].split("</tr>", 1)[0]
    assert 'class="field-next_tick">-' in row
