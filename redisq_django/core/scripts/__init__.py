"""The Lua scripts, one per atomic operation, and their loader.

A script is written once: its source (``source/<name>.lua``) includes the fragments it
shares with others (``fragments/``: the protocol check, the layout check, the ordered
hand-over, the settle layout, ...), and the loader assembles each once per process
(:mod:`.assembly`). The assembled text is what runs, here and in every other language's
client: each starts with a header listing every ``KEYS[i]`` and ``ARGV[i]``, PROTOCOL.md
lists them too, and the package ships them as ``core/scripts/<name>.lua``
(``python -m redisq_django.core.scripts export DIR`` writes them anywhere).

Every script takes the protocol version as ``ARGV[1]`` (:data:`PROTOCOL_TOKEN`) and
refuses any other with an error reply starting ``REDISQ_PROTOCOL`` (PROTOCOL.md,
"Versions and upgrades"): a client that kept old scripts, or old calls, after an upgrade
changed a script's arguments is refused instead of misread. The token is added here, in
every way our code calls a script (:meth:`Scripts.__call__`, :meth:`Scripts.command`,
:class:`AsyncScripts`); nothing else sends ``EVALSHA``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from redis.commands.core import Script

from redisq_django.core.scripts.assembly import assembled
from redisq_django.core.types import AsyncRedisClient, RedisClient

ScriptName = Literal[
    "ack",
    "ack_ordered",
    "archive_commit",
    "archive_gap",
    "archive_register",
    "archive_remove",
    "deliver_now",
    "end_message",
    "end_waiting",
    "ended_marks",
    "ensure_consumer",
    "extend",
    "fail",
    "heartbeat",
    "lease",
    "ordered_purge",
    "partitions",
    "promote",
    "publish_batch_once",
    "publish_delayed",
    "publish_once",
    "purge",
    "purge_consumer",
    "rate",
    "read_ordered",
    "reclaim",
    "redrive",
    "release_key",
    "repartition",
    "schedule_claim",
    "slots",
    "task_enqueue",
    "task_lost",
    "task_ready",
    "task_settle",
    "task_start",
    "trim",
]

SCRIPT_NAMES: tuple[ScriptName, ...] = get_args(ScriptName)

#: The redisq protocol this release speaks (PROTOCOL.md; the envelope has its own ``v``).
PROTOCOL_VERSION = 2
#: ``ARGV[1]`` of every script call: no real first argument looks like it (names have no
#: ``/``), so a caller of protocol 1, which sends none, is refused rather than misread.
PROTOCOL_TOKEN = f"redisq/{PROTOCOL_VERSION}".encode()


def versioned(args: Sequence[Any]) -> list[Any]:
    """A script's ARGV as sent: the protocol token, then ``args``."""
    return [PROTOCOL_TOKEN, *args]


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class ScriptCall:
    """One call of a script, built once by the core and run by whichever client runs it:
    the synchronous one (``core.batch.run_script``) or an asyncio one
    (``core.asyncio_client.run_call``).

    Attributes:
        script: the script's name.
        keys: its KEYS.
        args: its ARGV (without the protocol token, added when it is sent).
        quiet: commands sent in the same round trip whose replies are not read (the
            trend counters, ``core/trends.py``).
        failed: to call when the call failed: its quiet commands may be lost too (a
            trend counter sends its ``EXPIRE`` again next time).
    """

    script: ScriptName
    keys: list[str]
    args: list[Any]
    quiet: Sequence[Sequence[Any]] = ()
    failed: Callable[[], None] = field(default=_nothing, compare=False)


def script_source(name: str) -> str:
    """The text of script ``name`` as Redis runs it: assembled from its source and the
    fragments it includes (:func:`.assembly.assembled`), the same as the shipped
    ``core/scripts/<name>.lua``."""
    return assembled(name)


class Scripts:
    """The registered scripts of one Redis client.

    redis-py's ``Script`` calls EVALSHA and, on NOSCRIPT (e.g. after a Redis restart
    emptied the script cache), loads the script and calls it again.
    """

    def __init__(self, client: RedisClient) -> None:
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    def __call__(
        self, name: ScriptName, keys: list[str], args: list[Any], client: RedisClient | None = None
    ) -> Any:
        """Run script ``name``; with ``client`` (a pipeline), queue it there instead."""
        return self._scripts[name](keys=keys, args=versioned(args), client=client)

    def command(
        self, name: ScriptName, keys: Sequence[Any], args: Sequence[Any] = ()
    ) -> tuple[Any, ...]:
        """The ``EVALSHA`` command of script ``name``, for a write built by other means
        (hiredis-packed batches, pipelined replies read later): its arguments are
        ``args`` after the protocol token. With ``args`` empty, the start of a command
        whose arguments the caller appends."""
        return ("EVALSHA", self._scripts[name].sha, len(keys), *keys, *versioned(args))

    def load(self, name: ScriptName) -> None:
        """Load script ``name`` into Redis (after a NOSCRIPT reply)."""
        script = self._scripts[name]
        script.registered_client.script_load(script.script)


class AsyncScripts:
    """The scripts of one ``redis.asyncio`` client, registered on first use (its
    ``AsyncScript`` sends EVALSHA and loads the script on NOSCRIPT)."""

    def __init__(self, client: AsyncRedisClient) -> None:
        self._client = client
        self._scripts: dict[str, Any] = {}

    def _script(self, name: ScriptName) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._client.register_script(script_source(name))
        return script

    async def __call__(self, name: ScriptName, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run script ``name``."""
        return await self._script(name)(keys=list(keys), args=versioned(args))

    def command(
        self, name: ScriptName, keys: Sequence[Any], args: Sequence[Any] = ()
    ) -> tuple[Any, ...]:
        """The ``EVALSHA`` command of script ``name`` (as :meth:`Scripts.command`)."""
        return ("EVALSHA", self._script(name).sha, len(keys), *keys, *versioned(args))
