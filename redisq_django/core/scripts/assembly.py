"""The scripts' text as Redis runs it, assembled from their sources and shared fragments.

A script's source, ``core/scripts/source/<name>.lua``, is Lua with whole lines
``--#include <fragment>``: each is replaced by the text of
``core/scripts/fragments/<fragment>.lua`` (what several scripts share: the protocol
check, the layout check, the ordered hand-over, the settle layout, ...), between two
marker comments that name it. Where a fragment says ``{{script}}`` (the protocol check's
error reply), the script's file name goes. Nothing else is substituted, nothing is
evaluated: the same files give the same text, byte for byte, on every machine.

The assembled text is what every client loads, ours and other languages' (PROTOCOL.md,
"Where the scripts are"); a script's SHA1 is the SHA1 of that text. A copy of each is
committed and shipped as ``core/scripts/<name>.lua``, written by
``python -m redisq_django.core.scripts export`` (a test checks that the copies are
fresh); our loader assembles from the sources itself, once per process.
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources

from redisq_django.core.errors import RedisqError

#: The line that includes a fragment (the rest of the line is its name).
INCLUDE = "--#include "
#: Where a fragment names the script it is assembled into (``ack.lua``).
SCRIPT_NAME = "{{script}}"
#: What a fragment's name may be: it is a file name, never a path.
_NAME = re.compile(r"[a-z][a-z0-9_]*")

_HERE = resources.files(__package__ or __name__)


class AssemblyError(RedisqError, ValueError):
    """A script source that cannot be assembled: an unknown or repeated fragment, or a
    fragment that includes another (fragments are included by scripts only)."""


def _read(*parts: str) -> str:
    return _HERE.joinpath(*parts).read_text(encoding="utf-8")


@functools.cache
def fragment(name: str) -> str:
    """The text of fragment ``name`` (``core/scripts/fragments/<name>.lua``)."""
    if not _NAME.fullmatch(name):
        raise AssemblyError(f"{name!r} is no fragment name (lower-case letters, digits, _)")
    try:
        text = _read("fragments", f"{name}.lua")
    except FileNotFoundError:
        raise AssemblyError(f"there is no fragment {name!r} (core/scripts/fragments/)") from None
    if any(line.startswith(INCLUDE) for line in text.splitlines()):
        raise AssemblyError(f"fragment {name!r} includes another: only scripts include")
    return text


def fragment_names() -> list[str]:
    """Every fragment, by name, sorted."""
    return sorted(
        p.name[: -len(".lua")]
        for p in _HERE.joinpath("fragments").iterdir()
        if p.name.endswith(".lua")
    )


def source(name: str) -> str:
    """The source of script ``name`` (``core/scripts/source/<name>.lua``), unassembled."""
    return _read("source", f"{name}.lua")


def included(name: str) -> list[str]:
    """The fragments script ``name`` includes, in order."""
    return [line[len(INCLUDE) :].strip() for line in source(name).splitlines() if _is_include(line)]


def _is_include(line: str) -> bool:
    return line.startswith(INCLUDE)


@functools.cache
def assembled(name: str) -> str:
    """The text of script ``name`` as Redis runs it (:func:`assemble` of its source)."""
    return assemble(name, source(name))


def assemble(name: str, text: str) -> str:
    """Script ``name`` whose source is ``text``, assembled: a header that says so, then
    ``text`` with each include line replaced by the fragment it names (between marker
    comments), the script's file name put where a fragment says ``{{script}}``.

    Raises:
        AssemblyError: an unknown fragment, one included twice, or a fragment that
            includes another.
    """
    out = [
        f"-- Assembled from source/{name}.lua and the fragments/ it includes"
        " (redisq_django/core/scripts/):\n",
        "-- load this text as it is. To change it, edit those, then run"
        " python -m redisq_django.core.scripts export\n",
    ]
    seen: set[str] = set()
    for line in text.splitlines(keepends=True):
        if not _is_include(line):
            out.append(line)
            continue
        part = line[len(INCLUDE) :].strip()
        if part in seen:
            raise AssemblyError(f"{name}.lua includes fragment {part!r} twice")
        seen.add(part)
        shared = fragment(part).replace(SCRIPT_NAME, f"{name}.lua")
        out.append(f"-- >>> fragments/{part}.lua (shared; assembled into this script)\n")
        out.append(shared if shared.endswith("\n") else shared + "\n")
        out.append(f"-- <<< fragments/{part}.lua\n")
    return "".join(out)


def sha1(name: str) -> str:
    """The SHA1 Redis gives script ``name`` (``SCRIPT LOAD`` of its assembled text)."""
    return hashlib.sha1(assembled(name).encode("utf-8")).hexdigest()
