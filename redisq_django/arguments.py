"""Argument types and logging set-up of every command: the management commands and the
pipeline's command line (Django-free, so ``pipeline`` may import it; docs/layout.md)."""

from __future__ import annotations

import argparse
import logging
import sys


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number >= 1."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """An ``argparse`` type: a whole number >= 0."""
    return _whole_number(text, 0)


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
    return value


def positive_float(text: str) -> float:
    """An ``argparse`` type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def django_common_options() -> argparse.ArgumentParser:
    """Django's options common to every command (``BaseCommand.create_parser``) as a
    parent parser for sub-commands, so that ``manage.py redisq status --settings X``
    works as ``manage.py check --settings X`` does. Their defaults are suppressed: only
    an option given after the sub-command reaches the options, over the command's own."""
    parent = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS
    parent.add_argument("-v", "--verbosity", type=int, choices=[0, 1, 2, 3], default=unset)
    parent.add_argument("--settings", default=unset)
    parent.add_argument("--pythonpath", default=unset)
    for flag in ("--traceback", "--no-color", "--force-color", "--skip-checks"):
        parent.add_argument(flag, action="store_true", default=unset)
    return parent


def configure_logging(verbosity: int, *, with_pid: bool = False) -> None:
    """Map ``--verbosity`` 0/1/2+ to WARNING/INFO/DEBUG on the ``redisq`` loggers, with
    a stderr handler when none is configured (its lines name the process with
    ``with_pid``, for the processes of ``runconsumer --processes N`` sharing a stderr)."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    root = logging.getLogger("redisq")
    root.setLevel(level)
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        pid = " [%(process)d]" if with_pid else ""
        handler.setFormatter(logging.Formatter(f"%(asctime)s{pid} %(levelname)s %(message)s"))
        root.addHandler(handler)
        root.propagate = False
