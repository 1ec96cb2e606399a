"""An ordered consumer's *Keys held back* on its live page, with Django's test client on a
real Redis: each held key with how many wait, its holder (linked to the message's page)
and why in words; keys escaped whatever they hold; nothing for an unordered consumer,
one line when nothing is held, a cut list said; *Release…* asks first, is POST-only,
CSRF-protected, needs the change permission, lets the next message go and is written to
the admin history; Redis stopped or hung gives the banner, an unknown section and a
failed release, never a 500 or a hang. And the consumer's settings page says whether
it is ordered."""

from __future__ import annotations

import html
import os
import re
import signal
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.admin.live.held_keys import encode_key
from redisq_django.connection import get_broker
from redisq_django.core.ordered import HELD_LIMIT
from redisq_django.core.wire import visible
from redisq_django.models import Consumer
from tests.support.held_data import CONSUMER, INSTANCE, ODD_KEY, Held, declared, held_consumer
from tests.support.live_data import live_consumer

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

ROW = re.compile(r'<tr data-key="([^"]*)">(.*?)</tr>', re.S)


@pytest.fixture
def made(broker: Any, queue_name: str) -> Held:
    return held_consumer(broker, queue_name)


def page_url(queue: str, what: str = "", consumer: str = CONSUMER) -> str:
    return reverse(f"admin:redisq_django_consumer_live{what}", args=[queue, consumer])


def release_url(queue: str) -> str:
    return reverse("admin:redisq_django_consumer_live_action", args=[queue, CONSUMER, "release"])


def held_rows(content: str) -> dict[str, str]:
    """Held key (unescaped) -> its row's HTML."""
    return {html.unescape(key): row for key, row in ROW.findall(content)}


def text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def test_each_held_key_says_how_many_wait_who_holds_it_and_why(
    root: Client, broker: Any, made: Held
) -> None:
    # When staff open the ordered consumer's live page
    page = root.get(page_url(made.queue)).content.decode()

    # Then each held key has its row, most waiting first
    rows = held_rows(page)
    assert list(rows) == [ODD_KEY, "retry-me", "lost", "queued"]
    assert 'id="redisq-held-count">4<' in page
    for key, row in rows.items():
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        assert text(cells[1]) == str(made.waiting[key]), key
        assert text(cells[2]) == made.holders[key], key
    # ... and why, in words
    assert text(rows[ODD_KEY]).count(f"running on {INSTANCE}") == 1
    retry = text(rows["retry-me"])
    pattern = r"retrying at (\d\d-\d\d )?\d\d:\d\d:\d\d \( in [^)]+ \) after: ValueError: card"
    assert re.search(pattern, retry), retry
    assert "queued in the consumer's input" in text(rows["queued"])
    assert "holder not found: release the key to let its next message go" in text(rows["lost"])

    # And each holder found links to its message's page, which shows it
    for key in (ODD_KEY, "retry-me", "queued"):
        link = re.search(r'<a class="redisq-msg" href="([^"]+)">', rows[key])
        assert link, key
        message = root.get(html.unescape(link.group(1)))
        assert message.status_code == 200
        assert f"<h3>{made.holders[key]}</h3>" in message.content.decode(), key
    assert "redisq-msg" not in rows["lost"]  # found nowhere: nothing to link to


def test_a_key_is_escaped_everywhere_it_is_shown(root: Client, broker: Any, made: Held) -> None:
    # Escaped as HTML, its line break shown as "\n" (core.wire.visible), as the console does
    escaped = html.escape(visible(ODD_KEY))
    page = root.get(page_url(made.queue)).content.decode()
    data = root.get(page_url(made.queue, "_data")).json()["html"]["held"]
    form = re.search(r'name="key" value="([^"]*)"', held_rows(page)[ODD_KEY])
    assert form and html.unescape(form.group(1)) == encode_key(ODD_KEY)  # no raw line break
    confirm = root.get(release_url(made.queue), {"key": encode_key(ODD_KEY)}).content.decode()
    for shown in (page, data, confirm):
        assert "<script>alert" not in shown
        assert f'<code class="redisq-key">{escaped}</code>' in shown or escaped in shown
        assert escaped in shown


def test_nothing_for_an_unordered_consumer_one_line_for_an_ordered_one_without_holds(
    root: Client, broker: Any, queue_name: str
) -> None:
    # Given an unordered consumer with keyed messages (billing), and ledger declared ordered
    # with nothing held
    live_consumer(broker, queue_name)
    billing = root.get(page_url(queue_name, consumer="billing")).content.decode()
    assert 'id="redisq-held"' not in billing
    assert root.get(page_url(queue_name, "_data", "billing")).json()["html"]["held"].strip() == ""
    broker.consumers.ensure(queue_name, CONSUMER)
    Consumer.objects.create(queue=Consumer.objects.get(name="billing").queue, name=CONSUMER)
    with declared(queue_name):
        page = root.get(page_url(queue_name)).content.decode()
    assert "No key held back." in page and "Ordered consumer:" in page
    assert not held_rows(page)


def test_a_long_list_is_cut_and_says_so(root: Client, broker: Any, queue_name: str) -> None:
    # Given more held keys than the page shows, "k-0000" with the most waiting
    broker.consumers.ensure(queue_name, CONSUMER)
    keys = [f"k-{n:04d}" for n in range(HELD_LIMIT + 5)]
    broker.publish_many(queue_name, [{"n": 0}] * 3, key=keys[0])
    for key in keys[1:]:
        broker.publish_many(queue_name, [{"n": 0}] * 2, key=key)
    sub = broker.subscribe(queue_name, CONSUMER, INSTANCE, ordered=True)
    assert len(sub.fetch(count=1000, block_ms=200)) == len(keys)
    # When the page shows them
    page = root.get(page_url(queue_name)).content.decode()
    # Then the first HELD_LIMIT, most waiting first, and a line saying more are held
    rows = list(held_rows(page))
    assert len(rows) == HELD_LIMIT and rows[0] == keys[0] and rows[1:] == keys[1:HELD_LIMIT]
    assert 'id="redisq-held-cut"' in page and "more keys are held back" in page
    assert f'id="redisq-held-count">{HELD_LIMIT}+<' in page


