"""The live pages of a consumer and a queue, with Django's test client: each list shows
exactly what is waiting, delayed, retrying and in flight, and the instances; the JSON
endpoint the page polls; query counts that do not grow with the rows; actions that are
POST-only, CSRF-protected, permission-checked, reported and written to the admin history;
pages that stay up when Redis is down."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.models import Consumer, Queue
from redisq_django.runner import build_worker
from tests.support.live_data import Live, live_consumer

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

REF = re.compile(rb'<tr data-ref="([^"]+)"')


def page_url(queue: str, consumer: str | None = None, what: str = "") -> str:
    if consumer is None:
        return reverse(f"admin:redisq_django_queue_live{what}", args=[queue])
    return reverse(f"admin:redisq_django_consumer_live{what}", args=[queue, consumer])


def action_url(queue: str, consumer: str | None, action: str) -> str:
    if consumer is None:
        return reverse("admin:redisq_django_queue_live_action", args=[queue, action])
    return reverse("admin:redisq_django_consumer_live_action", args=[queue, consumer, action])


def listed(client: Client, url: str, **params: Any) -> list[str]:
    """The message ids (the last part of each row's ref) a list page shows."""
    response = client.get(url, params)
    assert response.status_code == 200
    return [ref.decode().rsplit(":", 1)[-1] for ref in REF.findall(response.content)]


def ids_of(broker: Any, queue: str, refs: list[str]) -> list[str]:
    """Message ids of log entry ids (a waiting or in-flight row names its entry id)."""
    out = []
    for ref in refs:
        found = broker.client.xrange(broker.keys(queue).log, ref, ref)
        out.append(json.loads(found[0][1].get(b"id", b'"' + found[0][0] + b'"')) if found else ref)
    return out


# -- what the lists show ------------------------------------------------------------------


def test_each_list_shows_exactly_what_is_waiting_delayed_retrying_and_in_flight(
    root: Client, broker: Any, made: Live
) -> None:
    url = page_url(made.queue, "billing")
    # Waiting: the backlog, in delivery order (rows name log entries: ids here)
    assert listed(root, url, list="waiting") == made.waiting
    # Delayed: the queue's delayed messages, soonest first
    assert listed(root, url, list="delayed") == made.delayed
    # Retrying: billing's retries; in flight: what worker-1 holds
    assert sorted(listed(root, url, list="retrying")) == sorted(made.retrying)
    assert listed(root, url, list="in_flight") == made.in_flight
    # Instances: worker-1, alive, with what it reported
    page = root.get(url, {"list": "instances"})
    assert REF.findall(page.content) == [b"worker-1"]
    assert b"heartbeat expired" not in page.content and b">alive<" in page.content
    # Dead: a link to its dead letters, filtered
    dead = root.get(url, {"list": "dead"}).content.decode()
    assert "consumer=billing" in dead and "status__exact=dead" in dead
    assert "1 dead letter in the database" in dead


def test_each_row_has_a_preview_and_the_retries_their_error(root: Client, made: Live) -> None:
    url = page_url(made.queue, "billing")
    waiting = root.get(url, {"list": "waiting"}).content.decode()
    assert "{&quot;order&quot;:200}" in waiting
    retrying = root.get(url, {"list": "retrying"}).content.decode()
    assert "ValueError: card declined for order 100" in retrying
    assert "TimeoutError: tax service timed out" in retrying
    in_flight = root.get(url, {"list": "in_flight"}).content.decode()
    assert in_flight.count("worker-1") == 3 and "running since" in in_flight


def test_the_figures_and_the_tab_counts_say_the_same(root: Client, made: Live) -> None:
    response = root.get(page_url(made.queue, "billing", "_data"))
    figures = response.json()["figures"]
    assert {k: figures[k] for k in ("backlog", "in_flight", "delayed", "retrying", "dead")} == {
        "backlog": len(made.waiting),
        "in_flight": len(made.in_flight),
        "delayed": len(made.delayed),
        "retrying": len(made.retrying),
        "dead": len(made.dead),
    }
    assert (figures["instances"], figures["paused"], figures["stalled"]) == (1, False, False)
    tabs = root.get(page_url(made.queue, "billing")).content.decode()
    assert re.search(r'id="redisq-tab-waiting"[^>]*>Waiting <span class="redisq-count">6<', tabs)


def test_lists_are_paged_by_cursor(root: Client, broker: Any, queue_name: str) -> None:
    made = live_consumer(broker, queue_name, waiting=60)
    url = page_url(made.queue, "billing")
    first = root.get(url, {"list": "waiting", "n": 25})
    link = re.search(rb'href="([^"]+)" id="redisq-next-page"', first.content)
    assert link is not None
    seen = [ref.decode().rsplit(":", 1)[-1] for ref in REF.findall(first.content)]
    for _ in range(5):
        if link is None:
            break
        page = root.get(link.group(1).decode().replace("&amp;", "&"))
        seen += [ref.decode().rsplit(":", 1)[-1] for ref in REF.findall(page.content)]
        link = re.search(rb'href="([^"]+)" id="redisq-next-page"', page.content)
    assert seen == made.waiting


def test_the_json_endpoint_is_small_and_refreshes_every_region(root: Client, made: Live) -> None:
    data = root.get(page_url(made.queue, "billing", "_data"), {"list": "retrying"}).json()
    assert set(data["html"]) == {"banner", "figures", "list", "held"}  # charts only when asked
    assert data["error"] == "" and data["updated"] > 0
    assert all(mid in data["html"]["list"] for mid in made.retrying)
    with_charts = root.get(page_url(made.queue, "billing", "_data"), {"charts": "1"}).json()
    assert 'id="redisq-chart-throughput"' in with_charts["html"]["charts"]
    assert len(json.dumps(data)) < 40_000


def test_query_counts_do_not_grow_with_the_rows(root: Client, broker: Any, queue_name: str) -> None:
    small = live_consumer(broker, queue_name, waiting=2)
    big = live_consumer(broker, f"{queue_name}.big", waiting=150)
    counts = {}
    for made in (small, big):
        for list_name in ("waiting", "in_flight", "instances"):
            with CaptureQueriesContext(connection) as queries:
                assert (
                    root.get(
                        page_url(made.queue, "billing"), {"list": list_name, "n": 100}
                    ).status_code
                    == 200
                )
            counts[(made.queue, list_name)] = len(queries)
        with CaptureQueriesContext(connection) as queries:
            root.get(page_url(made.queue), {"list": "consumers"})
        counts[(made.queue, "queue")] = len(queries)
    for what in ("waiting", "in_flight", "instances", "queue"):
        assert counts[(small.queue, what)] == counts[(big.queue, what)], what


def test_the_queue_page_lists_its_consumers_delayed_messages_and_log(
    root: Client, broker: Any, made: Live
) -> None:
    url = page_url(made.queue)
    assert listed(root, url, list="consumers") == ["billing", "email"]
    assert listed(root, url, list="delayed") == made.delayed
    newest_first = listed(root, url, list="log", n=3)
    assert newest_first == made.waiting[::-1][:3]
    page = root.get(url).content.decode()
    assert reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"]) in page


def test_a_message_page_shows_its_payload_and_says_when_it_is_gone(
    root: Client, broker: Any, made: Live
) -> None:
    ref = f"log:{made.waiting[0]}"
    page = root.get(page_url(made.queue, "billing", "_message"), {"ref": ref}).content.decode()
    assert "&quot;order&quot;: 200" in page and 'id="redisq-deliver-now"' not in page
    retrying = root.get(page_url(made.queue, "billing"), {"list": "retrying"}).content
    retry = REF.findall(retrying)[0].decode()
    retry_page = root.get(
        page_url(made.queue, "billing", "_message"), {"ref": retry}
    ).content.decode()
    assert 'id="redisq-deliver-now"' in retry_page and "Last error:" in retry_page
    broker.client.xdel(broker.keys(made.queue).log, made.waiting[0])
    gone = root.get(page_url(made.queue, "billing", "_message"), {"ref": ref}).content.decode()
    assert 'id="redisq-gone"' in gone
    bad = root.get(page_url(made.queue, "billing", "_message"), {"ref": "nonsense"})
    assert bad.status_code == 404


def test_unknown_names_are_not_found(root: Client, broker: Any, queue_name: str) -> None:
    assert root.get(page_url(queue_name, "nobody")).status_code == 404
    assert root.get(page_url("bad{name}")).status_code == 404


# -- actions --------------------------------------------------------------------------------


def test_deliver_now_is_post_only_logged_and_delivers_exactly_that_message_next(
    root: Client, broker: Any, made: Live
) -> None:
    # Given email with nothing left to do, and two messages delayed by an hour
    with broker.subscribe(made.queue, "email") as sub:
        sub.ack(sub.fetch(count=100, block_ms=100))
    page = root.get(page_url(made.queue, "billing"), {"list": "delayed"}).content
    refs = [r.decode() for r in REF.findall(page)]
    assert [r.rsplit(":", 1)[-1] for r in refs] == made.delayed
    url = action_url(made.queue, "billing", "deliver")
    # When staff deliver the second one now (a GET changes nothing)
    assert root.get(url, {"ref": refs[1]}).status_code == 405
    response = root.post(url, {"ref": refs[1]}, follow=True)
    # Then they are told, it is in the admin history, and email receives exactly it next
    assert f"Delivered delayed message {made.delayed[1]} now." in response.content.decode()
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_repr) == (CHANGE, f"{made.queue}/billing")
    assert entry.get_change_message() == f"Delivered now: delayed message {made.delayed[1]}"
    with broker.subscribe(made.queue, "email") as sub:
        got = sub.fetch(count=100, block_ms=200)
        sub.ack(got)
    assert [m.id for m in got] == [made.delayed[1]]
    assert listed(root, page_url(made.queue, "billing"), list="delayed") == [made.delayed[0]]
    # ... and a second click finds it gone
    again = root.post(url, {"ref": refs[1]}, follow=True)
    assert "is no longer waiting" in again.content.decode()


