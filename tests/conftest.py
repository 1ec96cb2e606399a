"""Shared fixtures: real redis-server processes, never a shared/system Redis.

Fixtures fail (never skip) when no redis-server binary is available: run the
suite with ``make test``, which provides one (see .ci/ensure-redis.sh).

Redis: one server for the session, *not* flushed between tests. Each test uses queue
names of its own (the ``queue_name`` fixture), so it stays correct whatever other tests
left behind (and could share the server with tests running in parallel). The few tests
that need an empty server (they read every queue, or use a queue fixed in code) ask for
``empty_redis`` explicitly and say why.

PostgreSQL: tests marked ``django_db(databases=[..., "pg"])`` run against a private
PostgreSQL cluster, started only when at least one such test is selected (so
``pytest tests/core`` never needs PostgreSQL); see ``django_db_modify_db_settings``.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from tests.support import cpu_report, spark_classes
from tests.support.postgres_server import BIN_ENV as PG_BIN_ENV
from tests.support.postgres_server import PostgresServer, find_pg_bin
from tests.support.redis_server import (
    CLI_ENV,
    SERVER_ENV,
    RedisClusterHandle,
    RedisServer,
    find_redis_cli,
    find_redis_server,
    start_cluster,
)


@pytest.fixture(scope="session")
def redis_server_binary() -> str:
    binary = find_redis_server()
    if binary is None:
        pytest.fail(
            f"No redis-server binary found (checked ${SERVER_ENV} and PATH). "
            "Run the tests with `make test`, which installs or locates one, "
            f"or set {SERVER_ENV}=/path/to/redis-server.",
            pytrace=False,
        )
    return binary


@pytest.fixture(scope="session")
def redis_cli_binary(redis_server_binary: str) -> str:
    cli = find_redis_cli(redis_server_binary)
    if cli is None:
        pytest.fail(
            f"No redis-cli binary found (checked ${CLI_ENV}, next to {redis_server_binary} "
            "and PATH). Run the tests with `make test`, or set "
            f"{CLI_ENV}=/path/to/redis-cli.",
            pytrace=False,
        )
    return cli


@pytest.fixture(scope="session")
def redis_server(
    redis_server_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RedisServer]:
    """One redis-server for the whole session, never flushed but by ``empty_redis``."""
    server = RedisServer(redis_server_binary, tmp_path_factory.mktemp("redis-session"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def _session_redis(redis_server: RedisServer) -> RedisServer:
    if not redis_server.running:  # a test may have broken it; bring it back
        redis_server.restart()
    return redis_server


@pytest.fixture
def empty_redis(_session_redis: RedisServer) -> RedisServer:
    """The session server after FLUSHALL, for the few tests that need an *empty* server
    (they list every queue, or test these fixtures); each use says why in a comment.
    Request it before anything writes, e.g. ``@pytest.mark.usefixtures("empty_redis")``."""
    with _session_redis.client() as conn:
        conn.flushall()
    return _session_redis


@pytest.fixture
def redis_client(_session_redis: RedisServer) -> Iterator[redis.Redis]:
    """A bytes client on the session server, *not* flushed: other tests' queues are
    there too, so use queue names of your own (``queue_name``), or ``empty_redis``."""
    client = _session_redis.client(decode_responses=False)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def redis_url(_session_redis: RedisServer) -> str:
    """URL of the session server, *not* flushed (see ``redis_client``)."""
    return _session_redis.url


CORE_TESTS = Path(__file__).parent / "core"


BROWSER_TESTS = Path(__file__).parent / "browser"


#: The Spark files that take longest (minutes each in ``make test``'s slowest list): they
#: start first, so that none of them is what the run waits for at its end.
LONGEST_SPARK_FILES = frozenset(
    {
        "test_readme_spark.py",
        "test_cluster_parity.py",
        "test_resilience.py",
        "test_archive_signals.py",
        "test_archive_restarts.py",
        "test_archives_named.py",
        "test_archive_starved.py",
        "test_archive.py",
    }
)


#: Fixtures through which a test reaches a server: every server a test starts is started
#: from ``redis_server_binary``; ``broker`` asks for ``redis_client`` at run time, which
#: the fixture closure does not show.
_SERVER_FIXTURES = frozenset({"redis_server_binary", "broker"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every core test that talks to a server runs in each lane of the server matrix
    # (``make test``); the other tests that do are marked ``servers`` where they stand.
    # A core test that starts no server (codecs, parsers, the type check) passes or
    # fails alike on every server: its lanes' runs were ~a third of each lane's tests.
    for item in items:
        if CORE_TESTS in item.path.parents and _SERVER_FIXTURES & set(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.servers)
    items[:] = _in_running_order(items)


def _in_running_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The collected tests, a file's tests kept together and in their order, files in
    the order the xdist processes should take them (``make test`` hands out whole files
    in this order, ``--dist loadfile --no-loadscope-reorder``):

    1. the long files first, those marked ``spark`` taking turns with the other ``slow``
       ones: a Spark file started last kept one process busy for minutes after the
       others had finished (xdist's own order, most tests first, put them last), and
       taking turns keeps about half the processes off Spark's JVMs at any time;
    2. then the rest, as collected;
    3. the browser tests last: pytest-playwright's sync API keeps an event loop running
       in the main thread until the session ends, and every later test that calls
       asyncio.run() (the async client, the async pipelines) would be refused with
       "cannot be called from a running event loop".
    """
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    spark, slow, rest, browser = [], [], [], []
    for path, tests in files.items():
        if BROWSER_TESTS in path.parents:
            browser.append(tests)
        elif any(test.get_closest_marker("spark") for test in tests):
            spark.append(tests)
        elif any(test.get_closest_marker("slow") for test in tests):
            slow.append(tests)
        else:
            rest.append(tests)
    spark.sort(key=lambda tests: tests[0].path.name not in LONGEST_SPARK_FILES)
    long_first = [f for pair in itertools.zip_longest(spark, slow) for f in pair if f]
    return [test for tests in (*long_first, *rest, *browser) for test in tests]


