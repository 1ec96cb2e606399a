"""``manage.py redisq`` runs what each sub-command's parser names (``set_defaults(handler=…)``):
every sub-command a user can type has one, and the one typed is the one that runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import Any

from redisq_django.management.commands.redisq import Command


def _sub_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[argparse.ArgumentParser]]]:
    """Every sub-command a user can type, with the parsers from the command's down to
    its own (a sub-command whose own sub-commands are optional can be typed alone)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs or not subs[0].required:
        yield path, [parser]
    for action in subs:
        for name, sub in action.choices.items():
            for deeper, chain in _sub_commands(sub, (*path, name)):
                yield deeper, [parser, *chain]


def _handler(chain: list[argparse.ArgumentParser]) -> Callable[..., Any] | None:
    """What runs: the innermost parser's handler (argparse lets a sub-command's
    defaults win over its parent's)."""
    found = [p.get_default("handler") for p in chain]
    return next((h for h in reversed(found) if h is not None), None)


def test_every_sub_command_names_what_runs_it() -> None:
    parser = Command().create_parser("manage.py", "redisq")
    typed = dict(_sub_commands(parser))
    # Every sub-command of the reference page is there...
    assert set(typed) >= {
        ("status",),
        ("replay",),
        ("dead", "list"),
        ("dead", "retry"),
        ("dead", "discard"),
        ("dead", "sink"),
        ("relay",),
        ("schedules",),
        ("deliver-now",),
        ("held",),
        ("release-key",),
        ("archives",),
        ("archives", "list"),
        ("archives", "remove"),
        ("partitions",),
        ("purge",),
    }
    # ...and each names a handler: none is left to a name built from the typed words.
    assert {path for path, chain in typed.items() if not callable(_handler(chain))} == set()
    # Sub-commands of one parent run their own (archives: the list unless remove is typed).
    assert _handler(typed[("archives",)]) is _handler(typed[("archives", "list")])
    assert _handler(typed[("archives",)]) is not _handler(typed[("archives", "remove")])
    handlers = [_handler(typed[("dead", name)]) for name in ("list", "retry", "discard", "sink")]
    assert len({id(h) for h in handlers}) == 4
