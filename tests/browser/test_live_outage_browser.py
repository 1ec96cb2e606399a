"""The live pages while Redis hangs, in a real browser: the status says "Update failed"
within a bounded wait (an answer reporting the outage is no update, and a request that
never completes is given up), the actions are off while the state is unknown, and
everything comes back once Redis answers again."""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Iterator
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


def test_a_hung_redis_reads_update_failed_and_turns_the_actions_off(
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
    # Then the status says the update failed, the banner why, and the actions are off
    expect(status).to_contain_text("Update failed", timeout=SAY_MS)
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