@pytest.fixture(autouse=True)
def _redisq_logger_restored() -> Iterator[None]:
    # runconsumer called in-process (call_command) gives a "redisq" logger without
    # handlers a stderr handler of its own and stops it propagating, as a command should;
    # in a test that would hide its lines from caplog (attached to the root), in that test
    # and every later one of the xdist process. A handler that does nothing tells it the
    # logging is configured already; the logger's state is put back after each test.
    logger = logging.getLogger("redisq")
    saved = (logger.level, list(logger.handlers), logger.propagate)
    logger.handlers[:] = [logging.NullHandler()]
    logger.propagate = True
    yield
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]
    logger.propagate = saved[2]


@pytest.fixture(autouse=True)
def _browser_tests_get_an_empty_redis(request: pytest.FixtureRequest) -> None:
    # tests/browser (kept as it is) publishes to the fixed queues "shop" and "audit" and
    # its overview lists every queue: give it an empty server.
    if BROWSER_TESTS in request.node.path.parents:
        request.getfixturevalue("empty_redis")


_QUEUE_SLUG = re.compile(r"[^A-Za-z0-9]+")
_queue_counter = itertools.count(1)


@pytest.fixture
def queue_name(request: pytest.FixtureRequest) -> str:
    """A queue name unique to this test (and to this session): a slug of the test's name,
    a counter and 6 random hex digits, e.g. ``c1-fan-out-7-3fa09c``. Tests use it instead
    of fixed names so that they need no FLUSHALL and could share a server in parallel.

    More queues of the same test: derive them, ``f"{queue_name}.mail"`` (names may be up
    to 100 characters; this one is at most 64).
    """
    slug = _QUEUE_SLUG.sub("-", request.node.name.removeprefix("test_")).strip("-")[:48]
    return f"{slug or 'q'}-{next(_queue_counter)}-{secrets.token_hex(3)}"


