"""`make screenshots`: every console page and the history report as PNGs, for a person to
look at, from a staged incident in a private Redis.

The incident: queue ``shop`` with ``billing`` stalled (a backlog, no instance alive) and
its dead letters (card errors, a long one, one that died twice, an undecodable one),
``email`` paused; queue ``webhooks`` with a flaky consumer ``deliver`` (fails, retries,
dead letters of two errors; throttled to 20/s with a time limit of 30 s) and a slow one
``sync`` (an instance alive, messages in flight, a backlog); queue ``orders`` in 4
partitions, one hot and one a consumer's instances leave out; an ordered ``ledger`` with
keys held back behind a poison message retrying, a running one and a lost one; failing
and successful Django tasks; a schedule; the history archived with Spark (a named archive
on each queue's page) and its report. The overview opens on the problems this makes.

Skipped unless ``REDISQ_SCREENSHOTS=1`` (``make screenshots`` sets it): it asserts only
that each page answers and shows what it should, and its product is the folder
``test-artifacts/screenshots/`` (git-ignored).
"""

from __future__ import annotations

import importlib
import io
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.deadletters.sinking import sink_all
from redisq_django.models import Consumer, Queue, Schedule
from tests.browser.conftest import ARTIFACTS
from tests.support.browser_pages import PASSWORD, log_in
from tests.support.console_data import Incident, failure, incident
from tests.support.held_data import CONSUMER as LEDGER
from tests.support.held_data import held_consumer
from tests.support.partition_data import K, skewed_queue

pytestmark = [
    pytest.mark.browser,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(900),  # two Spark jobs (a JVM started) and ~25 pages
    pytest.mark.skipif(
        os.environ.get("REDISQ_SCREENSHOTS") != "1",
        reason="screenshots only on demand: make screenshots (REDISQ_SCREENSHOTS=1)",
    ),
]

#: Where the PNGs go (git-ignored, like every test artefact).
SHOTS = ARTIFACTS / "screenshots"
TASK_QUEUE = "reports"
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


def webhooks(broker: Any) -> None:
    """Queue ``webhooks``: ``deliver`` flaky (dead letters of two errors, retries waiting),
    ``sync`` slow (an instance alive holding 3 in flight, a backlog behind them)."""
    queue = Queue.objects.create(name="webhooks")
    for name in ("deliver", "sync"):
        Consumer.objects.create(queue=queue, name=name, handler=f"hooks.{name}")
        broker.consumers.ensure("webhooks", name)
    ids = broker.publish_many(
        "webhooks", [{"hook": n, "url": f"https://h{n}.test/"} for n in range(30)]
    )
    flaky = broker.subscribe("webhooks", "deliver", "deliver-1")
    got = flaky.fetch(count=30, block_ms=500)
    for n, message in enumerate(got):
        if n % 5 == 0:
            flaky.reject(message, failure(f"POST https://h{n}.test/ answered 410 Gone"))
        elif n % 7 == 0:
            flaky.reject(message, TimeoutError(f"POST https://h{n}.test/ timed out after 10 s"))
        elif n % 4 == 0:
            flaky.fail(message, ConnectionError("connection reset by peer"))
        else:
            flaky.ack([message])
    flaky.heartbeat(60_000)  # alive: never left
    # Protected: a partner's rate limit and a time limit (as its @consumer declares them)
    Consumer.objects.filter(queue=queue, name="deliver").update(
        declared_rate="20/s", declared_burst=5, declared_time_limit=30.0, declared_max_in_flight=4
    )
    slow = broker.subscribe("webhooks", "sync", "sync-1")
    held = slow.fetch(count=3, block_ms=500)
    slow.heartbeat(60_000, running=held[0])
    assert len(ids) == 30


