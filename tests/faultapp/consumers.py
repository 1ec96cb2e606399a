"""Consumers driven by the fault tests through real ``runconsumer`` processes.

Their queues (``faults``, ``graceful``, ``chaos``, ``liveness``, ``frozen``, ``together``,
``firsthour``, ``pills``, ``metered``, ``ordered``, ``aordered``, ``handback``,
``ahandback``, ``ohandback``, ``timed``, ``paced``, ``narrow``, ``onceq``, ``pgonceq``)
are used by no other test (tests/faults/test_faults.py, tests/faults/test_liveness.py,
tests/faults/test_supervisor.py, tests/faults/test_start_together.py,
tests/faults/test_first_deploy.py, tests/metrics/test_endpoints.py,
tests/faults/test_ordered_chaos.py, tests/faults/test_grace_handback.py,
tests/faults/test_time_limit_faults.py, tests/faults/test_flow_faults.py,
tests/faults/test_exactly_once_faults.py).

Every handler appends one line per delivery, at the moment it starts, to the Redis
list ``redisqtest:<queue>:<consumer>:deliveries``::

    "<message id> <attempts> <pid>"

and, for a delivery that returns normally, one line to ``...:done`` just before it
returns. The payload (a dict) says what to do:

* ``{"sleep": s}``: sleep ``s`` seconds before returning;
* ``{"sleep_first": s}``: the same on the message's first recorded delivery only;
* ``{"fail": true}`` or ``{"poison": true}``: raise (every time);
* ``{"exit": code}``: end the process at once with ``os._exit(code)`` (a message that
  kills its process, every time);
* ``{"raise": "KeyboardInterrupt"}`` or ``{"raise": "SystemExit"}``: raise that
  ``BaseException`` (every time).

Recording uses a plain redis-py client built from ``settings.REDISQ["URL"]`` (the
server the worker consumes from); when Redis is away the handler raises, which the
worker treats as a failure to retry, like any real handler.

The ``async def`` twins (queues ``afaults``, ``agraceful``, ``achaos``) do the same
without blocking the worker's event loop: they record with the loop's own asyncio
client (the one ``apublish`` uses) and sleep with ``asyncio.sleep``; each runs up to 10
handlers in flight.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
from typing import Any

import redis
from django.conf import settings

from redisq_django import consumer
from redisq_django.connection import loop_client
from redisq_django.core.message import Message

KEY_PREFIX = "redisqtest"


class PoisonError(RuntimeError):
    """Raised by a handler on a ``{"fail": true}`` / ``{"poison": true}`` payload."""


def deliveries_key(queue: str, name: str) -> str:
    """The list recording each delivery to logical consumer ``name`` of ``queue``."""
    return f"{KEY_PREFIX}:{queue}:{name}:deliveries"


def done_key(queue: str, name: str) -> str:
    """The list recording each delivery whose handler returned normally."""
    return f"{KEY_PREFIX}:{queue}:{name}:done"


@functools.cache
def _client() -> redis.Redis:
    if settings.REDISQ.get("CLUSTER"):  # the cluster chaos test
        return redis.RedisCluster.from_url(settings.REDISQ["URL"], socket_timeout=5)  # type: ignore[return-value]
    return redis.Redis.from_url(settings.REDISQ["URL"], socket_timeout=5)


def _obey(message: Message, name: str) -> None:
    line = f"{message.id} {message.attempts} {os.getpid()}"
    _client().rpush(deliveries_key(message.queue, name), line)
    payload: Any = message.payload if isinstance(message.payload, dict) else {}
    if payload.get("exit"):
        os._exit(int(payload["exit"]))
    if payload.get("raise") == "KeyboardInterrupt":
        raise KeyboardInterrupt(f"told to interrupt on attempt {message.attempts}")
    if payload.get("raise") == "SystemExit":
        sys.exit(f"told to exit on attempt {message.attempts}")
    if payload.get("fail") or payload.get("poison"):
        raise PoisonError(f"told to fail on attempt {message.attempts}")
    if payload.get("sleep"):
        time.sleep(float(payload["sleep"]))
    if payload.get("sleep_first") and _first_delivery(message, name):
        time.sleep(float(payload["sleep_first"]))
    _client().rpush(done_key(message.queue, name), line)


def _first_delivery(message: Message, name: str) -> bool:
    """Whether the delivery list records ``message`` once only (this delivery)."""
    lines = _client().lrange(deliveries_key(message.queue, name), 0, -1)
    return sum(line.split()[0].decode() == message.id for line in lines) == 1


async def _aobey(message: Message, name: str) -> None:
    """:func:`_obey` for an async handler."""
    line = f"{message.id} {message.attempts} {os.getpid()}"
    async with loop_client() as entry:
        await entry.conn.rpush(deliveries_key(message.queue, name), line)
    payload: Any = message.payload if isinstance(message.payload, dict) else {}
    if payload.get("exit"):
        os._exit(int(payload["exit"]))
    if payload.get("fail") or payload.get("poison"):
        raise PoisonError(f"told to fail on attempt {message.attempts}")
    if payload.get("sleep"):
        await asyncio.sleep(float(payload["sleep"]))
    if payload.get("sleep_first"):
        async with loop_client() as entry:
            lines = await entry.conn.lrange(deliveries_key(message.queue, name), 0, -1)
        if sum(line.split()[0].decode() == message.id for line in lines) == 1:
            await asyncio.sleep(float(payload["sleep_first"]))
    async with loop_client() as entry:
        await entry.conn.rpush(done_key(message.queue, name), line)


# Crash, retry, poison, pause, burst and --max-messages tests. The short visibility
# timeout makes a SIGKILLed instance's message come back within seconds.
@consumer(
    "faults",
    name="recorder",
    visibility_timeout=2,
    max_retries=3,
    backoff=0.05,
    max_backoff=0.5,
    start="earliest",
)
def recorder(message: Message) -> None:
    _obey(message, "recorder")


# Graceful-shutdown tests: a LONG visibility timeout, so a message that comes back
# quickly was handed back on purpose, not reclaimed after its lease ran out.
@consumer("graceful", name="patient", visibility_timeout=60, max_retries=3, start="earliest")
def patient(message: Message) -> None:
    _obey(message, "patient")


# Chaos test: two logical consumers of one queue; instances of alpha are killed.
@consumer("chaos", name="alpha", visibility_timeout=2, max_retries=5, start="earliest")
def alpha(message: Message) -> None:
    _obey(message, "alpha")


@consumer("chaos", name="beta", visibility_timeout=2, max_retries=5, start="earliest")
def beta(message: Message) -> None:
    _obey(message, "beta")


# Liveness tests (tests/faults/test_liveness.py): a long handler must keep its lease while
# the database is locked (a short visibility timeout, so a missed extension shows at once)...
@consumer("liveness", name="steady", visibility_timeout=3, max_retries=3, start="earliest")
def steady(message: Message) -> None:
    _obey(message, "steady")


# ...and while Redis is frozen for less than the documented margin (leases are extended
# every third of the visibility timeout, so this one tolerates a freeze of ~13 s).
@consumer("frozen", name="steady", visibility_timeout=20, max_retries=3, start="earliest")
def steady_frozen(message: Message) -> None:
    _obey(message, "steady")


# Workers started all at once (tests/faults/test_start_together.py): two logical consumers
# with the default start point ("latest"), so a group created late would miss messages.
@consumer("together", name="first")
def together_first(message: Message) -> None:
    _obey(message, "first")


@consumer("together", name="second")
def together_second(message: Message) -> None:
    _obey(message, "second")


# The first deploy (tests/faults/test_first_deploy.py): two logical consumers with the
# default start point ("latest") whose workers never ran before the messages were
# published; their groups come from migrate or from the publisher's first publish.
@consumer("firsthour", name="payments")
def firsthour_payments(message: Message) -> None:
    _obey(message, "payments")


@consumer("firsthour", name="receipts")
def firsthour_receipts(message: Message) -> None:
    _obey(message, "receipts")


# Crash isolation (tests/faults/test_faults.py): the defaults (max_retries 5; runconsumer's
# prefetch 100) with a short visibility timeout, so that each crash costs about one
# worker start-up, and a message that kills its process among many good ones.
@consumer("pills", name="eater", visibility_timeout=1, start="earliest")
def eater(message: Message) -> None:
    _obey(message, "eater")


# Metrics tests (tests/metrics/test_endpoints.py): a poison message is retried once, then
# dead (outcomes retried 1, dead 1, failures 2), quickly.
@consumer(
    "metered", name="counted", max_retries=1, backoff=0.01, max_backoff=0.05, start="earliest"
)
def counted(message: Message) -> None:
    _obey(message, "counted")


# The async twins of recorder, patient, alpha and beta (tests/faults/test_faults.py runs
# the crash, graceful-shutdown, Redis-restart, chaos and poison tests on both).
@consumer(
    "afaults",
    name="arecorder",
    visibility_timeout=2,
    max_retries=3,
    backoff=0.05,
    max_backoff=0.5,
    start="earliest",
    concurrency=10,
)
async def arecorder(message: Message) -> None:
    await _aobey(message, "arecorder")


@consumer(
    "agraceful",
    name="apatient",
    visibility_timeout=60,
    max_retries=3,
    start="earliest",
    concurrency=10,
)
async def apatient(message: Message) -> None:
    await _aobey(message, "apatient")


@consumer(
    "achaos", name="aalpha", visibility_timeout=2, max_retries=5, start="earliest", concurrency=10
)
async def aalpha(message: Message) -> None:
    await _aobey(message, "aalpha")


@consumer(
    "achaos", name="abeta", visibility_timeout=2, max_retries=5, start="earliest", concurrency=10
)
async def abeta(message: Message) -> None:
    await _aobey(message, "abeta")


# Ordered consumers under SIGKILL chaos (tests/faults/test_ordered_chaos.py). Each run is
# recorded in one list, in the order Redis saw it: "S <key> <seq> <pid> <attempts>" when
# the handler starts, then "E ..." when it returns or "F ..." when it raises. The payload
# {"k": key or "-", "s": seq, "fail": n, "sleep": s} fails its first n attempts.
def ordered_key(queue: str, name: str) -> str:
    """The list recording each run of an ordered test consumer's handler."""
    return f"{KEY_PREFIX}:{queue}:{name}:runs"