@pytest.fixture
def redisq_settings(settings: Any, redis_url: str) -> Any:
    """Django settings with REDISQ pointing at the session server (not flushed).

    The admin's reads wait 2 s, not the default 0.5 s: on a CI machine running three test
    workers on two cores, a healthy server's answer took longer and a page showed "?"
    (the tests of a Redis that is down or hung set their own timeout)."""
    settings.REDISQ = {"URL": redis_url, "ADMIN_REDIS_TIMEOUT": 2.0}
    return settings


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(cpu_report.REPORT_ENV):  # where the suite's CPU goes, test by test
        config.pluginmanager.register(cpu_report, "redisq-cpu-report")
    # The JVM options of every Spark JVM of the run (tests/support/spark_classes.py), set
    # before the test processes start: they inherit them, and so does every command a
    # test runs. A run that selects no Spark test makes no class archive.
    if "SPARK_SUBMIT_OPTS" not in os.environ:
        no_spark = "not spark" in (config.option.markexpr or "")
        os.environ["SPARK_SUBMIT_OPTS"] = spark_classes.jvm_options(may_make=not no_spark)
    # The markers the broker fixture reads (defined here, beside it).
    config.addinivalue_line(
        "markers",
        "core_config(**fields): the CoreConfig of the broker fixture; queue_partitions=K "
        "gives the test's queue K partitions",
    )
    config.addinivalue_line(
        "markers",
        "site_broker(**REDISQ): the broker fixture is the site's (connection.get_broker()), "
        "with these REDISQ settings besides the session server's URL; queue_partitions=K "
        "gives the test's queue K partitions",
    )


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> Broker:
    """The broker a test publishes, consumes and looks with, on the session server (not
    flushed: use queue names of your own, ``queue_name``).

    - By default, a core ``Broker`` on ``redis_client`` with the default ``CoreConfig``.
      A module or test that needs another says so with the closest marker
      ``@pytest.mark.core_config(**fields)``, e.g. ``core_config(poll_interval_ms=20)``
      (fetches that wait 20 ms, not the default, when nothing is due).
    - A test of the Django layer marks itself ``site_broker`` and gets the site's broker
      (``connection.get_broker()``: what publishing, the admin and the commands use) with
      ``REDISQ`` pointing at the session server (``redisq_settings``); the marker's
      keywords are more ``REDISQ`` settings, e.g. ``site_broker(REPLAY_WINDOW=0)``.

    With either marker, ``queue_partitions=K`` gives the test's queue (``queue_name``) K
    partitions.
    """
    site = request.node.get_closest_marker("site_broker")
    if site is not None:
        settings = request.getfixturevalue("redisq_settings")
        more = dict(site.kwargs)
        if "queue_partitions" in more:
            queue = request.getfixturevalue("queue_name")
            more["PARTITIONS"] = {queue: more.pop("queue_partitions")}
        if more:
            settings.REDISQ = {**settings.REDISQ, **more}
        from redisq_django.connection import get_broker

        return get_broker()
    marker = request.node.get_closest_marker("core_config")
    fields = dict(marker.kwargs) if marker is not None else {}
    if "queue_partitions" in fields:
        queue = request.getfixturevalue("queue_name")
        fields["partitions"] = {queue: fields.pop("queue_partitions")}
    return Broker(request.getfixturevalue("redis_client"), CoreConfig(**fields))


@pytest.fixture
def fresh_redis_server(redis_server_binary: str, tmp_path: Path) -> Iterator[RedisServer]:
    """A private server for this test only (safe to kill/restart), AOF fsync always."""
    server = RedisServer(
        redis_server_binary,
        tmp_path / "redis-fresh",
        extra_args=("--appendonly", "yes", "--appendfsync", "always"),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def volatile_redis_server(redis_server_binary: str, tmp_path: Path) -> Iterator[RedisServer]:
    """A private server for this test only, without persistence (a restart empties it):
    safe to fill up, make read-only, stop or restart."""
    server = RedisServer(redis_server_binary, tmp_path / "redis-volatile")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster(
    redis_server_binary: str,
    redis_cli_binary: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RedisClusterHandle]:
    """A 3-master Redis Cluster, started only when a test requests it."""
    cluster = start_cluster(
        redis_server_binary, redis_cli_binary, tmp_path_factory.mktemp("redis-cluster")
    )
    try:
        yield cluster
    finally:
        cluster.stop()


# ---------------------------------------------------------------------------
# PostgreSQL (the "pg" database alias of tests/settings.py)
# ---------------------------------------------------------------------------

PG_ALIAS = "pg"


def _wants_postgres(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("django_db")
    if marker is None:
        return False
    databases = marker.kwargs.get("databases")
    return databases == "__all__" or (databases is not None and PG_ALIAS in databases)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster for the session (initdb + pg_ctl on a free port)."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.fail(
            f"No PostgreSQL initdb/pg_ctl found (checked ${PG_BIN_ENV}, "
            "/usr/lib/postgresql/*/bin and PATH). Run the tests with `make test`, which "
            "installs Debian's postgresql package when missing, or set "
            f"{PG_BIN_ENV}=/path/to/postgresql/bin.",
            pytrace=False,
        )
    server = PostgresServer(bin_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
    request: pytest.FixtureRequest,
) -> None:
    """pytest-django calls this before it creates the test databases: when a selected
    test uses the "pg" alias, start PostgreSQL and point that alias at it."""
    if not any(_wants_postgres(item) for item in request.session.items):
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    from django.db import connections

    # The same dict as settings.DATABASES["pg"], which the connections read.
    connections.settings[PG_ALIAS].update(server.django_settings())
