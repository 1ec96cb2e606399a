"""The live pages while Redis hangs or is down, in a real browser: the status says "Redis
unreachable" (an answer reporting the outage is no update) or "Update failed" (a request
that never completes is given up) within a bounded wait, with how long ago the last good
update was, also on a page opened during the outage; the actions are off while the state
is unknown, and everything comes back once Redis answers again."""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.admin import live
from redisq_django.admin.live import snapshots
from redisq_django.connection import get_broker
from redisq_django.models import Consumer
from tests.support.browser_pages import log_in
from tests.support.live_data import Live, live_consumer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

#: How long the page may take to say what happened (ms): a few refreshes of 1 s, the
#: admin's Redis timeout, and the outage the admin remembers for 5 s.
SAY_MS = 15_000
UPDATED = re.compile(r"Updated \d+ s ago")
#: What the status says while Redis does not answer: how old the last good update is.
UNREACHABLE = re.compile(r"^Redis unreachable — last updated (\d+) s ago; retrying$")


@pytest.fixture
def made(settings: Any, volatile_redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> Live:
    """billing's messages in a private Redis; the live page refreshing every second."""
    settings.REDISQ = {"URL": volatile_redis_server.url, "ADMIN_REDIS_TIMEOUT": 0.3}
    live.clear()
    monkeypatch.setattr(admin.site._registry[Consumer], "refresh_seconds", 1)
    return live_consumer(get_broker(), "shop")


@pytest.fixture
def hang(volatile_redis_server: Any) -> Iterator[Any]:
    """``hang()`` stops the server with SIGSTOP (it accepts and never answers); it is
    continued (SIGCONT) by ``hang.release()`` or at the end of the test whatever happens."""
    pid = volatile_redis_server.pid
    stopped: list[bool] = []

    class Hang:
        def __call__(self) -> None:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(True)

        def release(self) -> None:
            if stopped:
                os.kill(pid, signal.SIGCONT)
                stopped.clear()

    hang = Hang()
    try:
        yield hang
    finally:
        hang.release()


def assert_actions(page: Page, *, on: bool) -> None:
    """Pause, Replay and Purge offered (``on``) or off, with the note saying why."""
    for button in ("#redisq-pause", "#redisq-replay"):
        if on:
            expect(page.locator(button)).to_be_enabled()
        else:
            expect(page.locator(button)).to_be_disabled()
    purge = page.locator("#redisq-purge")
    if on:
        expect(purge).to_have_attribute("href", re.compile(r"/purge/$"))
        expect(page.locator("#redisq-actions-note")).to_be_hidden()
    else:
        expect(purge).not_to_have_attribute("href", re.compile(r"."))
        expect(purge).to_have_attribute("aria-disabled", "true")
        expect(page.locator("#redisq-actions-note")).to_be_visible()


def test_a_hung_redis_reads_redis_unreachable_and_turns_the_actions_off(
    page: Page, live_server: Any, ops: User, made: Live, hang: Any
) -> None:
    # Given billing's live page, updating itself
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page.goto(live_server.url + url)
    status = page.locator("#redisq-live-status")
    expect(status).to_have_text(UPDATED, timeout=SAY_MS)
    assert_actions(page, on=True)

    # When Redis hangs (SIGSTOP) with the page open
    hang()
    # Then the status says Redis is unreachable, the banner why, and the actions are off
    expect(status).to_have_text(UNREACHABLE, timeout=SAY_MS)
    expect(page.locator("#redisq-banner")).to_be_visible()
    assert_actions(page, on=False)

    # When Redis answers again (SIGCONT), the page updates and the actions come back
    hang.release()
    expect(status).to_have_text(UPDATED, timeout=SAY_MS)
    expect(page.locator("#redisq-banner")).to_have_count(0)
    assert_actions(page, on=True)
    expect(page.locator("#redisq-fig-backlog .redisq-value")).to_have_text("6")


def test_a_request_that_never_completes_is_given_up_as_a_failed_update(
    page: Page, live_server: Any, ops: User, made: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given billing's live page, whose JSON endpoint then stops answering at all (the
    # admin process itself stuck, or a proxy holding the request)
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page.goto(live_server.url + url)
    status = page.locator("#redisq-live-status")
    expect(status).to_have_text(UPDATED, timeout=SAY_MS)
    stuck, release = threading.Event(), threading.Event()
    read = snapshots.consumer_snapshot

    def never_answering(*args: Any, **kwargs: Any) -> Any:
        stuck.set()
        release.wait(30)  # bounded: the test releases it at its end
        return read(*args, **kwargs)

    monkeypatch.setattr(snapshots, "consumer_snapshot", never_answering)
    try:
        # Then the page gives the request up: "Update failed", and the actions are off
        expect(status).to_contain_text("Update failed", timeout=SAY_MS)
        assert stuck.is_set()
        assert_actions(page, on=False)
    finally:
        monkeypatch.setattr(snapshots, "consumer_snapshot", read)
        release.set()
    # And the next answer brings it back
    expect(status).to_have_text(UPDATED, timeout=SAY_MS)
    assert_actions(page, on=True)


def test_a_page_opened_while_redis_is_down_says_when_the_last_good_update_was(
    page: Page,
    live_server: Any,
    ops: User,
    made: Live,
    volatile_redis_server: Any,
    artifacts: Path,
) -> None:
    # Given billing's live page, updated from Redis
    log_in(page, live_server, ops)
    billing = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page.goto(live_server.url + billing)
    status = page.locator("#redisq-live-status")
    expect(status).to_have_text(UPDATED, timeout=SAY_MS)

    # When Redis stops: the open page says so, counting from its last good update
    volatile_redis_server.stop()
    expect(status).to_have_text(UNREACHABLE, timeout=SAY_MS)
    page.wait_for_timeout(3000)

    # When the operator then opens the overview and billing's page anew
    for target in (reverse("admin:redisq_django_overview_changelist"), billing):
        page.goto(live_server.url + target)
        # Then beside the banner the status says Redis is unreachable and how old the
        # last good update is (3 s at least), never "Updated 0 s ago"
        expect(page.locator("#redisq-banner")).to_be_visible()
        expect(status).to_have_text(UNREACHABLE)
        found = UNREACHABLE.match(status.inner_text())
        assert found and int(found[1]) >= 3, status.inner_text()
        expect(status).to_have_class(re.compile(r"\bredisq-stale\b"))
    # ... and the dead letters read as what is known: the row in the database, Redis's
    # count unknown (not "1+?")
    expect(page.locator("#redisq-fig-dead .redisq-value")).to_have_text(
        "1 in the database, Redis unknown"
    )
    page.screenshot(path=str(artifacts / "live-redis-down-1440.png"))
