"""One key prefix per test on a real Redis, and everything under it removed afterwards.

A test that publishes and consumes through redisq writes keys under ``REDISQ["PREFIX"]``
(``<prefix>:{queue}:log``, ``<prefix>:queues``, …: every key the package writes starts
with ``<prefix>:``, ``core/keys.py``). :func:`isolated` gives the test a prefix of its own
through ``override_settings`` (the settings getter and the broker are rebuilt on
``setting_changed``), so tests running at once against one Redis (pytest-xdist, several
CI jobs) never see each other's messages, and deletes its keys when the test ends.

Where no Redis answers at the settings' address, :func:`private_server` starts a
``redis-server`` from ``PATH`` in a temporary directory, on a free loopback port, and
:func:`isolated` points ``REDISQ["URL"]`` at it.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redisq_django.conf import SettingsError, get_settings
from redisq_django.connection import get_redis_client, quick_broker

#: Keys asked per SCAN page and deleted per UNLINK when a test's prefix is cleaned up.
CLEANUP_BATCH = 500
#: A cleanup stops after this many batches (5 million keys): a test never writes so
#: many, and an unbounded loop must not hang a test run.
CLEANUP_PAGES = 10_000
#: Seconds a private ``redis-server`` gets to answer its first PING.
SERVER_START_TIMEOUT_S = 10.0
#: How long the check of the settings' Redis waits for its answer, seconds.
PING_TIMEOUT_S = 1.0


class NoTestRedis(SettingsError):
    """No Redis for the tests: the settings' does not answer and no ``redis-server`` is
    on ``PATH`` to start one."""


@dataclass
class Isolation:
    """One test's place in Redis: its key prefix, and what the drains of the test have
    already done there.

    Attributes:
        prefix: the ``REDISQ["PREFIX"]`` of the test.
        opened: the (queue, consumer) pairs a drain of this test has moved to the start
            of the test's log (``testing.draining``); each only once.
    """

    prefix: str
    opened: set[tuple[str, str]] = field(default_factory=set)


#: The isolations entered and not left, innermost last.
_active: list[Isolation] = []


def current() -> Isolation | None:
    """The innermost :func:`isolated` block whose prefix is the one in force, or None."""
    if not _active:
        return None
    prefix = get_settings()["PREFIX"]
    return next((i for i in reversed(_active) if i.prefix == prefix), None)


def new_prefix(base: str) -> str:
    """A prefix no other test uses: ``<base>-test-<12 hex>``."""
    return f"{base}-test-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def isolated(*, url: str | None = None, settings_fixture: object = None) -> Iterator[Isolation]:
    """Run the block with a key prefix of its own, and delete its keys afterwards.

    Args:
        url: a ``redis://`` URL to use instead of the settings' Redis (e.g. the one
            :func:`private_server` started); None keeps the settings'.
        settings_fixture: pytest-django's ``settings`` fixture, when the test uses it:
            the prefix is then set through it (see :func:`_prefix_in_force`).

    Yields:
        The block's :class:`Isolation`.
    """
    from django.conf import settings

    base = dict(getattr(settings, "REDISQ", {}) or {})
    chosen = new_prefix(base.get("PREFIX", "redisq"))
    changed: dict[str, Any] = {**base, "PREFIX": chosen}
    if url is not None:
        changed["URL"] = url
    isolation = Isolation(chosen)
    with _prefix_in_force(changed, settings_fixture):
        _active.append(isolation)
        try:
            yield isolation
        finally:
            _active.remove(isolation)
            delete_prefix(chosen)


@contextlib.contextmanager
def _prefix_in_force(redisq: dict[str, Any], settings_fixture: object) -> Iterator[None]:
    """``settings.REDISQ`` is ``redisq`` in the block: through ``override_settings``, or
    through pytest-django's ``settings`` fixture when the test uses it.

    Overrides must be undone in the reverse order of their making, as each restores the
    settings it found. The ``settings`` fixture makes one at each change of the test's
    body and undoes them all when it ends: after this block when the test lists it
    first. An ``override_settings`` of ours undone before them would be brought back by
    theirs, and the rest of the session would run with this test's prefix (the next
    test's prefix built on it, a test without isolation writing under it). Made through
    the fixture, ours is undone with them, in turn.
    """
    if settings_fixture is None:
        from django.test import override_settings

        with override_settings(REDISQ=redisq):
            yield
    else:
        # Still in force after the block, until the fixture ends, right after the test's.
        setattr(settings_fixture, "REDISQ", redisq)  # noqa: B010 (its __setattr__ overrides)
        yield


def delete_prefix(prefix: str) -> int:
    """Delete every key under ``prefix`` (``<prefix>:*``) in the Redis the settings name
    now; returns how many. Bounded: at most :data:`CLEANUP_PAGES` batches of
    :data:`CLEANUP_BATCH` keys. (``scan_iter``, which a Redis Cluster client runs on
    every master; its ``unlink`` splits the keys by slot.)"""
    client = get_redis_client()
    pattern = _glob_escape(prefix) + ":*"
    deleted = 0
    batch: list[Any] = []
    for key in client.scan_iter(match=pattern, count=CLEANUP_BATCH):
        batch.append(key)
        if len(batch) >= CLEANUP_BATCH:
            deleted += int(client.unlink(*batch))
            batch = []
            if deleted >= CLEANUP_BATCH * CLEANUP_PAGES:
                break
    if batch:
        deleted += int(client.unlink(*batch))
    return deleted


def _glob_escape(text: str) -> str:
    # SCAN's MATCH is a glob: a prefix holding *, ?, [ or \ must match itself only.
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def settings_redis_answers() -> bool:
    """Whether the Redis the settings name answers a PING within
    :data:`PING_TIMEOUT_S` (False too when the settings name none)."""
    try:
        return quick_broker(PING_TIMEOUT_S).operator.ping()
    except Exception:  # refused, unresolvable, no django-redis cache: all mean "no"
        return False


@dataclass
class PrivateServer:
    """A ``redis-server`` started for a test session (:func:`private_server`)."""

    url: str
    process: subprocess.Popen[bytes]
    directory: Path

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


def private_server(binary: str | None = None) -> PrivateServer:
    """Start a ``redis-server`` (``binary``, or the one on ``PATH``) on a free loopback
    port, without persistence, in a new temporary directory.

    Raises:
        NoTestRedis: no ``redis-server`` was found, or it did not answer in time.
    """
    import redis

    path = binary or shutil.which("redis-server")
    if path is None:
        raise NoTestRedis(
            "The tests need a Redis: the one settings.REDISQ names does not answer, and "
            "there is no redis-server on PATH to start a private one. Start Redis (or set "
            "REDISQ['URL'] to one that runs), or install redis-server."
        )
    directory = Path(tempfile.mkdtemp(prefix="redisq-test-redis-"))
    port = _free_port()
    process = subprocess.Popen(
        [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = PrivateServer(f"redis://127.0.0.1:{port}/0", process, directory)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    client = redis.Redis(port=port, socket_timeout=1)
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                if client.ping():
                    return server
            except redis.ConnectionError:
                time.sleep(0.05)
    finally:
        client.close()
    server.stop()
    raise NoTestRedis(
        f"{path} did not answer on port {port} within {SERVER_START_TIMEOUT_S:g} s "
        f"(exit code {process.returncode}); run it by hand to see why."
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The private server of this process, started on first need (:func:`redis_url_for_tests`).
_private: list[PrivateServer] = []


def redis_url_for_tests() -> str | None:
    """None when the Redis the settings name answers (the tests use it); else the URL of
    a private ``redis-server`` started now for the rest of this process (stopped when it
    exits), see :func:`private_server`.

    Raises:
        NoTestRedis: neither is available.
    """
    if settings_redis_answers():
        return None
    if _private:
        return _private[0].url
    import atexit

    server = private_server()
    _private.append(server)
    atexit.register(server.stop)
    return server.url