def test_deliver_now_of_a_retry_reaches_its_consumer_before_the_rest(
    root: Client, broker: Any, made: Live
) -> None:
    refs = [
        r.decode()
        for r in REF.findall(
            root.get(page_url(made.queue, "billing"), {"list": "retrying"}).content
        )
    ]
    target = next(r for r in refs if r.endswith(made.retrying[1]))
    root.post(action_url(made.queue, "billing", "deliver"), {"ref": target})
    waiting = root.get(page_url(made.queue, "billing"), {"list": "waiting"}).content.decode()
    first_row = REF.findall(waiting.encode())[0].decode()
    assert first_row.startswith("direct:")  # its private input comes first
    sub = broker.subscribe(made.queue, "billing", "worker-2")
    got = sub.fetch(count=100, block_ms=100)
    assert made.retrying[1] in [m.id for m in got]
    assert made.retrying[0] not in [m.id for m in got]


def test_actions_need_csrf_and_the_change_permission(broker: Any, made: Live) -> None:
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_consumer", "view_queue"])
    )
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer)
    assert client.get(page_url(made.queue, "billing")).status_code == 200
    assert 'id="redisq-actions"' not in client.get(page_url(made.queue, "billing")).content.decode()
    assert client.post(action_url(made.queue, "billing", "pause")).status_code == 403
    boss = User.objects.create_superuser("boss", password="pw")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(boss)
    assert strict.post(action_url(made.queue, "billing", "pause")).status_code == 403  # no token
    assert not Consumer.objects.get(name="billing", queue__name=made.queue).paused
    nobody = Client()
    assert nobody.get(page_url(made.queue, "billing")).status_code == 302  # to the login


