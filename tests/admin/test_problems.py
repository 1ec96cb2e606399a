"""Problems first (issue 36, point 2): the overview opens on what is wrong — work with no
worker alive, work not moving, messages held back behind an ordering key, new dead
letters, Redis unreachable — above its charts, each line linking to where it is dealt
with; held-back messages show beside every backlog. Real redis-server."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.admin.overview import ConsumerLine, QueueLine
from redisq_django.admin.problems import NOT_MOVING_S, problems
from redisq_django.core.stats import ConsumerStats
from tests.support.held_data import CONSUMER, held_consumer
from tests.support.live_data import live_consumer

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

PROBLEM = re.compile(r'<li class="redisq-problem [^"]*" data-kind="([^"]+)" data-where="([^"]+)">')
LINE = re.compile(
    r'<li class="redisq-problem [^"]*" data-kind="([^"]+)" data-where="([^"]+)">(.*?)</li>', re.S
)
OVERVIEW = "admin:redisq_django_overview_changelist"


def text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_overview_opens_on_its_problems_each_with_where_to_act(
    root: Client, broker: Any, queue_name: str
) -> None:
    # Given a consumer with work and no worker, an ordered consumer with messages held
    # back, and a consumer with a new dead letter (and a worker: live_consumer's)
    live.clear()
    idle = f"{queue_name}-idle"
    broker.consumers.ensure(idle, "nobody")
    broker.publish_many(idle, [{"n": n} for n in range(3)])
    ledgers = f"{queue_name}-ledgers"
    held = held_consumer(broker, ledgers)
    shop = f"{queue_name}-shop"
    live_consumer(broker, shop)

    page = root.get(reverse(OVERVIEW)).content.decode()

    # Then the problems come first, before the charts and the table
    assert page.index('id="redisq-problems"') < page.index('class="redisq-trends"')
    found = PROBLEM.findall(page)
    assert (("no_worker", f"{idle}/nobody")) in found
    assert ("held_back", f"{ledgers}/{CONSUMER}") in found
    assert ("new_dead", f"{shop}/billing") in found
    kinds = [k for k, _ in found]
    assert kinds == sorted(
        kinds, key=["redis", "no_worker", "not_moving", "held_back", "new_dead"].index
    )
    # Each says what, in figures, and links to its page
    said = {
        (kind, where): item
        for kind, where, item in LINE.findall(page[page.index('id="redisq-problems"') :])
    }
    assert "3 messages wait and no worker is alive" in text(said["no_worker", f"{idle}/nobody"])
    held_count = sum(held.waiting.values())
    ledger_link = reverse("admin:redisq_django_consumer_live", args=[ledgers, CONSUMER])
    held_line = said["held_back", f"{ledgers}/{CONSUMER}"]
    assert f"{held_count} messages wait behind earlier messages" in text(held_line)
    assert f'href="{ledger_link}#redisq-held"' in held_line
    assert "1 new dead letter in the last hour." in text(said["new_dead", f"{shop}/billing"])

    # And the held-back messages show beside the ordered consumer's backlog in the table
    table = page[page.index('id="redisq-overview"') :]
    line = table[table.index(f'href="{ledger_link}"') :]
    line = line[: line.index("</tr>")]
    assert f"+{held_count} held back" in text(line)

    # And the JSON the page polls carries the same section (this test's problems: those
    # of tests running beside it on the server may come and go between the two reads)
    data = root.get(reverse("admin:redisq_django_overview_data")).json()
    ours = lambda problems: [p for p in problems if p[1].startswith(queue_name)]  # noqa: E731
    assert ours(PROBLEM.findall(data["html"]["problems"])) == ours(found)


def test_a_healthy_site_says_it_has_no_problems(root: Client, broker: Any, queue_name: str) -> None:
    live.clear()
    broker.consumers.ensure(queue_name, "fine")
    page = root.get(reverse(OVERVIEW)).content.decode()
    if PROBLEM.findall(page):  # another test's queues share the session's Redis
        assert (f"{queue_name}/fine") not in [w for _, w in PROBLEM.findall(page)]
    else:
        assert 'id="redisq-no-problems"' in page


def test_held_back_messages_show_beside_the_backlog_on_the_consumer_page(
    root: Client, broker: Any, queue_name: str
) -> None:
    live.clear()
    held = held_consumer(broker, queue_name)
    url = reverse("admin:redisq_django_consumer_live", args=[queue_name, CONSUMER])
    figure = re.search(r'id="redisq-fig-backlog".*?</dd>', root.get(url).content.decode(), re.S)
    assert figure is not None
    assert f"+{sum(held.waiting.values())} held back" in text(figure.group(0))
    queue_page = reverse("admin:redisq_django_queue_live", args=[queue_name])
    assert f"+{sum(held.waiting.values())} held back" in text(root.get(queue_page).content.decode())


def _line(stats: ConsumerStats, *, paused: bool = False) -> QueueLine:
    return QueueLine("orders", paused, None, [ConsumerLine("billing", None, stats, 0)])


def _stats(**figures: Any) -> ConsumerStats:
    base = dict(
        name="billing", lag=0, in_flight=0, waiting_retry=0, direct=0, dead=0,
        oldest_unacked_age_s=None, instances_alive=1, last_delivered_id="0-0",
    )  # fmt: skip
    return ConsumerStats(**{**base, **figures})


def test_work_that_waits_too_long_with_workers_alive_is_not_moving() -> None:
    slow = _stats(lag=40, oldest_undelivered_age_s=NOT_MOVING_S + 60)
    ((problem),) = problems([_line(slow)], "", {})
    assert problem.kind == "not_moving" and "the oldest for 6 min" in problem.text
    assert problems([_line(_stats(lag=40, oldest_undelivered_age_s=30))], "", {}) == []
    # A paused queue's waiting work is no problem: someone paused it
    assert problems([_line(slow, paused=True)], "", {}) == []
    # Redis unreachable comes first, whatever else
    assert [p.kind for p in problems([_line(slow)], "timed out", {})] == ["redis", "not_moving"]
