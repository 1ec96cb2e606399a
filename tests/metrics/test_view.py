"""The Django ``/redisq/metrics`` view: who may read it, and gauges equal to the state of
the queues in the real redis-server (and dead letters and pauses in the database)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.core import DeadReason, Failure, RetryPolicy
from redisq_django.models import Consumer, Queue
from tests.support.redis_server import RedisServer

TOKEN = "s3cret-token-for-the-metrics-view"
URL = "/redisq/metrics"

pytestmark = pytest.mark.django_db


@pytest.fixture
def metrics_settings(settings: Any, redis_url: str) -> Any:
    settings.REDISQ = {"URL": redis_url, "METRICS_TOKEN": TOKEN}
    return settings


def scrape(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the view, by (sample name, sorted labels)."""
    response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}", **headers})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name}{labels} missing; have {sorted(k for k in samples)[:20]}"
    return samples[key]


# -- who may read it -------------------------------------------------------------------


@pytest.mark.usefixtures("metrics_settings", "empty_redis")  # the view lists every queue
def test_a_scraper_with_the_token_reads_it_and_others_are_refused(client: Client) -> None:
    # Without credentials: 401 with a Bearer challenge, never a redirect to a login page
    anonymous = client.get(URL)
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert b"METRICS_TOKEN" in anonymous.content
    # A wrong token: 401
    assert client.get(URL, headers={"Authorization": "Bearer nope"}).status_code == 401
    # The token (scheme in any case): 200, the Prometheus text format
    for scheme in ("Bearer", "bearer"):
        ok = client.get(URL, headers={"Authorization": f"{scheme} {TOKEN}"})
        assert ok.status_code == 200
        assert b"redisq_redis_up 1.0" in ok.content
    # POST is not a read
    assert client.post(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


@pytest.mark.usefixtures("metrics_settings", "empty_redis")
def test_signed_in_users_need_the_view_queue_permission(client: Client) -> None:
    # Given a signed-in user without the permission: 403
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(URL).status_code == 403
    # Given the permission (what staff who see the queues in the admin have): 200
    user.user_permissions.add(Permission.objects.get(codename="view_queue"))
    client.force_login(User.objects.get(pk=user.pk))  # permissions are cached per object
    response = client.get(URL)
    assert response.status_code == 200
    assert b"redisq_redis_up 1.0" in response.content


@pytest.mark.usefixtures("empty_redis")
def test_without_a_token_setting_only_users_may_read(
    client: Client, settings: Any, redis_url: str
) -> None:
    settings.REDISQ = {"URL": redis_url}
    response = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 401
    assert b"Set REDISQ['METRICS_TOKEN']" in response.content
    client.force_login(User.objects.create_superuser("root", password="pw"))
    assert client.get(URL).status_code == 200


# -- the figures -----------------------------------------------------------------------


@pytest.mark.usefixtures("metrics_settings", "empty_redis")
def test_gauges_equal_the_state_of_the_queue(client: Client, queue_name: str) -> None:
    # Given a queue with consumers billing and mail, 5 messages and 1 delayed one
    broker = get_broker()
    q = queue_name
    for group in ("billing", "mail"):
        broker.consumers.ensure(q, group, "earliest")
    broker.publish_many(q, [{"n": i} for i in range(5)])
    broker.publish(q, {"later": True}, delay=3600)
    # billing: 2 fetched (one of them fails: waits 60 s for its retry), 3 not delivered,
    # one live instance
    slow_retry = RetryPolicy.from_seconds(
        max_retries=5, backoff=60, max_backoff=60, visibility_timeout=300
    )
    billing = broker.subscribe(q, "billing", "b-1", policy=slow_retry)
    fetched = billing.fetch(count=2, block_ms=0)
    assert len(fetched) == 2
    billing.fail(fetched[1], Failure("ValueError", "bad"))
    billing.heartbeat(60_000)
    # mail: all 5 fetched; 3 acked, one dead letter moved into the database, one dead
    # letter still in Redis; paused in the admin
    mail = broker.subscribe(q, "mail", "m-1")
    got = mail.fetch(count=10, block_ms=0)
    assert len(got) == 5
    mail.ack(got[:3])
    mail.dead_letter(got[3], Failure("KeyError", "x"), DeadReason.FAILED)
    assert deadletters.sink(q, "mail") == 1
    mail.dead_letter(got[4], Failure("KeyError", "y"), DeadReason.FAILED)
    row = Queue.objects.create(name=q)
    Consumer.objects.create(queue=row, name="mail", handler="x.y", paused=True)
    Consumer.objects.create(queue=row, name="billing", handler="x.z")

    # When Prometheus scrapes the view
    s = scrape(client)

    # Then every figure is the queue's
    assert sample(s, "redisq_redis_up") == 1
    assert sample(s, "redisq_queue_length", queue=q) == 5
    assert sample(s, "redisq_delayed_messages", queue=q) == 1
    assert sample(s, "redisq_published_messages_total", queue=q) == 5
    assert sample(s, "redisq_dropped_messages_total", queue=q) == 0
    b = {"queue": q, "consumer": "billing"}
    m = {"queue": q, "consumer": "mail"}
    assert sample(s, "redisq_backlog_messages", **b) == 3
    assert sample(s, "redisq_pending_messages", **b) == 1
    assert sample(s, "redisq_retrying_messages", **b) == 1
    assert sample(s, "redisq_instances_alive", **b) == 1
    assert sample(s, "redisq_dead_letters", **b) == 0
    assert sample(s, "redisq_consumer_paused", **b) == 0
    assert sample(s, "redisq_oldest_pending_age_seconds", **b) >= 0
    assert sample(s, "redisq_backlog_messages", **m) == 0
    assert sample(s, "redisq_pending_messages", **m) == 0
    assert sample(s, "redisq_retrying_messages", **m) == 0
    assert sample(s, "redisq_instances_alive", **m) == 0
    assert sample(s, "redisq_dead_letters", **m) == 2  # 1 row + 1 still in Redis
    assert sample(s, "redisq_consumer_paused", **m) == 1
    assert sample(s, "redisq_oldest_pending_age_seconds", **m) == 0
    assert sample(s, "redisq_oldest_undelivered_age_seconds", **m) == 0
    # ...and no label carries a message id
    ids = {msg.id for msg in got}
    assert not {v for key in s for _, v in key[1]} & ids


@pytest.mark.usefixtures("metrics_settings", "empty_redis")
def test_ages_grow_with_the_oldest_waiting_message(client: Client, queue_name: str) -> None:
    # Given a message published, then one delivered and not acked, 1.2 s ago
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing", "earliest")
    broker.publish_many(queue_name, [{"n": 1}, {"n": 2}])
    assert len(broker.subscribe(queue_name, "billing", "b").fetch(count=1, block_ms=0)) == 1
    time.sleep(1.2)

    # When scraped, Then both ages are at least that, and not absurdly more
    s = scrape(client)
    labels = {"queue": queue_name, "consumer": "billing"}
    assert 1.2 <= sample(s, "redisq_oldest_pending_age_seconds", **labels) < 60
    assert 1.2 <= sample(s, "redisq_oldest_undelivered_age_seconds", **labels) < 60


@pytest.mark.usefixtures("empty_redis")
def test_the_archive_lag_is_exported_with_history_on(
    client: Client, settings: Any, redis_url: str, queue_name: str
) -> None:
    settings.REDISQ = {"URL": redis_url, "METRICS_TOKEN": TOKEN, "HISTORY": True}
    get_broker().publish_many(queue_name, [{"n": i} for i in range(3)])
    assert sample(scrape(client), "redisq_archive_lag_messages", queue=queue_name) == 3


# -- a sick Redis ----------------------------------------------------------------------


def test_redis_stopped_gives_up_0_not_an_error(
    client: Client, settings: Any, volatile_redis_server: RedisServer
) -> None:
    # Given a Redis that is stopped
    settings.REDISQ = {"URL": volatile_redis_server.url, "METRICS_TOKEN": TOKEN}
    volatile_redis_server.stop()

    # When scraped, Then the scrape succeeds and says Redis is down, with no other figure
    s = scrape(client)
    assert sample(s, "redisq_redis_up") == 0
    assert not [k for k in s if k[0] != "redisq_redis_up"]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback socket that accepts connections and never answers (a hung Redis)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # the kernel completes handshakes; nothing ever reads or writes
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        listener.close()


def test_a_hung_redis_ends_the_scrape_with_up_0(
    client: Client, settings: Any, silent_server: str
) -> None:
    # Given a Redis that accepts connections and never answers
    settings.REDISQ = {"URL": silent_server, "METRICS_TOKEN": TOKEN}
    started = time.monotonic()

    # When scraped, Then the view gives up after its Redis timeout (2 s) and says so
    s = scrape(client)
    assert sample(s, "redisq_redis_up") == 0
    assert time.monotonic() - started < 10  # bounded, not hanging with the socket


def test_the_short_timeout_client_talks_to_the_same_redis(
    redis_client: redis.Redis, redisq_settings: Any
) -> None:
    from redisq_django.connection import get_broker, quick_client
    from redisq_django.metrics.views import REDIS_TIMEOUT_S

    short = quick_client(REDIS_TIMEOUT_S)
    kwargs = short.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == REDIS_TIMEOUT_S
    shared = get_broker().client.connection_pool.connection_kwargs
    assert kwargs["port"] == shared["port"]
    assert short.ping() is True


def test_a_cluster_unreachable_at_the_scrape_says_redis_is_down(rf: Any, settings: Any) -> None:
    from redisq_django.metrics.views import metrics
    from tests.support.redis_server import free_port

    settings.REDISQ = {
        "URL": f"redis://127.0.0.1:{free_port()}/0",
        "CLUSTER": True,
        "METRICS_TOKEN": "a-token-of-sixteen-chars",
    }
    request = rf.get("/metrics", HTTP_AUTHORIZATION="Bearer a-token-of-sixteen-chars")
    response = metrics(request)
    assert response.status_code == 200
    assert b"redisq_redis_up 0.0" in response.content


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"METRICS_TOKEN": "short"}, "METRICS_TOKEN must be None or a string of at least 16"),
        ({"METRICS_TOKEN": 12345678901234567}, "METRICS_TOKEN must be None or a string"),
        ({"TRACING": "yes"}, "TRACING must be True or False"),
    ],
)
def test_bad_metrics_settings_are_refused_by_name(
    settings: Any, redis_url: str, extra: dict[str, Any], says: str
) -> None:
    from redisq_django.conf import SettingsError, get_settings

    settings.REDISQ = {"URL": redis_url, **extra}
    with pytest.raises(SettingsError, match=says):
        get_settings()


