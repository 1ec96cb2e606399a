"""Text another client wrote, in the admin: a payload nested 100,000 deep shows raw with a
note (200, never 500) on the message page and the dead letter page; the Release form
answers a clear message to any crafted ``key`` (huge, not UTF-8, control characters, not
JSON, missing); and right-to-left and invisible characters in ordering keys, names and
error texts show as escapes (``\\u202e``), as ``manage.py redisq held`` shows them, so
that ``\\u202egnp.exe`` never reads as "exe.png". Django's test client on a real Redis."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin.live.held_keys import encode_key
from redisq_django.models import Consumer, DeadLetter, Queue
from tests.support.admin_pages import make_dead

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

#: JSON nested deeper than any parser's recursion limit.
DEEP = "[" * 100_000 + "]" * 100_000
#: Reads "exe.png" when shown raw: a right-to-left override, then "gnp.exe".
BIDI_KEY = "\u202egnp.exe"
#: How the console (manage.py redisq held) and now the admin show it.
BIDI_SHOWN = "\\u202egnp.exe"
#: Invisible or direction-changing characters, each must be shown as an escape.
HIDDEN = ("\u202e", "\u202d", "\u2066", "\u200b", "\u200f", "\ufeff")


def visible_text(page: str) -> str:
    """What a reader sees: the page without tags and attributes, entities decoded."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def held_bidi_key(broker: Any, queue: str) -> Any:
    """Ordered consumer ``ledger`` with key :data:`BIDI_KEY` held (one message waiting)."""
    q = Queue.objects.create(name=queue)
    Consumer.objects.create(queue=q, name="ledger", handler="shop.consumers.ledger")
    broker.consumers.ensure(queue, "ledger")
    broker.publish_many(queue, [{"n": 0}, {"n": 1}], key=BIDI_KEY)
    sub = broker.subscribe(queue, "ledger", "i1", ordered=True)
    assert len(sub.fetch(count=10, block_ms=200)) == 1
    return sub


def consumer_url(queue: str, what: str = "") -> str:
    return reverse(f"admin:redisq_django_consumer_live{what}", args=[queue, "ledger"])


def release_url(queue: str) -> str:
    return reverse("admin:redisq_django_consumer_live_action", args=[queue, "ledger", "release"])


# -- right-to-left and invisible characters ----------------------------------------------


def test_a_bidi_key_shows_as_escapes_on_the_held_keys_list_and_the_confirm_page(
    root: Client, broker: Any, queue_name: str
) -> None:
    # Given a key held back whose text is "\u202egnp.exe"
    held_bidi_key(broker, queue_name)
    # When staff open the live page, its JSON and the Release confirmation
    page = root.get(consumer_url(queue_name)).content.decode()
    data = root.get(consumer_url(queue_name, "_data")).json()["html"]["held"]
    confirm = root.get(release_url(queue_name), {"key": encode_key(BIDI_KEY)})
    assert confirm.status_code == 200
    # Then the key reads as its escapes wherever a reader sees it, never raw
    for shown in (page, data, confirm.content.decode()):
        assert BIDI_SHOWN in visible_text(shown)
        assert "\u202e" not in visible_text(shown)
    # And the form still names the key itself (JSON, ASCII), so the release acts on it
    assert html.escape(encode_key(BIDI_KEY)) in page


def test_releasing_a_bidi_key_reports_it_as_escapes(
    root: Client, broker: Any, queue_name: str
) -> None:
    sub = held_bidi_key(broker, queue_name)
    done = root.post(release_url(queue_name), {"key": encode_key(BIDI_KEY)}, follow=True)
    assert done.status_code == 200
    said = visible_text(done.content.decode())
    assert f"Released ordering key {BIDI_SHOWN}" in said
    assert "\u202e" not in said
    # and the release acted on the real key: its next message is in the input
    assert [d.payload["n"] for d in sub.fetch(count=10, block_ms=200)] == [1]