def _run_line(mark: str, message: Message) -> str:
    payload = message.payload
    return f"{mark} {payload['k']} {payload['s']} {os.getpid()} {message.attempts}"


def _sequence(message: Message) -> None:
    runs = ordered_key(message.queue, "sequencer")
    _client().rpush(runs, _run_line("S", message))
    if message.attempts <= int(message.payload.get("fail", 0)):
        _client().rpush(runs, _run_line("F", message))
        raise PoisonError(f"told to fail on attempt {message.attempts}")
    time.sleep(float(message.payload.get("sleep", 0)))
    _client().rpush(runs, _run_line("E", message))


async def _asequence(message: Message) -> None:
    """:func:`_sequence` for an async handler."""
    runs = ordered_key(message.queue, "asequencer")
    async with loop_client() as entry:
        await entry.conn.rpush(runs, _run_line("S", message))
    if message.attempts <= int(message.payload.get("fail", 0)):
        async with loop_client() as entry:
            await entry.conn.rpush(runs, _run_line("F", message))
        raise PoisonError(f"told to fail on attempt {message.attempts}")
    await asyncio.sleep(float(message.payload.get("sleep", 0)))
    async with loop_client() as entry:
        await entry.conn.rpush(runs, _run_line("E", message))


@consumer(
    "ordered",
    name="sequencer",
    ordered=True,
    visibility_timeout=2,
    max_retries=10,
    backoff=0.02,
    max_backoff=0.1,
    start="earliest",
    concurrency=4,
)
def sequencer(message: Message) -> None:
    _sequence(message)


