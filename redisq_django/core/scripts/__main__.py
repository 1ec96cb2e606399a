"""The assembled scripts for clients in other languages: ``python -m
redisq_django.core.scripts``.

- ``export DIR``: write every script, assembled, as ``DIR/<name>.lua`` (what to
  ``SCRIPT LOAD``; PROTOCOL.md, "Where the scripts are");
- ``show NAME``: print one script, assembled;
- ``list``: each script's name and the SHA1 Redis gives it.

Needs neither Django nor Redis: the package alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from redisq_django.core.scripts import PROTOCOL_TOKEN, SCRIPT_NAMES
from redisq_django.core.scripts.assembly import assembled, sha1


def export(directory: Path) -> list[Path]:
    """Write every script, assembled, into ``directory`` (created if missing); the
    paths written, in name order. A file already there is replaced."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SCRIPT_NAMES:
        path = directory / f"{name}.lua"
        path.write_bytes(assembled(name).encode("utf-8"))
        written.append(path)
    return written


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser (also what the docs list its options from)."""
    parser = argparse.ArgumentParser(
        prog="python -m redisq_django.core.scripts",
        description=(
            f"redisq's Lua scripts, assembled as every client loads them (protocol "
            f"{PROTOCOL_TOKEN.decode()}; PROTOCOL.md)."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    out = commands.add_parser("export", help="write DIR/<name>.lua for every script")
    out.add_argument("directory", type=Path, help="where to write them (created if missing)")
    show = commands.add_parser("show", help="print one script")
    show.add_argument("name", choices=SCRIPT_NAMES, metavar="NAME", help="e.g. fail")
    commands.add_parser("list", help="each script's SHA1 and file name")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "export":
        for path in export(args.directory):
            print(path)
    elif args.command == "show":
        sys.stdout.write(assembled(args.name))
    else:
        for name in SCRIPT_NAMES:
            print(f"{sha1(name)}  {name}.lua")
    return 0


if __name__ == "__main__":
    sys.exit(main())