def test_pause_and_resume_from_the_live_page(root: Client, made: Live) -> None:
    response = root.post(action_url(made.queue, "billing", "pause"), follow=True)
    assert "Paused" in response.content.decode()
    row = Consumer.objects.get(name="billing", queue__name=made.queue)
    assert row.paused
    assert root.get(page_url(made.queue, "billing", "_data")).json()["figures"]["paused"] is True
    root.post(action_url(made.queue, "billing", "resume"))
    row.refresh_from_db()
    assert not row.paused
    assert [e.get_change_message() for e in LogEntry.objects.order_by("pk")] == [
        "Paused",
        "Resumed",
    ]
    root.post(action_url(made.queue, None, "pause"))
    assert Queue.objects.get(name=made.queue).paused


def test_replay_asks_first_then_moves_the_consumer_back(
    root: Client, broker: Any, made: Live
) -> None:
    url = action_url(made.queue, "email", "replay")
    confirm = root.get(url, {"start": "earliest"})
    assert "receives again" in confirm.content.decode()
    with broker.subscribe(made.queue, "email") as sub:
        sub.ack(sub.fetch(count=100, block_ms=100))
    assert broker.stats(made.queue).consumers[1].backlog == 0
    root.post(url, {"start": "earliest"})
    email = {c.name: c for c in broker.stats(made.queue).consumers}["email"]
    assert email.backlog == 6 + len(made.waiting)
    assert LogEntry.objects.get().get_change_message() == "Replayed from earliest"
    # A point that is not a time nor an id is refused with a message
    bad = root.post(url, {"start": "id", "value": "yesterday"}, follow=True)
    assert "Invalid start point" in bad.content.decode()