@consumer(
    "aordered",
    name="asequencer",
    ordered=True,
    visibility_timeout=2,
    max_retries=10,
    backoff=0.02,
    max_backoff=0.1,
    start="earliest",
    concurrency=10,
)
async def asequencer(message: Message) -> None:
    await _asequence(message)


# A graceful stop whose grace period ends (tests/faults/test_grace_handback.py): no
# retries at all, so a stop that counted the running message's delivery would make it a
# dead letter; a LONG visibility timeout, so a quick redelivery was a hand-back.
@consumer("handback", name="lastchance", visibility_timeout=60, max_retries=0, start="earliest")
def lastchance(message: Message) -> None:
    _obey(message, "lastchance")


@consumer(
    "ahandback",
    name="alastchance",
    visibility_timeout=60,
    max_retries=0,
    start="earliest",
    concurrency=2,
)
async def alastchance(message: Message) -> None:
    await _aobey(message, "alastchance")


@consumer(
    "ohandback",
    name="inorder",
    ordered=True,
    visibility_timeout=60,
    max_retries=0,
    start="earliest",
)
def inorder(message: Message) -> None:
    _obey(message, "inorder")


# A time limit (tests/faults/test_time_limit_faults.py): {"sleep": s} sleeps in one C
# call, which no exception interrupts, so a process whose handler is stuck past the
# grace period is replaced; one retry, then a dead letter.
@consumer("timed", name="bounded", time_limit=1, max_retries=1, backoff=0.05, start="earliest")
def bounded(message: Message) -> None:
    _obey(message, "bounded")


def spans_key(queue: str, name: str) -> str:
    """The list recording, by Redis's clock, when each handler started and ended:
    ``"start <id> <µs> <pid>"`` and ``"end <id> <µs> <pid>"``."""
    return f"{KEY_PREFIX}:{queue}:{name}:spans"


