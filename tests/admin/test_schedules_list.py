"""The schedules list in words, with Django's test client on a real Redis: times to the
second in 24-hour time, each schedule's state and whether staff changed it said in words
(no bare ✓ or red ✗ to guess at), and a tick a worker claimed and never published said
with its time: what failed, and when."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.core.clock import datetime_to_ms
from redisq_django.models import Schedule

pytestmark = pytest.mark.django_db


def row_of(page: str, name: str) -> str:
    """The list's row of schedule ``name``, its tags removed and spaces collapsed."""
    rows = re.findall(r"<tr[^>]*>.*?</tr>", page, re.S)
    (row,) = [r for r in rows if f">{name}</a>" in r]
    return " ".join(re.sub(r"<[^>]+>", " ", row).split())


def test_the_list_says_times_to_the_second_and_states_and_failures_in_words(
    root: Client, redisq_settings: Any, queue_name: str, settings: Any
) -> None:
    # Given (in UTC) a schedule that last ran at 13:05:07, one staff disabled, and one
    # whose 13:10:00 tick a worker claimed in Redis and never marked published
    settings.TIME_ZONE = "UTC"
    live.clear()
    ran = dt.datetime(2026, 11, 27, 13, 5, 7, tzinfo=dt.UTC)
    failing = dt.datetime(2026, 11, 27, 13, 10, tzinfo=dt.UTC)
    names = {k: f"{queue_name}-{k}" for k in ("ran", "off", "failing")}
    for key, name in names.items():
        row = Schedule.objects.create(
            name=name, every=dt.timedelta(minutes=5), queue=queue_name, enabled=key != "off"
        )
        Schedule.objects.filter(pk=row.pk).update(last_run_at=ran)
    ledger = get_broker().schedule_ledger
    ledger.client.zadd(ledger.keys.claimed, {names["failing"]: datetime_to_ms(failing)})
    ledger.client.zadd(ledger.keys.sent, {names["failing"]: datetime_to_ms(ran)})
    try:
        # When staff open the schedules list
        page = root.get(reverse("admin:redisq_django_schedule_changelist")).content.decode()
    finally:
        ledger.client.zrem(ledger.keys.claimed, names["failing"])
        ledger.client.zrem(ledger.keys.sent, names["failing"])

    # Then the last run reads to the second, in 24-hour time (another day: with its day,
    # as every console table shows times), and the next run too
    assert re.search(r"(2026-)?11-27 13:05:07", row_of(page, names["ran"]))
    times = re.findall(r"\d\d:\d\d:\d\d", row_of(page, names["ran"]))
    assert len(times) == 2 and times[0] == "13:05:07", times
    # ... each state and origin is a word, never an icon alone
    assert "icon-no.svg" not in page and "icon-yes.svg" not in page
    assert "enabled" in row_of(page, names["ran"]).split()
    assert "disabled" in row_of(page, names["off"]).split()
    assert "made in the admin" in row_of(page, names["ran"])
    # ... and the tick that failed says so, with its time
    failed = row_of(page, names["failing"])
    assert "tick of 2026-11-27 13:10:00 UTC not published" in failed
    assert "not published" not in row_of(page, names["ran"])
