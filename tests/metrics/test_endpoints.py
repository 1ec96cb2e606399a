"""Both metrics endpoints scraped over HTTP from real processes: ``runconsumer
--metrics-port`` (one process, and ``--processes 2`` under the supervisor, across a child
killed and restarted) and the Django view served by ``runserver``, against the real
redis-server; values parsed with prometheus-client's parser must equal what was
published, handled and failed.

The consumer is ``metered/counted`` (tests/faultapp/consumers.py): max_retries 1, so a
poison message fails twice (retried once, then dead).
"""

# ruff: noqa: F811

from __future__ import annotations

import os
import re
import signal
import socket
import urllib.request
from collections.abc import Iterator

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from redisq_django.core import Broker

# The fault tests' fixtures: a migrated SQLite copy per test, worker processes killed at
# teardown (imported fixtures are shadowed by the test arguments of the same name).
from tests.support.worker_fixtures import db_file, migrated_db, workers  # noqa: F401
from tests.support.workers import (
    WorkerProcess,
    Workers,
    read_deliveries,
    wait_for,
    wait_ids,
)

pytestmark = [
    pytest.mark.slow,
    # Fixed queue names (declared in code): each test starts on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]

QUEUE, GROUP = "metered", "counted"
LABELS = {"queue": QUEUE, "consumer": GROUP}
TOKEN = "end-to-end-metrics-token"
METRICS_URL = re.compile(r"metrics(?: \(all processes\))?: (http://\S+)")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, token: str | None = None) -> Samples:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def get(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def endpoint(worker: WorkerProcess) -> str:
    """The URL the worker (or supervisor) printed for its metrics."""
    found = wait_for(
        lambda: METRICS_URL.search(worker.stdout),
        timeout=30,
        what="the metrics URL in the banner",
        describe=worker.tail,
    )
    url = found.group(1)
    assert url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
    return url


def wait_counts(url: str, **expected: float) -> Samples:
    """Scrape until each ``outcome=value`` of redisq_messages_total is reached (the
    worker flushes every second)."""

    def reached() -> Samples | None:
        s = scrape(url)
        ok = all(
            get(s, "redisq_messages_total", outcome=k, **LABELS) == v for k, v in expected.items()
        )
        return s if ok else None

    return wait_for(
        reached,
        timeout=60,
        what=f"redisq_messages_total {expected}",
        interval=0.3,
        describe=lambda: str(
            {k: get(scrape(url), "redisq_messages_total", outcome=k, **LABELS) for k in expected}
        ),
    )


def test_one_worker_serves_counts_equal_to_what_it_handled(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a worker with --metrics-port 0 (a free port, printed in its banner)
    worker = workers.start(QUEUE, "--metrics-port", "0").wait_ready()
    url = endpoint(worker)

    # When 20 good and 3 poison messages are published and handled
    good = broker.publish_many(QUEUE, [{"n": i} for i in range(20)])
    broker.publish_many(QUEUE, [{"poison": True}] * 3)
    wait_ids(redis_client, QUEUE, GROUP, good, timeout=60)

    # Then the endpoint reports exactly: 20 handled, 3 retried, 3 dead, 6 failed runs
    s = wait_counts(url, handled=20, retried=3, dead=3)
    assert get(s, "redisq_messages_total", outcome="lost", **LABELS) == 0
    assert get(s, "redisq_handler_failures_total", **LABELS) == 6
    assert get(s, "redisq_messages_reclaimed_total", **LABELS) == 0
    assert get(s, "redisq_handler_duration_seconds_count", **LABELS) == 26
    assert get(s, "redisq_message_latency_seconds_count", **LABELS) == 20
    # ...along with the process's own metrics (the global registry is served)
    assert get(s, "process_cpu_seconds_total") is not None
    assert len(read_deliveries(redis_client, QUEUE, GROUP)) == 26

    worker.send(signal.SIGTERM)
    assert worker.wait_exit(60) == 0


def _children(supervisor: WorkerProcess) -> dict[int, int]:
    started = re.compile(r"(?:Started|Restarted) worker process (\d+)/\d+ \(pid (\d+)\)")
    return {int(n): int(pid) for n, pid in started.findall(supervisor.stderr)}


def test_the_supervisor_serves_the_sum_of_its_processes_across_a_restart(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given --processes 2 --metrics-port 0: the supervisor serves, its children count
    supervisor = workers.start(QUEUE, "--processes", "2", "--metrics-port", "0")
    url = endpoint(supervisor)
    wait_for(
        lambda: supervisor.stdout.count("redisq worker") == 2,
        timeout=60,
        what="2 worker processes",
        describe=supervisor.tail,
    )
    first = _children(supervisor)
    found = re.search(r"\(files in (\S+)\)", supervisor.stdout)
    assert found is not None, supervisor.stdout
    directory = found.group(1)

    # When 60 messages are handled by the two processes
    ids = broker.publish_many(QUEUE, [{"n": i} for i in range(60)])
    wait_ids(redis_client, QUEUE, GROUP, ids, timeout=60)

    # Then the endpoint reports their sum: 60 handled, from each process's own files
    wait_counts(url, handled=60)
    pids = {d.pid for d in read_deliveries(redis_client, QUEUE, GROUP)}
    assert pids <= set(first.values())
    files = os.listdir(directory)
    assert {f"counter_{pid}.db" for pid in first.values()} <= set(files), files

    # When one child is killed (SIGKILL: no chance to flush), restarted, and 10 more
    # messages are handled
    victim = first[1]
    os.kill(victim, signal.SIGKILL)
    wait_for(
        lambda: (
            _children(supervisor).get(1) not in (None, victim)
            and supervisor.stdout.count("redisq worker") == 3
        ),
        timeout=60,
        what="child 1 restarted and running",
        describe=supervisor.tail,
    )
    more = broker.publish_many(QUEUE, [{"n": i} for i in range(10)])
    wait_ids(redis_client, QUEUE, GROUP, more, timeout=60)

    # Then the counter still adds up: what the killed process had flushed stays counted
    # (its file stays), the new one's adds in. A kill loses at most its last second of
    # figures; none is lost here, as the killed process had been idle for more than that.
    s = wait_counts(url, handled=70)
    assert get(s, "redisq_message_latency_seconds_count", **LABELS) == 70

    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(90) == 0, supervisor.tail(60)
    # ...and the run's multiprocess directory is gone with the supervisor
    assert not os.path.exists(directory)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def web(workers: Workers) -> Iterator[str]:
    """``manage.py runserver`` on the workers' database and Redis; its base URL."""
    port = _free_port()
    workers.extra_env["REDISQ_TEST_METRICS_TOKEN"] = TOKEN
    server = workers.start_command("runserver", f"127.0.0.1:{port}", "--noreload")
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(f"{base}/redisq/metrics", timeout=2)
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except OSError:
            return False
        return False

    wait_for(answers, timeout=60, what="runserver to answer", describe=server.tail)
    yield base


def test_the_django_view_reports_the_queue_as_the_worker_left_it(
    workers: Workers, broker: Broker, redis_client: redis.Redis, web: str
) -> None:
    # Given 15 good and 2 poison messages handled by a worker (its dead letters moved
    # into the database it shares with the web server)
    worker = workers.start(QUEUE, "--metrics-port", "0").wait_ready()
    good = broker.publish_many(QUEUE, [{"n": i} for i in range(15)])
    broker.publish_many(QUEUE, [{"poison": True}] * 2)
    wait_ids(redis_client, QUEUE, GROUP, good, timeout=60)
    wait_counts(endpoint(worker), handled=15, dead=2)

    # When Prometheus scrapes the Django view (with the bearer token)
    def settled() -> Samples | None:
        s = scrape(f"{web}/redisq/metrics", TOKEN)
        return s if get(s, "redisq_dead_letters", **LABELS) == 2 else None

    s = wait_for(settled, timeout=30, what="2 dead letters in the view", interval=0.3)

    # Then it reports what was published and what is left: nothing waiting or in flight,
    # 2 dead letters, one live instance (concurrency 1), the worker running
    assert get(s, "redisq_redis_up") == 1
    assert get(s, "redisq_published_messages_total", queue=QUEUE) == 17
    assert get(s, "redisq_queue_length", queue=QUEUE) == 17  # kept for replay
    assert get(s, "redisq_backlog_messages", **LABELS) == 0
    assert get(s, "redisq_pending_messages", **LABELS) == 0
    assert get(s, "redisq_retrying_messages", **LABELS) == 0
    assert get(s, "redisq_instances_alive", **LABELS) == 1
    assert get(s, "redisq_consumer_paused", **LABELS) == 0

    # When the worker stops, and 4 more messages are published
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(60) == 0
    broker.publish_many(QUEUE, [{"n": i} for i in range(4)])

    # Then the view shows them as backlog with no instance alive
    s = scrape(f"{web}/redisq/metrics", TOKEN)
    assert get(s, "redisq_backlog_messages", **LABELS) == 4
    assert get(s, "redisq_instances_alive", **LABELS) == 0
    assert get(s, "redisq_oldest_undelivered_age_seconds", **LABELS) is not None


def test_a_taken_port_is_one_clear_line(workers: Workers) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = workers.run("runconsumer", QUEUE, "--metrics-port", str(port), "--burst")
    assert result.returncode != 0
    assert f"Cannot serve metrics on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