def _span(message: Message, name: str) -> None:
    """Record the handler's start and end on Redis's clock (the flow control tests
    measure rates and overlaps on the clock that decides them)."""
    client, key = _client(), spans_key(message.queue, name)
    seconds, micros = client.time()
    client.rpush(key, f"start {message.id} {seconds * 1_000_000 + micros} {os.getpid()}")
    _obey(message, name)
    seconds, micros = client.time()
    client.rpush(key, f"end {message.id} {seconds * 1_000_000 + micros} {os.getpid()}")


# Flow control (tests/faults/test_flow_faults.py): a rate shared by every process, and
# a concurrency limit shared by every process, SIGKILL included.
@consumer("paced", name="paced", rate="50/s", concurrency=8, start="earliest")
def paced(message: Message) -> None:
    _span(message, "paced")


@consumer("narrow", name="narrow", max_in_flight=3, concurrency=8, start="earliest")
def narrow(message: Message) -> None:
    _span(message, "narrow")


# Exactly once from end to end (tests/faults/test_exactly_once_faults.py): each message
# names a source row ({"source": pk}); each consumer writes one shopapp Receipt(source,
# note=<its name>) for it: atomic_sink with atomic=True (the inbox), plain_sink without.
# A failpoint: when the payload's "kill_after_commit" names the consumer, the first time
# the consumer's receipt for that message commits, its process SIGKILLs itself before the
# delivery is acknowledged (atomic_sink from transaction.on_commit; plain_sink, in
# autocommit, right after the insert). "Once" is a file created under the directory
# REDISQ_TEST_FAILPOINTS (failpoint_path), not a Redis key: Redis crashes in that test.
# "onceq" writes to the default database, "pgonceq" to the "pg" alias, which
# REDISQ_TEST_PG (a JSON object: HOST, PORT, NAME, USER...) points at the test's
# PostgreSQL in the processes given it.
FAILPOINTS_ENV = "REDISQ_TEST_FAILPOINTS"


def failpoint_path(root: str, queue: str, name: str, message_id: str) -> str:
    """The file holding the pid the failpoint of ``name`` killed on ``message_id``."""
    return os.path.join(root, queue, name, message_id)


def point_pg_alias() -> None:
    """Point the "pg" alias at the PostgreSQL named by ``REDISQ_TEST_PG``, if given (the
    same dict as the connections', as tests/conftest.py does in pytest's process)."""
    import json

    given = os.environ.get("REDISQ_TEST_PG")
    if given:
        settings.DATABASES["pg"].update(json.loads(given))


point_pg_alias()


def _die_once(message: Message, name: str) -> None:
    """The failpoint: SIGKILL this process if the payload says so for ``name``, once per
    message (its first handling that got this far creates the file; later ones find it)."""
    import signal

    root = os.environ.get(FAILPOINTS_ENV)
    if not root or name not in message.payload.get("kill_after_commit", ()):
        return
    path = failpoint_path(root, message.queue, name, message.id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _receipt(message: Message, name: str, using: str) -> None:
    from tests.shopapp.models import Receipt

    Receipt.objects.using(using).create(source=str(message.payload["source"]), note=name)


def _sink(message: Message, name: str, using: str, *, atomic: bool) -> None:
    from django.db import transaction

    _receipt(message, name, using)
    if atomic:  # after the commit of the transaction atomic=True opened, before the ack
        transaction.on_commit(functools.partial(_die_once, message, name), using=using)
    else:  # committed already (autocommit)
        _die_once(message, name)


_ONCE: dict[str, Any] = {
    "visibility_timeout": 2,
    "max_retries": 10,
    "backoff": 0.05,
    "max_backoff": 0.5,
    "start": "earliest",
}


@consumer("onceq", name="atomic_sink", atomic=True, **_ONCE)
def atomic_sink(message: Message) -> None:
    _sink(message, "atomic_sink", "default", atomic=True)


@consumer("onceq", name="plain_sink", **_ONCE)
def plain_sink(message: Message) -> None:
    _sink(message, "plain_sink", "default", atomic=False)


@consumer("pgonceq", name="atomic_sink", atomic="pg", **_ONCE)
def pg_atomic_sink(message: Message) -> None:
    _sink(message, "atomic_sink", "pg", atomic=True)


@consumer("pgonceq", name="plain_sink", **_ONCE)
def pg_plain_sink(message: Message) -> None:
    _sink(message, "plain_sink", "pg", atomic=False)