def tasks(settings: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Successful and failing Django tasks, run by a worker."""
    settings.TASKS = {
        "default": {
            "BACKEND": "redisq_django.tasks.RedisqBackend",
            "QUEUES": ["default", TASK_QUEUE],
        }
    }
    monkeypatch.setenv("REDISQ_TEST_RUNS_URL", redis_url)
    sample = importlib.import_module("tests.tasks.sample_tasks")
    for n in range(3):
        sample.calculate.using(queue_name=TASK_QUEUE).enqueue(n, 2)
    for text in ("card declined", "invoice 2041 not found", "card declined"):
        sample.failing.using(queue_name=TASK_QUEUE).enqueue(text)
    call_command(
        "runconsumer", "--tasks", TASK_QUEUE, "--burst", "--stats-interval", "0",
        stdout=io.StringIO(),
    )  # fmt: skip


@pytest.fixture
def staged(
    settings: Any,
    volatile_redis_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Incident]:
    """The incident above in a private Redis, its history archived and reported."""
    archive = tmp_path / "archive"
    settings.REDISQ = {
        "URL": volatile_redis_server.url,
        "HISTORY": True,
        "ARCHIVE_ROOT": str(archive),
        "PARTITIONS": {"orders": K},
    }
    live.clear()
    broker = get_broker()
    # The tasks' worker first: it syncs the consumers declared in code, and would mark
    # the staged ones (declared nowhere) "Not declared"
    tasks(settings, volatile_redis_server.url, monkeypatch)
    # That sync also wrote the rows of every consumer the test apps declare (tests/faultapp
    # …), which nothing here runs: they would crowd every page
    Queue.objects.exclude(name__in=broker.queues()).delete()
    made = incident(broker, "shop")
    webhooks(broker)
    skewed_queue(broker, "orders")
    held_consumer(broker, "ledger")
    sink_all()
    Schedule.objects.create(
        name="stock-check", every=timedelta(minutes=5), queue="shop", payload={"check": "low"},
        origin="admin",
    )  # fmt: skip
    # Spark: archive the history (a named archive per queue), then the report of today
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    out = io.StringIO()
    call_command("redisq_pipeline", "archive", "--once", "--master", "local[2]", stdout=out)
    # The last half hour (per-minute buckets), not the default week (per-hour ones)
    since = f"{datetime.now(UTC) - timedelta(minutes=30):%Y-%m-%dT%H:%M}"
    call_command("redisq_pipeline", "report", "--since", since, "--master", "local[2]", stdout=out)
    live.clear()
    yield made
    live.clear()


def pages(made: Incident) -> dict[str, str]:
    """Every page of the console, by the name of its screenshot."""
    shop = Queue.objects.get(name="shop")
    billing = Consumer.objects.get(queue=shop, name="billing")
    dead = made.row("long")
    live_billing = reverse("admin:redisq_django_consumer_live", args=["shop", "billing"])
    live_sync = reverse("admin:redisq_django_consumer_live", args=["webhooks", "sync"])
    live_deliver = reverse("admin:redisq_django_consumer_live", args=["webhooks", "deliver"])
    live_shop = reverse("admin:redisq_django_queue_live", args=["shop"])
    schedule = Schedule.objects.get(name="stock-check")
    shots = {
        "01-overview": reverse("admin:redisq_django_overview_changelist"),
        "02-queues": reverse("admin:redisq_django_queue_changelist"),
        "03-queue-shop-with-archives": reverse("admin:redisq_django_queue_change", args=[shop.pk]),
        "04-queue-shop-live": live_shop,
        "05-queue-shop-live-log": f"{live_shop}?list=log",
        "06-queue-shop-live-consumers": f"{live_shop}?list=consumers",
        "07-consumers": reverse("admin:redisq_django_consumer_changelist"),
        "08-consumer-billing": reverse("admin:redisq_django_consumer_change", args=[billing.pk]),
        "09-consumer-billing-live-waiting": f"{live_billing}?list=waiting",
        "10-consumer-billing-live-delayed": f"{live_billing}?list=delayed",
        "11-consumer-deliver-live-retrying": f"{live_deliver}?list=retrying",
        "12-consumer-sync-live-in-flight": f"{live_sync}?list=in_flight",
        "13-consumer-sync-live-instances": f"{live_sync}?list=instances",
        "14-consumer-billing-live-dead": f"{live_billing}?list=dead",
        "15-dead-letters": reverse("admin:redisq_django_deadletter_changelist")
        + "?status__exact=dead",
        "16-dead-letters-by-cause": reverse("admin:redisq_django_deadletter_causes")
        + "?status__exact=dead",
        "17-dead-letter": reverse("admin:redisq_django_deadletter_change", args=[dead.pk]),
        "18-task-results": reverse("admin:redisq_django_taskresults_changelist"),
        "19-schedules": reverse("admin:redisq_django_schedule_changelist"),
        "20-schedule": reverse("admin:redisq_django_schedule_change", args=[schedule.pk]),
        "21-history-report": reverse("admin:redisq_django_overview_report"),
        "22-queue-orders-partitions": reverse("admin:redisq_django_queue_live", args=["orders"]),
        "23-consumer-ledger-held-keys": reverse(
            "admin:redisq_django_consumer_live", args=["ledger", LEDGER]
        ),
        "24-consumer-deliver-flow-control": reverse(
            "admin:redisq_django_consumer_change",
            args=[Consumer.objects.get(queue__name="webhooks", name="deliver").pk],
        ),
    }
    return shots


def test_screenshots_of_every_console_page_and_the_report(
    page: Page, live_server: Any, staged: Incident
) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):
        old.unlink()
    log_in(page, live_server, User.objects.create_superuser("ops", password=PASSWORD))
    page.set_viewport_size(DESKTOP)
    taken = []
    for name, url in pages(staged).items():
        response = page.goto(live_server.url + url)
        assert response is not None and response.status == 200, (name, url)
        expect(page.locator("#redisq-banner")).to_have_count(0)  # Redis answered
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        taken.append(name)
    # One task result's page, reached from the list (its url holds the result's id)
    page.goto(live_server.url + reverse("admin:redisq_django_taskresults_changelist"))
    page.locator("#result_list tbody tr a").first.click()
    page.screenshot(path=str(SHOTS / "18b-task-result.png"), full_page=True)
    # The overview and a live page on a phone
    page.set_viewport_size(PHONE)
    for name in ("01-overview", "04-queue-shop-live"):
        page.goto(live_server.url + pages(staged)[name])
        page.screenshot(path=str(SHOTS / f"{name}-phone.png"), full_page=True)
    # The parts the how-to "The admin console during an incident" shows, at 1280 px
    # (docs/images/incident-*.png are these, copied by hand when the pages change)
    page.set_viewport_size({"width": 1280, "height": 900})
    urls = pages(staged)
    for name, (url, part) in {
        "incident-problems": (urls["01-overview"], "#redisq-problems"),
        "incident-partitions": (urls["22-queue-orders-partitions"], "section.redisq-partitions"),
        "incident-held-keys": (urls["23-consumer-ledger-held-keys"], "#redisq-held"),
        "incident-causes": (urls["16-dead-letters-by-cause"], "#redisq-causes"),
        "incident-flow-control": (urls["24-consumer-deliver-flow-control"], ".field-flow_control"),
    }.items():
        page.goto(live_server.url + url)
        page.locator(part).first.screenshot(path=str(SHOTS / f"{name}.png"))
    made = sorted(p.name for p in SHOTS.glob("*.png"))
    assert len(made) == len(taken) + 3 + 5, made
    print(f"\n{len(made)} screenshots in {SHOTS}")