def test_release_asks_first_then_lets_the_next_message_go_and_is_recorded(
    root: Client, broker: Any, made: Held
) -> None:
    url = release_url(made.queue)
    field = encode_key("lost")
    # A GET asks, and changes nothing
    confirm = root.get(url, {"key": field, "next": page_url(made.queue)}).content.decode()
    assert "the next of its waiting messages goes to the consumer's input now" in confirm
    assert "may run beside it, out of order" in confirm
    assert "lost" in held_rows(root.get(page_url(made.queue)).content.decode())
    # When staff confirm
    done = root.post(url, {"key": field}, follow=True).content.decode()
    # Then they are told, the key's next message is what the consumer receives, and the
    # admin history has it
    assert "Released ordering key lost of" in text(done)
    got = made.sub.fetch(count=100, block_ms=200)  # (with queued's holder, from the input)
    assert [m.id for m in got if m.key == "lost"] == made.later["lost"][:1]
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_repr) == (CHANGE, f"{made.queue}/{CONSUMER}")
    assert entry.get_change_message() == "Released ordering key 'lost' by hand"
    # ... and a key no longer held back says so, changing nothing
    made.sub.ack(got)
    again = root.post(url, {"key": field}, follow=True).content.decode()
    assert "is not held back (any more): nothing was released" in text(again)
    assert LogEntry.objects.count() == 1


def test_release_of_a_key_with_a_line_break_and_markup(
    root: Client, broker: Any, made: Held
) -> None:
    root.post(release_url(made.queue), {"key": encode_key(ODD_KEY)})
    got = made.sub.fetch(count=100, block_ms=200)  # (with queued's holder, from the input)
    assert [m.id for m in got if m.key == ODD_KEY] == made.later[ODD_KEY][:1]


def test_release_is_post_only_csrf_protected_and_needs_the_change_permission(
    broker: Any, made: Held
) -> None:
    field = encode_key("lost")
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename="view_consumer"))
    client = Client()
    client.force_login(viewer)
    page = client.get(page_url(made.queue)).content.decode()
    assert "lost" in held_rows(page) and "button redisq-release" not in page  # seen, not offered
    assert client.post(release_url(made.queue), {"key": field}).status_code == 403
    assert client.get(release_url(made.queue), {"key": field}).status_code == 403
    boss = User.objects.create_superuser("boss", password="pw")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(boss)
    assert strict.post(release_url(made.queue), {"key": field}).status_code == 403  # no token
    nobody = Client()
    assert nobody.post(release_url(made.queue), {"key": field}).status_code == 302  # to login
    root = Client()
    root.force_login(boss)
    assert root.put(release_url(made.queue), {"key": field}).status_code == 405
    assert root.get(release_url(made.queue)).status_code == 404  # no key named
    # Nothing was released by any of them: only queued's holder is there to fetch
    assert [m.key for m in made.sub.fetch(count=100, block_ms=100)] == ["queued"]
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("outage", ["stopped", "hung"])
def test_redis_down_or_hung_gives_the_banner_an_unknown_section_and_a_failed_release(
    root: Client, settings: Any, volatile_redis_server: Any, queue_name: str, outage: str
) -> None:
    settings.REDISQ = {"URL": volatile_redis_server.url, "ADMIN_REDIS_TIMEOUT": 0.3}
    live.clear()
    made = held_consumer(get_broker(), queue_name)
    pid = volatile_redis_server.pid
    if outage == "stopped":
        volatile_redis_server.stop()
    else:
        os.kill(pid, signal.SIGSTOP)  # accepts connections, never answers
    try:
        live.clear()
        with declared(queue_name):
            page = root.get(page_url(made.queue))
            data = root.get(page_url(made.queue, "_data")).json()
        failed = root.post(release_url(made.queue), {"key": encode_key("lost")}, follow=True)
    finally:
        if outage == "hung":
            os.kill(pid, signal.SIGCONT)
    assert page.status_code == 200 and b'id="redisq-banner"' in page.content
    assert b'id="redisq-held-unknown"' in page.content and not held_rows(page.content.decode())
    assert "is unreachable" in data["error"] and 'id="redisq-held-unknown"' in data["html"]["held"]
    assert failed.status_code == 200
    assert "Releasing the key failed" in failed.content.decode()
    assert not LogEntry.objects.exists()
    if outage == "hung":  # and nothing was released meanwhile
        assert [m.key for m in made.sub.fetch(count=100, block_ms=100)] == ["queued"]


def test_the_settings_page_says_whether_it_is_declared_ordered(
    root: Client, broker: Any, made: Held
) -> None:
    row = Consumer.objects.get(queue__name=made.queue, name=CONSUMER)
    url = reverse("admin:redisq_django_consumer_change", args=[row.pk])

    def ordered() -> str:
        page = root.get(url).content.decode()
        found = re.search(r'field-ordered.*?<div class="readonly">(.*?)</div>', page, re.S)
        assert found, page
        return text(found.group(1))

    with declared(made.queue, ordered=True):
        assert ordered().startswith("yes")
    with declared(made.queue, ordered=False):
        assert ordered() == "no"
    assert ordered().startswith("unknown: this process's code declares no such consumer")