def test_purge_needs_the_name_typed_and_discards_what_waits_for_that_consumer(
    root: Client, broker: Any, made: Live
) -> None:
    url = action_url(made.queue, "billing", "purge")
    assert 'id="redisq-confirm-name"' in root.get(url).content.decode()
    wrong = root.post(url, {"confirm_name": "bill"}, follow=True)
    assert "Nothing was purged" in wrong.content.decode()
    billing = {c.name: c for c in broker.stats(made.queue).consumers}["billing"]
    assert billing.backlog == len(made.waiting)
    done = root.post(url, {"confirm_name": "billing"}, follow=True)
    assert "Purged" in done.content.decode()
    after = {c.name: c for c in broker.stats(made.queue).consumers}
    assert (after["billing"].backlog, after["billing"].waiting_retry) == (0, 0)
    assert after["billing"].in_flight == len(made.in_flight)
    assert after["email"].backlog == 6 + len(made.waiting)
    assert LogEntry.objects.get().get_change_message().startswith("Purged: skipped its backlog")


def test_purge_of_a_queue(root: Client, broker: Any, made: Live) -> None:
    url = action_url(made.queue, None, "purge")
    root.post(url, {"confirm_name": made.queue})
    stats = broker.stats(made.queue)
    assert (stats.length, stats.delayed, stats.total("backlog")) == (0, 0, 0)
    assert LogEntry.objects.get().object_repr == made.queue


def test_purge_of_a_queue_says_in_red_what_a_lagging_archive_loses_and_wants_a_tick(
    root: Client, broker: Any, made: Live
) -> None:
    # Given archive "default" that has stored none of the queue's 12 messages
    broker.archives.register(made.queue, "default", "messages", "earliest")
    url = action_url(made.queue, None, "purge")
    # Then the confirmation page says so in red, with a box to tick
    page = root.get(url).content.decode()
    box = r'<div class="redisq-loss" id="redisq-purge-costs".*?>(.*?)</div>'
    costs = re.search(box, page, re.S)
    assert costs is not None
    assert re.findall(r"<li>(.*?)</li>", costs.group(1)) == [
        "12 messages not yet archived by &#x27;default&#x27; will be lost"
    ]
    assert (
        '<input type="checkbox" name="lose_unarchived" value="yes" '
        'id="redisq-lose-unarchived" required>'
    ) in costs.group(1)
    # When the name is typed but the box not ticked: nothing is purged, the page again
    refused = root.post(url, {"confirm_name": made.queue}, follow=True)
    assert "Nothing was purged: messages not yet archived would be lost" in refused.content.decode()
    assert b'id="redisq-purge-costs"' in refused.content
    assert broker.stats(made.queue).length == 12
    # When ticked too: purged, and the archive's gap record says a purge removed them
    root.post(url, {"confirm_name": made.queue, "lose_unarchived": "yes"})
    assert broker.stats(made.queue).length == 0
    gap = broker.archives.gap(made.queue, "default", "messages")
    assert gap is not None and gap.purge is not None and gap.purge.count == 12
    # And with nothing left to lose, the page asks for no tick
    assert b"redisq-purge-costs" not in root.get(url).content


# -- Redis down -------------------------------------------------------------------------


def test_the_pages_answer_with_redis_stopped(
    root: Client, settings: Any, volatile_redis_server: Any, queue_name: str
) -> None:
    settings.REDISQ = {"URL": volatile_redis_server.url}
    live.clear()
    made = live_consumer(get_broker(), queue_name)
    volatile_redis_server.stop()
    live.clear()
    page = root.get(page_url(made.queue, "billing"))
    assert page.status_code == 200 and b'id="redisq-banner"' in page.content
    assert b"redisq-unknown" in page.content
    data = root.get(page_url(made.queue, "billing", "_data"), {"charts": "1"}).json()
    assert "is unreachable" in data["error"] and data["figures"]["backlog"] is None
    assert "Trends unknown" in data["html"]["charts"]
    queue_page = root.get(page_url(made.queue))
    assert queue_page.status_code == 200 and b'id="redisq-banner"' in queue_page.content
    failed = root.post(
        action_url(made.queue, "billing", "deliver"),
        {"ref": f"delayed:1:{made.delayed[0]}"},
        follow=True,
    )
    assert "failed" in failed.content.decode()
    assert not LogEntry.objects.exists()


