"""The schedules admin in a real browser (chromium through Playwright) against the live
server: add a schedule through the form (and see a bad cron refused), see its next run
in the list, change its cron, disable it with the action; screenshots go to
test-artifacts/. The test-client versions are in tests/schedules/test_schedules_django.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.admin import live
from redisq_django.models import Schedule
from tests.support.browser_pages import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_staff_add_edit_and_disable_a_schedule_in_the_admin(
    page: Page, live_server: Any, artifacts: Path, redisq_settings: Any
) -> None:
    # (the list asks Redis whether it answers: its next runs are only known when it does)
    live.clear()
    user = User.objects.create_superuser("boss", password=PASSWORD)
    log_in(page, live_server, user)
    # Given the schedules page, reached from the admin index
    page.get_by_role("link", name="Schedules").click()
    page.get_by_role("link", name="Add schedule").click()
    # When staff fill in a schedule with a bad cron
    page.fill("#id_name", "digest")
    page.fill("#id_cron", "*/5 * * *")
    page.fill("#id_timezone", "Europe/Paris")
    page.fill("#id_queue", "reports")
    page.fill("#id_payload", '{"kind": "digest"}')
    page.get_by_role("button", name="Save", exact=True).click()
    # Then the form says why, and nothing is saved
    expect(page.locator(".errornote, .errorlist").first).to_be_visible()
    expect(page.locator("body")).to_contain_text("Invalid cron expression")
    assert not Schedule.objects.filter(name="digest").exists()
    # When they correct it and save
    page.fill("#id_cron", "*/5 * * * *")
    page.get_by_role("button", name="Save", exact=True).click()
    # Then the list shows it with its timing, target and next run
    row = page.locator("#result_list tbody tr", has_text="digest")
    expect(row).to_contain_text("cron */5 * * * * (Europe/Paris)")
    expect(row).to_contain_text("queue reports")
    # (its next run computed as the page is shown: a time, not "-")
    expect(row.locator("td.field-next_tick")).not_to_have_text("-")
    expect(row.locator("td.field-next_tick")).to_contain_text(re.compile(r"\d\d:\d\d:\d\d"))
    schedule = Schedule.objects.get(name="digest")
    assert schedule.origin == "admin" and schedule.next_run_at is not None
    page.screenshot(path=str(artifacts / "schedules-list.png"), full_page=True)
    # When they change its cron on its page
    row.get_by_role("link", name="digest").click()
    page.fill("#id_cron", "0 3 * * *")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("#result_list tbody tr", has_text="digest")).to_contain_text(
        "cron 0 3 * * * (Europe/Paris)"
    )
    # And disable it with the action
    page.locator("#result_list tbody tr", has_text="digest").locator("input.action-select").check()
    page.select_option("select[name=action]", "disable")
    page.locator("button[name=index]").click()  # "Run" (Django 6), "Go" (5.2)
    # Then it is reported, saved, and in the admin history
    expect(page.locator(".messagelist")).to_contain_text("Disabled 1 schedule.")
    schedule.refresh_from_db()
    assert schedule.enabled is False and schedule.cron == "0 3 * * *"
    assert schedule.next_run_at is None
    assert "Disabled" in [e.change_message for e in LogEntry.objects.filter(action_flag=CHANGE)]
    page.screenshot(path=str(artifacts / "schedules-disabled.png"), full_page=True)


def test_the_schedules_page_shows_the_banner_when_redis_is_down(
    page: Page, live_server: Any, artifacts: Path, settings: Any, volatile_redis_server: Any
) -> None:
    # Given a schedule, and Redis stopped
    Schedule.objects.create(
        name="digest", cron="*/5 * * * *", timezone="UTC", queue="mail", origin="admin"
    )
    settings.REDISQ = {"URL": volatile_redis_server.url}
    volatile_redis_server.stop()
    live.clear()
    log_in(page, live_server, User.objects.create_superuser("boss", password=PASSWORD))
    # When staff open the schedules page
    page.goto(f"{live_server.url}{reverse('admin:redisq_django_schedule_changelist')}")
    # Then the banner says Redis does not answer, and the next run is unknown, not a date
    expect(page.locator("#redisq-banner")).to_contain_text("is unreachable")
    row = page.locator("#result_list tbody tr").filter(has_text="digest")
    expect(row.locator("td.field-next_tick")).to_have_text("? unknown")
    expect(row.locator("td.field-next_tick .redisq-unknown")).to_have_attribute(
        "title", re.compile("no schedule fires")
    )
    page.screenshot(path=str(artifacts / "schedules-redis-down.png"), full_page=True)