@pytest.mark.cluster
def test_the_collector_reads_a_redis_cluster(redis_cluster: Any) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from redisq_django.core import Broker
    from redisq_django.metrics.gauges import QueueCollector

    # Given two queues (in different slots) on a 3-master cluster
    redis_cluster.flushall()
    client = redis_cluster.client()
    broker = Broker(client)
    for q in ("alpha", "omega"):
        broker.consumers.ensure(q, "billing", "earliest")
        broker.publish_many(q, [{"n": i} for i in range(3)])

    # When collected
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(connect=lambda: broker))
    text = generate_latest(registry).decode()

    # Then every figure is there, per queue
    s = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for f in text_string_to_metric_families(text)
        for x in f.samples
    }
    assert sample(s, "redisq_redis_up") == 1
    for q in ("alpha", "omega"):
        assert sample(s, "redisq_published_messages_total", queue=q) == 3
        assert sample(s, "redisq_backlog_messages", queue=q, consumer="billing") == 3


# -- records another client wrote --------------------------------------------------------


@pytest.mark.servers
@pytest.mark.usefixtures("metrics_settings", "empty_redis")
def test_a_bad_registry_member_costs_only_its_own_series(
    client: Client, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two real queues with a consumer and messages each...
    broker = get_broker()
    queues = [f"{queue_name}-a", f"{queue_name}-b"]
    for q in queues:
        broker.consumers.ensure(q, "billing", "earliest")
        broker.publish_many(q, [{"n": i} for i in range(3)])
    healthy = scrape(client)
    # ...and members of the queue registry another client wrote that are no queue name
    # (each names this test's queue: a process logs a member once, whichever test saw it)
    bad = [f"{queue_name} x", f"{{{queue_name}}}", f"\u202e{queue_name}.exe"]
    odd = b"\xff\xfe" + queue_name.encode()
    broker.client.sadd("redisq:queues", *bad, odd)

    # When Prometheus scrapes the view (twice)
    try:
        s = scrape(client)
        scrape(client)
    finally:  # the registry is shared by every test of the session
        broker.client.srem("redisq:queues", *bad, odd)

    # Then Redis is up, every series of the real queues is there with the same value,
    # and the bad members are counted, not exported
    assert sample(s, "redisq_redis_up") == 1
    assert sample(s, "redisq_unreadable_queues") == 4
    assert sample(healthy, "redisq_unreadable_queues") == 0
    for key, value in healthy.items():
        if key[0] not in ("redisq_unreadable_queues",) and "age_seconds" not in key[0]:
            assert s.get(key) == value, key
    for q in queues:
        assert sample(s, "redisq_backlog_messages", queue=q, consumer="billing") == 3
    labelled = {v for key in s for _, v in key[1]}
    assert not labelled & set(bad)
    # And each bad member is logged once, not at every scrape
    logged = [
        r.getMessage()
        for r in caplog.records
        if "is no queue name" in r.getMessage() and queue_name in r.getMessage()
    ]
    assert len(logged) == 4
    assert any(repr(f"{queue_name} x") in line for line in logged)


@pytest.mark.usefixtures("metrics_settings", "empty_redis")
def test_the_flow_control_gauges_equal_what_the_limits_hold(
    client: Client, queue_name: str
) -> None:
    # Given billing with 2 of its max_in_flight slots in use and its rate limit's tokens
    # given out 0.5 s ahead, and mail with no limit at all
    from redisq_django.core.limits import Rate, RateLimit, Slots

    broker = get_broker()
    q = queue_name
    for group in ("billing", "mail"):
        broker.consumers.ensure(q, group, "earliest")
    billing = broker.keys(q).group("billing")
    Slots(broker.client, broker.scripts, billing.slots, 3, 60_000).take("worker-1", 0, 2)
    RateLimit(broker.client, broker.scripts, billing.rate, Rate.parse("10/s", 5)).take(5)

    # When Prometheus scrapes the view
    s = scrape(client)

    # Then the gauges say so, and 0 for the consumer without limits
    b = {"queue": q, "consumer": "billing"}
    m = {"queue": q, "consumer": "mail"}
    assert sample(s, "redisq_slots_in_use", **b) == 2
    assert 0.3 < sample(s, "redisq_rate_limit_ahead_seconds", **b) <= 0.5
    assert sample(s, "redisq_slots_in_use", **m) == 0
    assert sample(s, "redisq_rate_limit_ahead_seconds", **m) == 0