def test_runconsumer_samples_the_trends(broker: Any, queue_name: str, settings: Any) -> None:
    from redisq_django import consumer
    from redisq_django.consuming.declarations import registry

    saved = dict(registry._declarations)
    try:

        @consumer(queue_name, name="billing")
        def handle(message: Any) -> None:
            pass

        assert "trend samples" in [job.name for job in build_worker([queue_name]).periodic]
        settings.REDISQ = {**settings.REDISQ, "TRENDS": False}
        assert "trend samples" not in [job.name for job in build_worker([queue_name]).periodic]
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


# -- on a Redis Cluster -------------------------------------------------------------------


@pytest.mark.cluster
def test_the_console_reads_a_redis_cluster(
    root: Client, redisq_settings: Any, redis_cluster: Any, queue_name: str
) -> None:
    # Given REDISQ on a 3-master cluster, and a consumer with messages in every state
    redis_cluster.flushall()
    redisq_settings.REDISQ = {"URL": redis_cluster.nodes[0].url, "CLUSTER": True}
    live.clear()
    broker = get_broker()
    assert type(broker.client).__name__ == "RedisCluster"
    made = live_consumer(broker, queue_name)
    # When staff open the overview, the queue list and the consumer's live page
    overview = root.get(reverse("admin:redisq_django_overview_changelist"))
    queues = root.get(reverse("admin:redisq_django_queue_changelist"))
    figures = root.get(page_url(made.queue, "billing", "_data")).json()["figures"]
    # Then every page answers with the cluster's figures, without the "Redis is sick" banner
    assert overview.status_code == queues.status_code == 200
    for page in (overview, queues):
        assert b'id="redisq-banner"' not in page.content, page.content[:3000]
    assert b"billing" in overview.content
    assert {k: figures[k] for k in ("backlog", "in_flight", "delayed", "retrying", "dead")} == {
        "backlog": len(made.waiting),
        "in_flight": len(made.in_flight),
        "delayed": len(made.delayed),
        "retrying": len(made.retrying),
        "dead": len(made.dead),
    }
    url = page_url(made.queue, "billing")
    assert listed(root, url, list="waiting") == made.waiting
    assert listed(root, url, list="delayed") == made.delayed
    assert sorted(listed(root, url, list="retrying")) == sorted(made.retrying)
    assert listed(root, url, list="in_flight") == made.in_flight


def test_a_messages_ordering_key_is_shown_escaped_in_its_row_and_on_its_page(
    root: Client, broker: Any, queue_name: str
) -> None:
    # Given a message whose key holds markup, and one without a key
    broker.consumers.ensure(queue_name, "billing")
    key = '<b class="x">order-1</b> & "more"'
    keyed = broker.publish(queue_name, {"n": 1}, key=key)
    plain = broker.publish(queue_name, {"n": 2})
    escaped = "&lt;b class=&quot;x&quot;&gt;order-1&lt;/b&gt; &amp; &quot;more&quot;"
    # When the waiting list is shown: the key beside the keyed message's id only
    listing = root.get(page_url(queue_name, "billing"), {"list": "waiting"}).content.decode()
    row = {r.split('"', 1)[0]: r for r in listing.split('<tr data-ref="')[1:]}
    assert f'<span class="redisq-key" title="ordering key">{escaped}</span>' in row[f"log:{keyed}"]
    assert "redisq-key" not in row[f"log:{plain}"]
    assert key not in listing
    # And on the message's own page
    page = root.get(
        page_url(queue_name, "billing", "_message"), {"ref": f"log:{keyed}"}
    ).content.decode()
    assert (
        f'id="redisq-ordering-key">Ordering key: <code class="redisq-key">{escaped}</code>' in page
    )
    assert key not in page
    plain_page = root.get(page_url(queue_name, "billing", "_message"), {"ref": f"log:{plain}"})
    assert "redisq-ordering-key" not in plain_page.content.decode()
