"""Loads the Lua scripts shipped in ``core/scripts`` and calls them by SHA."""

from __future__ import annotations

from importlib import resources
from typing import Any

from redis.commands.core import Script

SCRIPT_NAMES = (
    "ack",
    "ensure_consumer",
    "extend",
    "fail",
    "promote",
    "publish_once",
    "reclaim",
    "redrive",
    "trim",
)


def script_source(name: str) -> str:
    """The text of ``core/scripts/<name>.lua``."""
    return resources.files("redisq_django.core").joinpath("scripts", f"{name}.lua").read_text()


class Scripts:
    """The registered scripts of one Redis client.

    redis-py's ``Script`` calls EVALSHA and, on NOSCRIPT (e.g. after a Redis restart
    emptied the script cache), loads the script and calls it again.
    """

    def __init__(self, client: Any) -> None:
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts[name](keys=keys, args=args)
