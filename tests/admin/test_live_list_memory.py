"""The live lists read only what they show: a 140-character preview of a 5 MB message
neither decodes nor JSON-parses it whole, and the page stays small."""

from __future__ import annotations

import re
import tracemalloc
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.core.operator import browse
from tests.support.live_data import Live, live_consumer

#: The size of each large message, bytes.
BIG = 5 * 1024 * 1024
PREVIEW = re.compile(r'<code class="redisq-preview">([^<]*)</code>')


# Another client (or a raised limit) may write what our publisher refuses by default
pytestmark = [pytest.mark.django_db, pytest.mark.site_broker(MAX_PAYLOAD_BYTES=2 * BIG)]


@pytest.fixture
def made(broker: Any, queue_name: str) -> Live:
    return live_consumer(broker, queue_name, waiting=0)


def big_payload() -> dict[str, Any]:
    """A payload of about :data:`BIG` bytes whose first characters are known."""
    return {"order": 7, "note": "é " * (BIG // 3)}


@pytest.mark.parametrize("where", ["delayed", "retrying", "waiting", "log"])
def test_a_5_mb_message_is_listed_with_its_preview_from_a_small_read(
    broker: Any, made: Live, queue_name: str, root: Client, where: str
) -> None:
    # Given a 5 MB message in the list (published delayed, or failed into a retry, or
    # waiting in the log)
    if where == "delayed":
        big_id = broker.publish(queue_name, big_payload(), delay=60)
    else:
        big_id = broker.publish(queue_name, big_payload())
    if where == "retrying":
        sub = broker.subscribe(queue_name, "billing", "worker-2")
        [got] = [m for m in sub.fetch(count=10, block_ms=500) if m.id == big_id]
        sub.fail(got, ValueError("too big"))
    url = reverse("admin:redisq_django_consumer_live", args=[queue_name, "billing"])
    if where == "log":
        url = reverse("admin:redisq_django_queue_live", args=[queue_name])
    # When the list is shown (memory traced)
    tracemalloc.start()
    try:
        response = root.get(url, {"list": where})
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then the page lists it with the start of its payload, cut to the preview's length,
    # the page stays small, and no more than the reply itself (and a copy) was held
    assert response.status_code == 200
    page = response.content.decode()
    assert big_id in page
    previews = [p for p in PREVIEW.findall(page) if "order" in p and "7" in p and "é é" in p]
    assert len(previews) == 1
    assert len(previews[0]) <= browse.PREVIEW_CHARS + 40  # + HTML escapes of its quotes
    assert previews[0].endswith("…")
    assert len(response.content) < 200_000
    assert peak < 2.5 * BIG, peak
    print(f"{where}: peak {peak / 2**20:.1f} MiB")
