"""The Schedules pages when Redis is down or hung, with Django's test client: a banner as
on every other console page, and no normal-looking next run (nothing fires while Redis
does not answer); with Redis up, no banner and the next run as a date."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.models import Schedule
from tests.support.hung_server import HungServer

pytestmark = pytest.mark.django_db

#: The pages answer within this whatever Redis does (seconds).
DEADLINE_S = 2.0


@pytest.fixture
def digest() -> Schedule:
    return Schedule.objects.create(
        name="digest", cron="*/5 * * * *", timezone="UTC", queue="mail", origin="admin"
    )


@pytest.fixture
def sick(
    request: pytest.FixtureRequest, settings: Any, volatile_redis_server: Any
) -> Iterator[str]:
    """Redis stopped, or a socket that accepts and never answers."""
    live.clear()
    if request.param == "stopped":
        settings.REDISQ = {"URL": volatile_redis_server.url}
        volatile_redis_server.stop()
        yield "stopped"
    else:
        with HungServer() as hung:
            settings.REDISQ = {"URL": hung.url, "ADMIN_REDIS_TIMEOUT": 0.3}
            yield "hung"
    live.clear()


def next_run(page: str) -> str:
    found = re.search(r'<td class="field-next_tick">(.*?)</td>', page, re.S)
    assert found, page
    return found.group(1)


@pytest.mark.parametrize("sick", ["stopped", "hung"], indirect=True)
def test_the_schedules_pages_say_redis_is_sick_and_the_next_run_unknown(
    root: Client, digest: Schedule, sick: str
) -> None:
    # When staff open the schedules list and a schedule's page with Redis sick
    started = time.monotonic()
    listing = root.get(reverse("admin:redisq_django_schedule_changelist"))
    change = root.get(reverse("admin:redisq_django_schedule_change", args=[digest.pk]))
    took = time.monotonic() - started
    # Then both answer, in time, with the banner, and the next run is unknown, not a date
    assert listing.status_code == change.status_code == 200
    assert took < DEADLINE_S, f"{took:.2f}s with Redis {sick}"
    for page in (listing.content.decode(), change.content.decode()):
        assert 'id="redisq-banner"' in page and "unreachable" in page
    cell = next_run(listing.content.decode())
    assert "redisq-unknown" in cell and "unknown" in cell
    assert not re.search(r"\d{4}", cell), cell  # no year: no date it cannot know


def test_with_redis_up_no_banner_and_the_next_run_as_a_date(
    root: Client, digest: Schedule, redisq_settings: Any
) -> None:
    live.clear()
    listing = root.get(reverse("admin:redisq_django_schedule_changelist")).content.decode()
    assert 'id="redisq-banner"' not in listing
    assert re.search(r"\d{4}", next_run(listing))
