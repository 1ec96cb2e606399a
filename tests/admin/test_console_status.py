"""Status you can trust, with Django's test client: admin Redis reads that give up at
once (no retries, an outage remembered), paused badges, help text on every figure,
backlog vs length, the same sums on every list, the stalled-consumer warning, overrides
validated in the admin and in the worker, no inline that creates consumers, and honest
delete wording."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from redisq_django import Message, consumer
from redisq_django.admin import live
from redisq_django.admin.consumers import CONSUMER_DELETE_NOTE
from redisq_django.admin.deadletters import DELETE_NOTE
from redisq_django.admin.queues import QUEUE_DELETE_NOTE
from redisq_django.connection import get_broker
from redisq_django.consuming.declarations import registry
from redisq_django.core.worker import WorkerOptions
from redisq_django.figures import HELP, STALLED_TEXT
from redisq_django.models import Consumer, DeadLetter, Queue
from redisq_django.runner import build_worker
from tests.support.admin_pages import cell
from tests.support.console_data import incident
from tests.support.hung_server import HungServer

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:redisq_django_{name}", args=args)


# -- reads that never hang ---------------------------------------------------------------


def test_a_hung_redis_costs_one_connection_one_timeout_then_nothing(settings: Any) -> None:
    with HungServer() as hung:
        # Given a Redis that accepts and never answers, and a 0.3 s admin timeout
        settings.REDISQ = {"URL": hung.url, "ADMIN_REDIS_TIMEOUT": 0.3}

        # When a page reads it, then it gives up after one timeout, on one connection
        # (redis-py would otherwise retry three times)
        started = time.monotonic()
        first = live.live_stats(["orders"])
        assert time.monotonic() - started < 2.0
        address = hung.url.removeprefix("redis://")
        assert first.error.startswith(f"Redis at {address} is unreachable (Timeout")
        assert first.queue("orders") is None
        accepted = hung.accepted
        assert accepted == 1

        # ... and the next reads, while the outage is remembered, do not even try
        for _ in range(5):
            assert live.live_stats(["orders"]).error == first.error
            assert live.status().error == first.error
        assert hung.accepted == accepted


def test_a_stopped_redis_gives_every_page_a_banner_and_unknown_figures(
    settings: Any, volatile_redis_server: Any, root: Client
) -> None:
    # Given an incident in a Redis that then stops
    settings.REDISQ = {"URL": volatile_redis_server.url}
    made = incident(get_broker(), "shop")
    volatile_redis_server.stop()
    queue = Queue.objects.get(name="shop")
    billing = Consumer.objects.get(queue=queue, name="billing")
    pages = [
        url("overview_changelist"),
        url("queue_changelist"),
        url("queue_change", queue.pk),
        url("consumer_changelist"),
        url("consumer_change", billing.pk),
    ]
    for page in pages:
        live.clear()  # each page on its own
        response = root.get(page)
        # Then each answers, says why, and shows unknown figures as unknown
        assert response.status_code == 200, page
        assert b'id="redisq-banner"' in response.content, page
        assert b" is unreachable (" in response.content, page
        assert b'class="redisq-unknown"' in response.content, page
    # The dead-letter pages need no Redis at all
    for page in (url("deadletter_changelist"), url("deadletter_change", made.row("long").pk)):
        assert root.get(page).status_code == 200


def test_with_redis_down_the_pages_say_how_old_the_last_answer_is_and_dead_letters_in_words(
    settings: Any, volatile_redis_server: Any, root: Client
) -> None:
    # Given an incident (billing has 6 dead letters in the database) in a Redis that
    # answered the overview, then stopped a second later
    settings.REDISQ = {"URL": volatile_redis_server.url}
    made = incident(get_broker(), "shop")
    live.clear()
    assert root.get(url("overview_data")).json()["answered_ago_ms"] < 1000
    volatile_redis_server.stop()
    time.sleep(1.0)
    pages = {
        "overview": url("overview_changelist"),
        "queues": url("queue_changelist"),
        "consumers": url("consumer_changelist"),
        "queue live": url("queue_live", "shop"),
        "billing live": url("consumer_live", "shop", "billing"),
    }
    for name, page in pages.items():
        html = root.get(page).content.decode()
        # Then no dead-letter figure reads "6+?": the rows are said as rows, Redis unknown
        assert "+?" not in html, name
        assert re.search(r">6 <span class=\"redisq-dead-note\">in the database,", html), name
        assert "Redis unknown" in html, name
        if "live" in name or name == "overview":
            # ... and a live page knows it failed and how old Redis's last answer is
            # (not "updated now": its script says so, tests/browser)
            assert 'data-error="1"' in html, name
            ago = re.search(r'data-answered-ago="(\d+)"', html)
            assert ago and int(ago[1]) >= 1000, name
    for data in (url("overview_data"), url("queue_live_data", "shop")):
        answer = root.get(data).json()
        assert answer["error"] and answer["answered_ago_ms"] >= 1000
    assert made.queue == "shop"


# -- what the figures say ------------------------------------------------------------------


def test_paused_reads_as_a_badge_everywhere(broker: Any, root: Client) -> None:
    made = incident(broker, "shop")
    queues = root.get(url("queue_changelist")).content
    assert cell(queues, "state", f">{made.paused_queue}<") == ["Paused"]
    # (shop's consumer email is paused: a partial state, never a plain "Active")
    assert cell(queues, "state", ">shop<") == ["Active · 1 of 3 consumers paused"]
    assert b"icon-no.svg" not in queues  # no red cross on healthy rows
    consumers = root.get(url("consumer_changelist")).content
    assert cell(consumers, "state", "shop/email") == ["Paused"]
    assert cell(consumers, "state", f"{made.paused_queue}/archive") == ["Paused (queue)"]
    overview = root.get(url("overview_changelist")).content.decode().replace("<wbr>", "")
    # (each name links to its live page)
    audit = re.search(rf">{re.escape(made.paused_queue)}</span></a></th>.*?</tr>", overview, re.S)
    assert audit and ">Paused<" in audit.group(0)
    archive = re.search(r">archive</span></a></th>.*?</tr>", overview, re.S)
    assert archive and ">Paused (queue)<" in archive.group(0)


def test_every_figure_has_its_help_text_and_the_lists_a_glossary(broker: Any, root: Client) -> None:
    incident(broker, "shop")
    page = root.get(url("queue_changelist")).content.decode()
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", page, re.S) if ">shop<" in r)
    for field, key in (
        ("backlog", "backlog"),
        ("in_flight", "in_flight"),
        ("retrying", "retrying"),
        ("delayed", "delayed"),
        ("dead", "dead"),
        ("oldest_unacked", "oldest_unacked"),
        ("length", "length"),
    ):
        td = re.search(rf'<td class="field-{field}">(.*?)</td>', row, re.S)
        assert td and f'title="{HELP[key]}"'.replace("'", "&#x27;") in td.group(1), field
    assert 'id="redisq-glossary"' in page and "length (incl. replay window)" in page.lower()


def test_backlog_is_not_the_length_of_the_log(queue_name: str, broker: Any, root: Client) -> None:
    # Given 5 messages billing has handled (kept for replay) and 2 it has not
    Queue.objects.create(name=queue_name)
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": n} for n in range(5)])
    with broker.subscribe(queue_name, "billing") as sub:
        sub.ack(sub.fetch(count=5, block_ms=500))
    broker.publish_many(queue_name, [{"n": n} for n in range(2)])
    page = root.get(url("queue_changelist")).content
    assert cell(page, "backlog", queue_name) == ["2"]
    assert cell(page, "length", queue_name) == ["7"]


def test_queue_figures_are_the_sums_of_their_consumers_on_every_list(
    broker: Any, root: Client
) -> None:
    made = incident(broker, "shop")
    live.clear()
    queues = root.get(url("queue_changelist")).content
    consumers = root.get(url("consumer_changelist")).content
    overview = root.get(url("overview_changelist")).content.decode()
    names = [c.name for c in Consumer.objects.filter(queue__name=made.queue)]
    for field in ("backlog", "in_flight", "retrying", "dead"):
        per_consumer = [int(cell(consumers, field, f"shop/{n}<")[0]) for n in names]
        assert cell(queues, field, ">shop<") == [str(sum(per_consumer))], field
    shop_line = re.search(
        r'<tr class="redisq-queue"><th><a href="[^"]*"><span class="redisq-name">shop</span></a>'
        r"</th>.*?</tr>",
        overview,
        re.S,
    )
    assert shop_line
    backlog = re.search(r'data-label="backlog"><span[^>]*>(\d+)<', shop_line.group(0))
    assert backlog and backlog.group(1) == cell(queues, "backlog", ">shop<")[0]


def test_a_backlog_with_no_instance_alive_raises_a_warning(broker: Any, root: Client) -> None:
    incident(broker, "shop")
    consumers = root.get(url("consumer_changelist")).content.decode()
    billing = next(r for r in re.findall(r"<tr>(.*?)</tr>", consumers, re.S) if "shop/billing" in r)
    email = next(r for r in re.findall(r"<tr>(.*?)</tr>", consumers, re.S) if "shop/email" in r)
    assert str(STALLED_TEXT) in billing and "redisq-stalled" in billing
    assert "redisq-stalled" not in email  # an instance is alive
    pk = Consumer.objects.get(queue__name="shop", name="billing").pk
    detail = root.get(url("consumer_change", pk)).content.decode()
    assert 'class="redisq-warning" role="alert"' in detail
    assert "no instance of this consumer is alive" in detail


# -- overrides -----------------------------------------------------------------------------


def change_consumer(client: Client, row: Consumer, **values: Any) -> Any:
    data = {"enabled": "on", **{k: "" if v is None else v for k, v in values.items()}}
    for field in ("max_retries", "backoff", "max_backoff", "visibility_timeout", "concurrency"):
        data.setdefault(field, "")
    return client.post(url("consumer_change", row.pk), data)


@pytest.mark.parametrize(
    ("values", "field", "says"),
    [
        ({"concurrency": 0}, "concurrency", "concurrency must be an integer >= 1, got 0"),
        ({"backoff": -1}, "backoff", "backoff must be a number of seconds >= 0, got -1.0"),
        ({"max_backoff": 2, "backoff": 5}, "max_backoff", "at least the backoff"),
        ({"max_backoff": 0.5}, "max_backoff", "at least the backoff"),  # default backoff 1 s
        (
            {"visibility_timeout": 0.5},
            "visibility_timeout",
            "visibility timeout must be a number of seconds >= 1, got 0.5",
        ),
    ],
)
def test_the_admin_refuses_invalid_overrides(
    queue_name: str, root: Client, values: dict[str, Any], field: str, says: str
) -> None:
    row = Consumer.objects.create(
        queue=Queue.objects.create(name=queue_name), name="billing", handler="x.y"
    )
    page = change_consumer(root, row, **values)
    assert page.status_code == 200  # the form again, with the error
    assert says in " ".join(page.context["adminform"].form.errors[field])  # the texts, unescaped
    row.refresh_from_db()
    assert all(getattr(row, f) is None for f in values)


def test_a_valid_override_is_saved_and_the_history_says_from_what_to_what(
    queue_name: str, root: Client
) -> None:
    row = Consumer.objects.create(
        queue=Queue.objects.create(name=queue_name), name="billing", handler="x.y"
    )
    assert change_consumer(root, row, concurrency=4, paused="on").status_code == 302
    row.refresh_from_db()
    assert (row.concurrency, row.paused) == (4, True)
    (entry,) = LogEntry.objects.filter(action_flag=CHANGE)
    assert entry.user.username == "root"
    assert entry.change_message == (
        "Changed Paused: False → True; Concurrency override: empty → 4."
    )


@pytest.fixture
def declared(queue_name: str) -> Iterator[list[Any]]:
    """Queue ``queue_name`` with one declared consumer (others' declarations aside)."""
    saved = dict(registry._declarations)
    registry._declarations.clear()
    handled: list[Any] = []

    @consumer(queue_name, name="billing", concurrency=2)
    def billing(message: Message) -> None:
        handled.append(message.payload["n"])

    try:
        yield handled
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


def test_a_worker_ignores_an_invalid_override_and_says_so(
    queue_name: str,
    declared: list[Any],
    redisq_settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given overrides the admin would refuse, written to the database anyway
    build_worker([queue_name])  # writes the rows
    Consumer.objects.filter(name="billing").update(concurrency=0, visibility_timeout=0)
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": n} for n in range(20)])

    # When a worker starts, then it runs with the code's values and logs why
    with caplog.at_level(logging.ERROR, logger="redisq.worker"):
        worker = build_worker([queue_name], options=WorkerOptions(burst=True, stats_interval=0))
    spec = worker.specs[(queue_name, "billing")]
    assert spec.concurrency == 2 and spec.policy.visibility_timeout_ms == 60_000
    assert "override 0 ignored: concurrency must be an integer >= 1" in caplog.text
    assert "visibility timeout must be a number of seconds >= 1, got 0.0" in caplog.text
    # ... and it handles every message (not "running" and doing nothing)
    assert worker.run() == 0
    assert sorted(declared) == list(range(20))
    # The admin says which value applies, and why the override does not
    row = Consumer.objects.get(name="billing")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get(url("consumer_change", row.pk)).content.decode()
    assert "override 0 ignored: concurrency must be an integer &gt;= 1" in page


# -- no inline that creates consumers; honest delete wording ----------------------------


def test_the_queue_page_cannot_add_consumers(queue_name: str, broker: Any, root: Client) -> None:
    queue = Queue.objects.create(name=queue_name)
    Consumer.objects.create(queue=queue, name="billing", handler="x.y")
    page = root.get(url("queue_change", queue.pk))
    assert b"Add another" not in page.content
    billing = Consumer.objects.get(queue=queue)
    assert url("consumer_change", billing.pk).encode() in page.content
    # A forged inline posting a nameless consumer creates nothing
    forged = {
        "paused": "",
        "consumers-TOTAL_FORMS": "1",
        "consumers-INITIAL_FORMS": "0",
        "consumers-0-name": "",
        "consumers-0-handler": "",
    }
    root.post(url("queue_change", queue.pk), forged)
    assert list(Consumer.objects.filter(queue=queue).values_list("name", flat=True)) == ["billing"]
    assert not Consumer.objects.filter(name="").exists()
    assert root.get(url("consumer_add")).status_code == 403


def test_delete_says_what_it_deletes_and_what_it_does_not(
    queue_name: str, broker: Any, root: Client
) -> None:
    queue = Queue.objects.create(name=queue_name)
    row = Consumer.objects.create(queue=queue, name="billing", handler="x.y")
    dead = DeadLetter.objects.create(
        queue=queue_name, consumer="billing", message_id="m1", payload="{}", reason="failed"
    )
    for page, note in (
        (url("queue_delete", queue.pk), QUEUE_DELETE_NOTE),
        (url("consumer_delete", row.pk), CONSUMER_DELETE_NOTE),
        (url("deadletter_delete", dead.pk), DELETE_NOTE),
    ):
        html = root.get(page).content.decode()
        assert str(note).replace("'", "&#x27;") in html, page
    # The bulk delete actions are named for what they do, and confirm with the note too
    changelist = root.get(url("queue_changelist")).content.decode()
    assert "Delete selected queues&#x27; rows (not their messages)" in changelist
    deadletters = root.get(url("deadletter_changelist")).content.decode()
    assert "Delete selected records from the database (gone for good)" in deadletters
    assert "Discard selected dead letters (keep the record, never deliver)" in deadletters
    confirm = root.post(
        url("queue_changelist"), {"action": "delete_selected", "_selected_action": [queue.pk]}
    )
    assert str(QUEUE_DELETE_NOTE).replace("'", "&#x27;") in confirm.content.decode()
    assert Queue.objects.filter(pk=queue.pk).exists()  # nothing deleted yet


def test_the_admin_client_of_a_django_redis_cache_has_short_timeouts_and_no_retries(
    settings: Any, redis_url: str, queue_name: str
) -> None:
    # Given REDISQ reusing a django-redis cache's connection (its own timeouts: none)
    settings.CACHES = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}
    }
    settings.REDISQ = {"CONNECTION": "default", "ADMIN_REDIS_TIMEOUT": 0.25}
    client = live.admin_broker().client
    kwargs = client.connection_pool.connection_kwargs
    # Then the admin's client reaches the same server, with its own short timeouts
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.25, 0.25)
    assert kwargs["retry"].get_retries() == 0
    assert client.connection_pool is not get_broker().client.connection_pool
    get_broker().consumers.ensure(queue_name, "billing")
    assert live.live_stats([queue_name]).consumer(queue_name, "billing") is not None
