"""Causes by error merge what differs only by identifiers (codes, UUIDs, hex ids,
numbers, quoted values, e-mail addresses, URL query values), as error trackers do, and
keep genuinely different errors apart; each cause shows its pattern and one raw message
(addresses and the whole corpus: test_error_corpus.py)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.core.dead_entry import normalise_error
from redisq_django.models import DeadLetter
from tests.support.console_data import failure, kill

pytestmark = pytest.mark.django_db

#: Variants of one error each, as they arrive from a handler.
SAME = {
    "sku": [f"unknown SKU X{i:04}" for i in range(1, 31)],
    "uuid": [f"customer {uuid.uuid4()} has no address" for _ in range(5)],
    "quoted": [f"no template named '{name}'" for name in ("receipt", "refund", "welcome x2")],
    "number": [f"amount {a} exceeds the limit of {b}" for a, b in ((12.5, 10), (300, 250))],
    "codes": [f"order {code} not found" for code in ("SKU-42A", "ord_9f3k", "b7e23ec29af2")],
    "email": [f"mailbox {m} is full" for m in ("ann@example.com", "bob.k+x@mail.example.org")],
    "url": [
        f"GET https://api.example.com/pay?order={o}&sig={s} failed"
        for o, s in ((1, "ab12"), (2, "zz"))
    ],
}
#: Errors that must stay apart from each other and from the ones above.
APART = ["connection refused", "connection reset by peer", "unknown SKU", "unknown warehouse"]


@pytest.mark.parametrize("kind", sorted(SAME))
def test_variants_of_one_error_have_one_key(kind: str) -> None:
    keys = {normalise_error(text) for text in SAME[kind]}
    assert len(keys) == 1, keys


def test_different_errors_keep_different_keys() -> None:
    keys = [normalise_error(t) for t in [*APART, *(v[0] for v in SAME.values())]]
    assert len(set(keys)) == len(keys), keys
    assert normalise_error("can't decode: don't retry") == "can't decode: don't retry"
    assert normalise_error("unknown SKU X0001") == "unknown SKU <id>"


def test_30_failures_of_one_sku_error_are_one_cause_with_a_sample(
    redisq_settings: Any, queue_name: str
) -> None:
    # Given 30 "unknown SKU X00nn", 3 UUID and 2 quoted variants, and 2 other errors
    broker = get_broker()
    broker.consumers.ensure(queue_name, "stock")
    texts = [*SAME["sku"], *SAME["uuid"][:3], *SAME["quoted"][:2], *APART[:2]]
    for i, text in enumerate(texts):
        kill(broker, queue_name, "stock", {"i": i}, failure(text))
    assert deadletters.sink(queue_name, "stock") == len(texts)

    # When staff open the causes page
    ops = Client()
    ops.force_login(User.objects.create_superuser("ops", password="pw"))
    url = reverse("admin:redisq_django_deadletter_causes")
    page = ops.get(url, {"queue": queue_name, "status__exact": "dead"})

    # Then each error is one cause, the largest first, with a raw message as its sample
    found = [(c.error_key, c.count) for c, _ in page.context["causes"]]
    assert found == [
        ("unknown SKU <id>", 30),
        ("customer <uuid> has no address", 3),
        ("no template named <str>", 2),
        ("connection refused", 1),
        ("connection reset by peer", 1),
    ]
    sku = page.context["causes"][0][0]
    assert sku.sample in SAME["sku"]
    assert sku.sample.encode() in page.content
    # And its Show link lists exactly its 30
    changelist = reverse("admin:redisq_django_deadletter_changelist")
    listing = ops.get(f"{changelist}?{page.context['causes'][0][1]}")
    assert listing.context["cl"].result_count == 30


def test_a_cause_shows_its_pattern_beside_one_message_as_written(
    redisq_settings: Any, queue_name: str
) -> None:
    # Given one error from three addresses, through the real sink
    broker = get_broker()
    broker.consumers.ensure(queue_name, "stock")
    texts = [
        f"Error 111 connecting to {address}. Connection refused."
        for address in ("10.0.0.5:6379", "10.0.3.17:6380", "[fe80::1%eth0]:6379")
    ]
    for i, text in enumerate(texts):
        kill(broker, queue_name, "stock", {"i": i}, failure(text))
    deadletters.sink(queue_name, "stock")
    ops = Client()
    ops.force_login(User.objects.create_superuser("ops", password="pw"))

    # When staff open the causes page
    url = reverse("admin:redisq_django_deadletter_causes")
    page = ops.get(url, {"queue": queue_name, "status__exact": "dead"})

    # Then the one cause shows its pattern, each placeholder marked as a variable...
    (cause,) = [c for c, _ in page.context["causes"]]
    assert cause.error_key == "Error 111 connecting to <ip>:<port>. Connection refused."
    html = page.content.decode()
    var = '<var class="redisq-var">&lt;{}&gt;</var>'
    assert (
        f"Error 111 connecting to {var.format('ip')}:{var.format('port')}. Connection refused."
        in html
    )
    # ...and one of its messages as written
    assert cause.sample in texts
    assert re.search(r'class="redisq-label">e\.g\.</span> ' + re.escape(cause.sample), html)

    # And a dead letter's page shows the pattern of its cause
    row = DeadLetter.objects.filter(queue=queue_name).first()
    assert row is not None
    detail = ops.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    shown = re.search(r'id="redisq-cause-pattern">(.*?)</p>', detail.content.decode(), re.S)
    assert shown and var.format("ip") in shown.group(1) and var.format("port") in shown.group(1)