@pytest.mark.parametrize("hidden", HIDDEN)
def test_hidden_characters_in_a_message_page_and_a_dead_letter_show_as_escapes(
    root: Client, broker: Any, queue_name: str, hidden: str
) -> None:
    # Given a dead letter and a waiting message whose ordering key and error hide `hidden`
    key = f"cart{hidden}7"
    row = make_dead(broker, queue_name, {"n": 1}, key=key)
    DeadLetter.objects.filter(pk=row.pk).update(error_message=f"bad{hidden}card")
    broker.consumers.ensure(queue_name, "billing")
    entry_id = broker.publish(queue_name, {"n": 2}, key=key)
    escape = repr(hidden)[1:-1]
    # When staff open the dead letter and the message's page
    pages = [
        root.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk])),
        root.get(reverse("admin:redisq_django_deadletter_changelist")),
        root.get(
            reverse("admin:redisq_django_queue_live_message", args=[queue_name]),
            {"ref": f"log:{entry_id}"},
        ),
    ]
    # Then each answers, and shows the key with the character as its escape
    for response in pages:
        assert response.status_code == 200
        seen = visible_text(response.content.decode())
        assert f"cart{escape}7" in seen
        assert hidden not in seen
    assert f"bad{escape}card" in visible_text(pages[0].content.decode())


def test_the_overview_shows_an_unreadable_queue_name_as_escapes(
    root: Client, broker: Any, queue_name: str
) -> None:
    bad = f"\u202e{queue_name}.exe"
    broker.client.sadd("redisq:queues", bad)
    try:
        page = root.get(reverse("admin:redisq_django_overview_changelist"))
    finally:
        broker.client.srem("redisq:queues", bad)
    assert page.status_code == 200
    seen = visible_text(page.content.decode())
    assert f"\\u202e{queue_name}.exe" in seen
    assert "\u202e" not in seen


# -- a payload nested 100,000 deep --------------------------------------------------------


def test_a_deep_payload_shows_raw_with_a_note_on_the_message_page(
    root: Client, broker: Any, queue_name: str
) -> None:
    # Given a log entry another client wrote, its payload nested 100,000 deep
    broker.consumers.ensure(queue_name, "billing")
    real = broker.publish(queue_name, {"n": 1})
    [(_, fields)] = broker.client.xrange(broker.keys(queue_name).log, real, real)
    fields = {**fields, b"id": b"deep-1", b"payload": DEEP.encode(), b"headers": DEEP.encode()}
    entry_id = broker.client.xadd(broker.keys(queue_name).log, fields).decode()
    # When staff open its page
    page = root.get(
        reverse("admin:redisq_django_queue_live_message", args=[queue_name]),
        {"ref": f"log:{entry_id}"},
    )
    # Then it answers, with the payload as stored and a note why it is not laid out
    assert page.status_code == 200
    seen = visible_text(page.content.decode())
    assert "[[[[[[[[" in seen
    assert "nested too deep to lay out" in seen


def test_a_deep_payload_shows_raw_with_a_note_on_the_dead_letter_page(
    root: Client, broker: Any, queue_name: str
) -> None:
    row = make_dead(broker, queue_name, {"n": 1})
    DeadLetter.objects.filter(pk=row.pk).update(payload=DEEP, headers=DEEP)
    for url in (
        reverse("admin:redisq_django_deadletter_change", args=[row.pk]),
        reverse("admin:redisq_django_deadletter_changelist"),
    ):
        page = root.get(url)
        assert page.status_code == 200, url
        assert "[[[[[[[[" in visible_text(page.content.decode())
    detail = root.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    assert "nested too deep to lay out" in visible_text(detail.content.decode())


# -- a crafted key on the Release form ----------------------------------------------------

CRAFTED = {
    "missing": None,
    "empty": "",
    "not-json": "{{not json",
    "not-a-string": "123",
    "deep": "[" * 100_000 + "]" * 100_000,
    "lone-surrogate": json.dumps("\ud800"),
    "control": json.dumps("a\x00b\x1bc"),
    "huge": json.dumps("k" * 2_000_000),
}


@pytest.mark.parametrize("field", list(CRAFTED.values()), ids=list(CRAFTED))
def test_a_crafted_key_on_the_release_form_gets_a_clear_message(
    root: Client, broker: Any, queue_name: str, field: str | None
) -> None:
    held_bidi_key(broker, queue_name)
    data = {} if field is None else {"key": field}
    # The confirmation (GET) and the release (POST) never answer 500
    asked = root.get(release_url(queue_name), data)
    assert asked.status_code in (200, 404), asked.status_code
    done = root.post(release_url(queue_name), data, follow=True)
    assert done.status_code == 200
    said = visible_text(done.content.decode())
    assert (
        "No ordering key was named" in said
        or "is not an ordering key" in said
        or "is not held back" in said
    ), said[:2000]
    # And the held key is still held: nothing was released
    assert "Released ordering key" not in said
