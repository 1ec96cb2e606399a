"""One handler thread's task-result writes, pipelined: a task never waits for Redis.

A worker thread writes a task's start (``task_start.lua``) before running it and its
settle (``task_settle.lua``) after, on a connection of its own, without waiting for the
replies; they are read when the thread writes next, or at the end of its batch
(:meth:`TaskPipe.read_all`). Each script is atomic on its own, so what a reply says
changes nothing but the log: a settle Redis refused (or that found the message taken
over) leaves the message pending, and it is delivered again (at-least-once). After a
NOSCRIPT (Redis restarted and lost its scripts) the refused calls run again, in order
(``core/pipelining.py``): a refused call never ran.

Only a client with one connection pool can pipeline; with Redis Cluster
(:attr:`TaskPipe.available` is False) the caller writes synchronously instead.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from redisq_django.core.errors import describe_client
from redisq_django.core.pipelining import Pipe, packed
from redisq_django.core.scripts import ScriptName, Scripts
from redisq_django.core.types import RedisClient

logger = logging.getLogger("redisq.tasks")

#: The scripts a pipe writes.
PIPED_SCRIPTS: tuple[ScriptName, ...] = ("task_start", "task_settle")


class TaskPipe:
    """Unread script calls of one thread, on one connection (not thread-safe)."""

    def __init__(self, client: RedisClient, scripts: Scripts) -> None:
        self.client = client
        self.scripts = scripts
        self._pipe: Pipe[ScriptName] = Pipe(client, scripts)
        self._loaded = False

    @property
    def available(self) -> bool:
        """Whether calls can be pipelined (a client with one connection pool)."""
        return self._pipe.available

    def write(self, name: ScriptName, keys: list[str], args: list[Any]) -> None:
        """Send script ``name`` now; its reply is read by a later :meth:`read_all`.

        Raises:
            redis.ConnectionError: the write failed (:meth:`read_all` logs what it lost).
        """
        if not self._loaded:
            # Loaded before the first write, so that a fresh Redis does not refuse a task's
            # start (NOSCRIPT) until its reply is read, after the task ran. Both at once:
            # after a NOSCRIPT every later call must fail too, to run again in order.
            for piped in PIPED_SCRIPTS:
                self.scripts.load(piped)
            self._loaded = True
        call = packed(self.scripts.command(name, keys, args))
        self._pipe.write_one(call, name, name, call)

    def read_all(self) -> None:
        """Read every unread reply (they arrived while the tasks ran): calls refused for
        NOSCRIPT run again in order, other errors are logged (their messages are
        delivered again)."""
        lost: list[BaseException] = []
        for name, reply in self._pipe.read():
            if isinstance(reply, redis.ResponseError):
                logger.warning("Redis refused %s for a task (%s); it will run again", name, reply)
            elif isinstance(reply, BaseException):
                lost.append(reply)
        if lost:
            logger.warning(
                "Lost the connection to %s with %d task write(s) unconfirmed (%s); "
                "their tasks run again unless Redis applied them",
                describe_client(self.client),
                len(lost),
                lost[0],
            )

    def close(self) -> None:
        """Read what is unread and give the connection back."""
        try:
            self.read_all()
        finally:
            self._pipe.release()
