"""The Lua scripts, one ``.lua`` file per atomic operation, and their loader.

Each file starts with a header listing every ``KEYS[i]`` and ``ARGV[i]``; PROTOCOL.md
lists them for clients in other languages, which must call the same scripts.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Literal, get_args

from redis.commands.core import Script

ScriptName = Literal[
    "ack",
    "archive_commit",
    "archive_gap",
    "archive_register",
    "archive_remove",
    "deliver_now",
    "ensure_consumer",
    "extend",
    "fail",
    "heartbeat",
    "lease",
    "promote",
    "publish_batch_once",
    "publish_delayed",
    "publish_once",
    "purge_consumer",
    "reclaim",
    "redrive",
    "task_enqueue",
    "task_lost",
    "task_ready",
    "task_settle",
    "task_start",
    "trim",
]

SCRIPT_NAMES: tuple[ScriptName, ...] = get_args(ScriptName)


def script_source(name: str) -> str:
    """The text of ``core/scripts/<name>.lua``."""
    return resources.files(__name__).joinpath(f"{name}.lua").read_text()


class Scripts:
    """The registered scripts of one Redis client.

    redis-py's ``Script`` calls EVALSHA and, on NOSCRIPT (e.g. after a Redis restart
    emptied the script cache), loads the script and calls it again.
    """

    def __init__(self, client: Any) -> None:
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    def __call__(
        self, name: ScriptName, keys: list[str], args: list[Any], client: Any = None
    ) -> Any:
        """Run script ``name``; with ``client`` (a pipeline), queue it there instead."""
        return self._scripts[name](keys=keys, args=args, client=client)

    def sha(self, name: ScriptName) -> str:
        """The SHA1 of script ``name``, for an ``EVALSHA`` sent by other means."""
        return str(self._scripts[name].sha)

    def load(self, name: ScriptName) -> None:
        """Load script ``name`` into Redis (after a NOSCRIPT reply)."""
        script = self._scripts[name]
        script.registered_client.script_load(script.script)
