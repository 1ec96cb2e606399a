"""Long queue and consumer names in a real browser, at 1,280 px and 390 px: wherever a
name wraps (the overview's table, the queue and consumer lists, a live page's heading)
its text breaks only after a separator (``.`` ``-`` ``_`` ``/``), never mid-word, and
the pages still fit their width; screenshots in test-artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Locator, Page

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.models import Consumer, Queue
from tests.support.browser_pages import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SEPARATORS = "./-_:"
WIDTHS = {"1280": {"width": 1280, "height": 900}, "390": {"width": 390, "height": 844}}

#: The characters before each line break of an element's text, as laid out: each
#: character's box, read through a Range, starts a new line when it sits lower.
LINE_BREAKS = """el => {
  const chars = [];
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    for (let i = 0; i < n.data.length; i++) {
      const r = document.createRange();
      r.setStart(n, i); r.setEnd(n, i + 1);
      const box = r.getClientRects()[0];
      if (box && n.data[i].trim()) { chars.push([n.data[i], box.top, box.bottom]); }
    }
  }
  const breaks = [];
  for (let i = 1; i < chars.length; i++) {
    if (chars[i][1] >= chars[i - 1][2] - 1) {
      breaks.push(chars.slice(0, i).map(c => c[0]).join(""));
    }
  }
  return breaks;
}"""


def breaks(element: Locator) -> list[str]:
    """The text of ``element`` up to each place it wraps."""
    found: list[str] = element.evaluate(LINE_BREAKS)
    return found


@pytest.fixture
def names(redisq_settings: Any, queue_name: str) -> dict[str, str]:
    """Three queues (a long name, and two an operator would meet) with a consumer each."""
    live.clear()
    tag = queue_name.rsplit("-", 1)[1]
    made = {
        "long": f"tasks.reports.high-priority.eu-west-1.nightly-rollup_v2.archive.{tag}",
        "reports": f"tasks.reports.high.{tag}",
        "orders": f"orders-eu-west.{tag}",
    }
    broker = get_broker()
    for name in made.values():
        queue = Queue.objects.create(name=name)
        Consumer.objects.create(queue=queue, name="invoicing_eu-west", handler="shop.invoicing")
        broker.consumers.ensure(name, "invoicing_eu-west")
    return made


def test_long_queue_names_wrap_only_after_a_separator(
    page: Page, live_server: Any, ops: User, names: dict[str, str], artifacts: Path
) -> None:
    log_in(page, live_server, ops)
    pages = {
        "overview": reverse("admin:redisq_django_overview_changelist"),
        "queues": reverse("admin:redisq_django_queue_changelist"),
        "consumers": reverse("admin:redisq_django_consumer_changelist"),
        "live": reverse("admin:redisq_django_queue_live", args=[names["long"]]),
    }
    wrapped = 0
    for size, viewport in WIDTHS.items():
        page.set_viewport_size(viewport)
        for where, url in pages.items():
            # When staff open the page at this width
            page.goto(live_server.url + url)
            shown = (
                [page.locator("#content h1")]
                if where == "live"
                else [page.locator("a", has_text=n).first for n in names.values()]
            )
            for element in shown:
                # Then each name that wraps does so right after a separator
                for before in breaks(element):
                    assert before[-1] in SEPARATORS, (size, where, before)
                    wrapped += 1
            # ... and the page still fits its width
            width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], (size, where, width)
            page.screenshot(path=str(artifacts / f"names-{where}-{size}.png"), full_page=True)
        if size == "1280":
            # With room, a name does not wrap at all
            orders = reverse("admin:redisq_django_queue_live", args=[names["orders"]])
            page.goto(live_server.url + orders)
            assert breaks(page.locator("#content h1")) == []
    assert wrapped  # the long name did wrap somewhere: the test looked at real breaks
