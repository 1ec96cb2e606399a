"""Times in the console's tables read as the charts' axes do: local, 24-hour, the time
alone today and with its date another day, the full date, time and zone in the title;
never Django's default ``May 3, 2024, 10:22 p.m.``."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from redisq_django.models import DeadLetter, DeadLetterFailure, InboxEntry, Schedule
from tests.support.admin_pages import cell

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redisq_settings")]

#: Not UTC, so a time shown is a local one.
ZONE = "Europe/Paris"


@pytest.fixture
def times(settings: Any) -> tuple[dt.datetime, dt.datetime]:
    """22:22:05 today in Paris, and 09:07:01 on 5 March 2024 there."""
    settings.TIME_ZONE = ZONE
    tonight = timezone.localtime().replace(hour=22, minute=22, second=5, microsecond=0)
    then = tonight.replace(year=2024, month=3, day=5, hour=9, minute=7, second=1)
    return tonight, then


def dead_letter(queue: str, message_id: str, when: dt.datetime) -> DeadLetter:
    return DeadLetter.objects.create(
        queue=queue,
        consumer="billing",
        message_id=message_id,
        payload="{}",
        envelope={"id": message_id, "payload": "{}", "published_at": "1"},
        reason="failed",
        error_class="ConnectionRefusedError",
        error_message="connection refused 10.0.0.7:5432",
        error_key="connection refused <ip>:<port>",
        attempts=6,
        first_failed_at=when,
        last_failed_at=when,
    )


def no_twelve_hour_clock(html: str) -> None:
    assert not re.search(r"(?<!\w)(a\.m\.|p\.m\.|AM|PM)(?!\w)", html), "a 12-hour time"
    assert "10:22" not in html


def test_every_table_shows_22_22_as_22_22_and_another_day_with_its_date(
    root: Client, queue_name: str, times: tuple[dt.datetime, dt.datetime]
) -> None:
    # Given a dead letter that died at 22:22:05 today (Paris time) and one in 2024, a
    # death of the first, an inbox entry and a schedule's last run at 22:22:05
    tonight, then = times
    row = dead_letter(queue_name, "tonight", tonight)
    dead_letter(queue_name, "then", then)
    DeadLetterFailure.objects.create(
        dead_letter=row, entry_id="1-0", reason="failed", failed_at=tonight
    )
    entry = InboxEntry.objects.create(queue=queue_name, consumer="billing", message_id="m-1")
    InboxEntry.objects.filter(pk=entry.pk).update(handled_at=tonight)
    Schedule.objects.create(
        name="digest", cron="*/5 * * * *", timezone="UTC", queue="mail", last_run_at=tonight
    )

    # When staff open the dead letters, their causes, the first one's page, the inbox
    # and the schedules
    listing = root.get(reverse("admin:redisq_django_deadletter_changelist"))
    causes = root.get(reverse("admin:redisq_django_deadletter_causes"), {"status__exact": "dead"})
    detail = root.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    inbox = root.get(reverse("admin:redisq_django_inboxentry_changelist"))
    schedules = root.get(reverse("admin:redisq_django_schedule_changelist"))

    # Then 22:22:05 today reads 22:22:05, and 2024's time has its date, in every table
    assert cell(listing.content, "last_failure", "tonight") == ["22:22:05"]
    assert cell(listing.content, "last_failure", "then") == ["2024-03-05 09:07:01"]
    cause = causes.content.decode().split('class="redisq-cause"', 1)[1].split("</tr>", 1)[0]
    seen = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<time[^>]*>.*?</time>", cause)]
    assert seen == ["2024-03-05 09:07:01", "22:22:05"]  # first seen, last seen
    died = re.search(r'<td class="field-died">(.*?)</td>', detail.text, re.S)
    assert died and re.sub(r"<[^>]+>", "", died.group(1)).strip() == "22:22:05"
    assert cell(inbox.content, "handled") == ["22:22:05"]
    assert cell(schedules.content, "last_run") == ["22:22:05"]
    # And the whole date, time and zone are in the title; no page shows a 12-hour time
    stamp = tonight.strftime("%Y-%m-%d")
    assert f'title="{stamp} 22:22:05 CE' in listing.text  # CET or CEST
    for page in (listing, causes, detail, inbox, schedules):
        assert page.status_code == 200
        no_twelve_hour_clock(page.text)
