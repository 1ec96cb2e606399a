"""Ending poison messages from the live pages (issue 36, point 1): one message from its
page, a selection from a list, and a held key's holder; End makes dead letters at once,
Delete asks first and destroys. POST with CSRF only, the change permission (Delete: the
delete permission too), every ended id in the admin history. Real redis-server."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from redisq_django import deadletters
from redisq_django.models import DeadLetter
from tests.support.held_data import CONSUMER, Held, held_consumer
from tests.support.live_data import Live

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

REF = re.compile(r'<tr data-ref="([^"]+)"')
TICK = re.compile(r'<input type="checkbox" name="ref" value="([^"]+)" form="redisq-bulk"')


def page_url(queue: str, consumer: str | None = None, what: str = "") -> str:
    if consumer is None:
        return reverse(f"admin:redisq_django_queue_live{what}", args=[queue])
    return reverse(f"admin:redisq_django_consumer_live{what}", args=[queue, consumer])


def action_url(queue: str, consumer: str | None, action: str) -> str:
    if consumer is None:
        return reverse("admin:redisq_django_queue_live_action", args=[queue, action])
    return reverse("admin:redisq_django_consumer_live_action", args=[queue, consumer, action])


def dead_ids(queue: str, consumer: str) -> set[str]:
    deadletters.sink(queue, consumer)
    rows = DeadLetter.objects.filter(queue=queue, consumer=consumer, reason="ended")
    return set(rows.values_list("message_id", flat=True))


def test_a_selection_of_retries_is_ended_at_once_and_recorded(
    root: Client, broker: Any, made: Live
) -> None:
    # Given billing's retrying list, where each row can be ticked
    page = root.get(page_url(made.queue, "billing"), {"list": "retrying"}).content.decode()
    ticks = TICK.findall(page)
    assert sorted(t.rsplit(":", 1)[-1] for t in ticks) == sorted(made.retrying)
    assert 'id="redisq-end-selected"' in page and 'id="redisq-delete-selected"' in page

    # When staff tick both and press End (a GET changes nothing)
    url = action_url(made.queue, "billing", "end")
    assert root.get(url, {"ref": ticks}).status_code == 405
    response = root.post(url, {"ref": ticks}, follow=True)

    # Then both are billing's dead letters (reason ended), gone from the list, and the
    # history names every id
    assert "Ended 2 message(s)" in response.content.decode()
    assert dead_ids(made.queue, "billing") == set(made.retrying)
    page = root.get(page_url(made.queue, "billing"), {"list": "retrying"}).content.decode()
    assert REF.findall(page) == []
    (entry,) = LogEntry.objects.all()
    in_order = [t.rsplit(":", 1)[-1] for t in ticks]
    assert entry.get_change_message() == (
        f"Ended (dead letters now): 2 message(s): {', '.join(in_order)}"
    )
    # ... and email's copies are untouched
    assert dead_ids(made.queue, "email") == set()


def test_delete_asks_first_then_destroys_without_a_dead_letter(
    root: Client, broker: Any, made: Live
) -> None:
    page = root.get(page_url(made.queue), {"list": "delayed"}).content.decode()
    (first, *_rest) = [t for t in TICK.findall(page) if t.endswith(made.delayed[0])]
    url = action_url(made.queue, None, "delete")

    # The first POST shows what would go, and deletes nothing
    asked = root.post(url, {"ref": [first]})
    assert asked.status_code == 200
    text = asked.content.decode()
    assert 'id="redisq-confirm-ids"' in text and made.delayed[0] in text
    listed = root.get(page_url(made.queue), {"list": "delayed"}).content.decode()
    assert len(REF.findall(listed)) == 2

    # Confirmed, it is gone for good: no dead letter for anyone
    done = root.post(url, {"ref": [first], "confirmed": "yes"}, follow=True)
    assert "Deleted 1 message(s) for good" in done.content.decode()
    listed = root.get(page_url(made.queue), {"list": "delayed"}).content.decode()
    assert [r.rsplit(":", 1)[-1] for r in REF.findall(listed)] == [made.delayed[1]]
    assert dead_ids(made.queue, "billing") == dead_ids(made.queue, "email") == set()


def test_one_delayed_message_ended_from_its_page_is_a_dead_letter_of_each_consumer(
    root: Client, broker: Any, made: Live
) -> None:
    page = root.get(page_url(made.queue), {"list": "delayed"}).content.decode()
    ref = next(r for r in REF.findall(page) if r.endswith(made.delayed[1]))
    message = root.get(page_url(made.queue, what="_message"), {"ref": ref}).content.decode()
    assert 'id="redisq-end"' in message and 'id="redisq-delete"' in message
    root.post(action_url(made.queue, None, "end"), {"ref": ref})
    assert dead_ids(made.queue, "billing") == dead_ids(made.queue, "email") == {made.delayed[1]}


def test_a_held_keys_retrying_holder_is_ended_and_its_key_moves_on_in_order(
    root: Client, broker: Any, queue_name: str
) -> None:
    made: Held = held_consumer(broker, queue_name)
    page = root.get(page_url(queue_name, CONSUMER)).content.decode()
    # End holder is offered for the retrying and the queued holders, not the running one
    assert page.count('class="button redisq-end-holder"') == 2
    holder = made.holders["retry-me"]
    ref = re.search(rf'name="ref" value="(retry:[^"]*{holder})"', page)
    assert ref is not None
    root.post(action_url(queue_name, CONSUMER, "end"), {"ref": ref.group(1)})
    assert dead_ids(queue_name, CONSUMER) == {holder}
    # The key's next message is in the consumer's input now, holding it
    got = made.sub.fetch(count=100, block_ms=200)
    assert [d.id for d in got if d.key == "retry-me"] == [made.later["retry-me"][0]]


def test_end_needs_the_change_permission_and_delete_the_delete_permission_too(
    broker: Any, made: Live
) -> None:
    changer = User.objects.create_user("changer", password="pw", is_staff=True)
    changer.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_consumer", "view_queue", "change_consumer", "change_queue"]
        )
    )
    client = Client(enforce_csrf_checks=True)
    client.force_login(changer)
    listed = client.get(page_url(made.queue, "billing"), {"list": "retrying"}).content.decode()
    assert 'id="redisq-end-selected"' in listed and 'id="redisq-delete-selected"' not in listed
    ticks = TICK.findall(listed)
    # Without the CSRF token: refused
    assert client.post(action_url(made.queue, "billing", "end"), {"ref": ticks}).status_code == 403
    # Delete without the delete permission: refused, nothing gone
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', listed)
    assert token is not None
    form = {"ref": ticks, "confirmed": "yes", "csrfmiddlewaretoken": token.group(1)}
    assert client.post(action_url(made.queue, "billing", "delete"), form).status_code == 403
    again = client.get(page_url(made.queue, "billing"), {"list": "retrying"}).content.decode()
    assert len(REF.findall(again)) == 2
    # A viewer gets no boxes to tick
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_consumer", "view_queue"])
    )
    looking = Client()
    looking.force_login(viewer)
    seen = looking.get(page_url(made.queue, "billing"), {"list": "retrying"}).content.decode()
    assert TICK.findall(seen) == [] and "redisq-end-selected" not in seen


def test_messages_waiting_in_the_log_are_marked_for_their_consumer_and_never_run(
    root: Client, broker: Any, made: Live
) -> None:
    # Given billing's waiting list: its log rows can be ticked; its in-flight rows cannot
    page = root.get(page_url(made.queue, "billing"), {"list": "waiting"}).content.decode()
    ticks = [t for t in TICK.findall(page) if t.startswith("log:")]
    assert len(ticks) == len(made.waiting)
    in_flight = root.get(page_url(made.queue, "billing"), {"list": "in_flight"}).content.decode()
    assert TICK.findall(in_flight) == []

    # When staff tick two and press End
    chosen = ticks[1:3]
    response = root.post(action_url(made.queue, "billing", "end"), {"ref": chosen}, follow=True)

    # Then the page says truthfully what happens (marked, ended when read), the history too
    text = response.content.decode()
    assert "2 message(s) waiting in the log marked for billing" in text
    ids = made.waiting[1:3]
    (entry,) = LogEntry.objects.all()
    assert entry.get_change_message() == (
        "Ended before their consumers read them (dead letters (reason ended) when read, "
        f"never run): 2 message(s): {', '.join(ids)}; for billing"
    )
    # ... billing's next reads run the other waiting messages and end those two
    sub = broker.subscribe(made.queue, "billing", "worker-2")
    got = sub.fetch(count=100, block_ms=500)
    sub.ack(got)
    # (billing's retries may be due by now: they come too)
    assert {m.id for m in got} & set(made.waiting) == set(made.waiting) - set(ids)
    assert dead_ids(made.queue, "billing") == set(ids)
    # ... and email still receives them
    email = broker.subscribe(made.queue, "email", "e-1")
    assert set(ids) <= {m.id for m in email.fetch(count=100, block_ms=500)}


def test_a_waiting_message_is_deleted_from_its_page_after_asking(
    root: Client, broker: Any, made: Live
) -> None:
    ref = f"log:{made.waiting[0]}"
    message = root.get(page_url(made.queue, "billing", "_message"), {"ref": ref}).content.decode()
    assert 'id="redisq-end"' in message and 'id="redisq-delete"' in message
    url = action_url(made.queue, "billing", "delete")
    asked = root.post(url, {"ref": [ref]})
    assert asked.status_code == 200 and 'id="redisq-confirm-ids"' in asked.content.decode()
    done = root.post(url, {"ref": [ref], "confirmed": "yes"}, follow=True)
    assert "their workers delete them" in done.content.decode().lower()
    sub = broker.subscribe(made.queue, "billing", "worker-2")
    got = sub.fetch(count=100, block_ms=500)
    assert {m.id for m in got} & set(made.waiting) == set(made.waiting[1:])
    assert dead_ids(made.queue, "billing") == set()


def test_from_the_queues_log_a_message_is_marked_for_every_consumer_not_past_it(
    root: Client, broker: Any, made: Live
) -> None:
    # billing read the first six messages already; email nothing
    page = root.get(page_url(made.queue), {"list": "log"}).content.decode()
    ticks = TICK.findall(page)
    first = next(t for t in ticks if t == f"log:{made.in_flight[0]}")
    later = next(t for t in ticks if t == f"log:{made.waiting[0]}")
    text = root.post(
        action_url(made.queue, None, "end"), {"ref": [first, later]}, follow=True
    ).content.decode()
    assert "2 message(s) waiting in the log marked for billing, email" in text
    marked = {
        name: {i.decode() for i in broker.client.hkeys(broker.keys(made.queue).group(name).ended)}
        for name in ("billing", "email")
    }
    assert marked == {"billing": {made.waiting[0]}, "email": {made.in_flight[0], made.waiting[0]}}
