"""The scripts are written once: sources include shared fragments, the loader assembles
them, and the shipped ``core/scripts/<name>.lua`` files (what clients in other languages
load, PROTOCOL.md "Where the scripts are") are exactly that assembled text.

What used to be kept identical by comparing copies (the protocol check, the ordered
hand-over, the foreign-state checks, the layout check, ...) is now one fragment: these
tests check that no fragment's text is copied into a source again, and that every
assembled script holds what it must."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import redisq_django.core.scripts as shipped
from redisq_django.core.scripts import SCRIPT_NAMES, Scripts, script_source
from redisq_django.core.scripts.assembly import (
    INCLUDE,
    AssemblyError,
    assemble,
    assembled,
    fragment,
    fragment_names,
    included,
    sha1,
    source,
)

SCRIPTS_DIR = Path(shipped.__file__).parent

#: What a script must include, by what it is (PROTOCOL.md, "The scripts").
MUST = {
    # the five that add a message or create a group check the place's layout first
    "layout": {
        "publish_once",
        "publish_delayed",
        "publish_batch_once",
        "ensure_consumer",
        "redrive",
    },
    # the ordered consumer's scripts check what they read but did not write
    "foreign_state": {
        "ack_ordered",
        "fail",
        "release_key",
        "end_message",
        "read_ordered",
        "ordered_purge",
        "end_waiting",
        "ended_marks",
    },
    # the key hand-over, written once for the three settles that hand a key on
    "hand_over": {"ack_ordered", "fail", "release_key", "end_message"},
    # the delayed member, `id` first, for the three publishes that make one
    "member_of": {"publish_once", "publish_delayed", "publish_batch_once"},
    # a member's fields, the same whichever script moves it
    "flatten": {"promote", "deliver_now"},
    # the settling scripts: one layout (PROTOCOL.md, "The settle layout"), read once
    "settle_layout": {"ack", "ack_ordered", "fail", "task_settle"},
    "settle": {"ack", "ack_ordered", "fail", "task_settle"},
    "handled_records": {"ack", "ack_ordered"},
    "settle_failure": {"fail", "task_settle"},
}


def code_lines(text: str) -> list[str]:
    """The lines of Lua code in ``text``: stripped, no comment, no blank."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("--")]


def copied_text(fragment_text: str, source_text: str) -> list[str]:
    """What of a fragment's code a source repeats: any line long enough to be the
    fragment's own (60 characters), and any three lines in a row."""
    own = code_lines(source_text)
    lines = code_lines(fragment_text)
    found = sorted({line for line in lines if len(line) >= 60} & set(own))
    runs = {tuple(own[i : i + 3]) for i in range(len(own) - 2)}
    found += [
        " / ".join(lines[i : i + 3])
        for i in range(len(lines) - 2)
        if tuple(lines[i : i + 3]) in runs
    ]
    return found


# -- the shipped files are the assembled text --------------------------------------------


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_shipped_file_is_the_assembled_text(name: str) -> None:
    # What another language's client loads is byte for byte what our loader runs; after
    # changing a source or a fragment: python -m redisq_django.core.scripts export
    # redisq_django/core/scripts
    shipped_bytes = (SCRIPTS_DIR / f"{name}.lua").read_bytes()
    assert shipped_bytes == assembled(name).encode("utf-8"), (
        f"core/scripts/{name}.lua is stale: run python -m redisq_django.core.scripts export "
        "redisq_django/core/scripts"
    )


def test_every_source_is_a_script_and_every_fragment_is_shared() -> None:
    sources = sorted(p.stem for p in (SCRIPTS_DIR / "source").glob("*.lua"))
    assert sources == sorted(SCRIPT_NAMES)
    users = {f: [n for n in SCRIPT_NAMES if f in included(n)] for f in fragment_names()}
    # A fragment exists to be shared: one used by a single script belongs in it.
    assert {f: n for f, n in users.items() if len(n) < 2} == {}


def test_assembly_is_deterministic_and_the_sha1_is_redis_s(redis_client: redis.Redis) -> None:
    for name in SCRIPT_NAMES:
        text = assemble(name, source(name))
        assert text == assembled(name) == script_source(name)
        assert sha1(name) == hashlib.sha1(text.encode()).hexdigest()
        assert redis_client.script_load(text) == sha1(name)
    # And the loader registers exactly that text
    scripts = Scripts(redis_client)
    assert scripts.command("fail", [])[1] == sha1("fail")


# -- written once: no fragment's text is copied into a source --------------------------


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_no_fragment_text_is_copied_into_a_source(name: str) -> None:
    text = source(name)
    copied = {f: copied_text(fragment(f), text) for f in fragment_names()}
    copied = {f: found for f, found in copied.items() if found}
    assert copied == {}, f"source/{name}.lua repeats fragment text: include it instead"
    # nor the markers of the blocks that used to be kept identical by hand
    assert not re.search(r"^-- (>>>|<<<) ", source(name), re.MULTILINE)


def test_the_hand_over_is_written_once() -> None:
    # The text that handed a key on was written twice and drifted; now one fragment.
    defining = [n for n in SCRIPT_NAMES if "local function hand_on" in source(n)]
    assert defining == []
    assert "local function hand_on(" in fragment("hand_over")


# -- every assembled script holds what it must -------------------------------------------


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_checks_the_protocol_first_naming_itself(name: str) -> None:
    text = assembled(name)
    code = [line for line in text.splitlines() if line.strip() and not line.startswith("--")]
    # The first code of every script is the protocol check (PROTOCOL.md, "Versions and
    # upgrades"), with its own file name in the refusal
    assert code[0] == "if ARGV[1] ~= 'redisq/2' then"
    assert f"'REDISQ_PROTOCOL script {name}.lua speaks redisq/2, '" in text
    assert "{{script}}" not in text
    assert INCLUDE not in text


@pytest.mark.parametrize(("part", "names"), sorted(MUST.items()))
def test_the_scripts_that_must_share_a_fragment_include_it(part: str, names: set[str]) -> None:
    body = fragment(part).replace("{{script}}", "")
    holding = {n for n in SCRIPT_NAMES if body in assembled(n).replace("{{script}}", "")}
    assert holding == names


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_function_a_script_calls_is_assembled_into_it(name: str) -> None:
    # A fragment's function called by a script that does not include the fragment would
    # fail in Redis at the first call, not at load: caught here for every script.
    text, own = assembled(name), source(name)
    for part in fragment_names():
        for function in re.findall(r"^local function (\w+)\(", fragment(part), re.MULTILINE):
            if f"local function {function}(" in own:
                continue  # its own function of that name (trim.lua's parse)
            if re.search(rf"(?<![\w.:]){function}\(", own):
                assert part in included(name), f"{name}.lua calls {function}() of {part}"
                assert f"local function {function}(" in text


# -- assembling: whole fragments, nothing else -------------------------------------------


def test_an_include_is_replaced_by_the_whole_fragment_between_markers() -> None:
    text = assemble("demo", "-- demo.lua\n--#include protocol\nreturn 1\n")
    lines = text.splitlines(keepends=True)
    start = lines.index("-- >>> fragments/protocol.lua (shared; assembled into this script)\n")
    end = lines.index("-- <<< fragments/protocol.lua\n")
    assert "".join(lines[start + 1 : end]) == fragment("protocol").replace("{{script}}", "demo.lua")
    assert lines[end + 1 :] == ["return 1\n"]
    assert lines[2] == "-- demo.lua\n"  # after the two lines that say it was assembled


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("--#include no_such_fragment\n", "there is no fragment 'no_such_fragment'"),
        ("--#include ../source/ack\n", "is no fragment name"),
        ("--#include clock\n--#include clock\n", "includes fragment 'clock' twice"),
    ],
)
def test_a_source_that_cannot_be_assembled_is_refused(text: str, problem: str) -> None:
    with pytest.raises(AssemblyError, match=re.escape(problem)):
        assemble("demo", text)


# -- what another language runs: the export command ---------------------------------------


def test_the_export_command_writes_what_the_package_ships(tmp_path: Path) -> None:
    out = tmp_path / "scripts"
    done = subprocess.run(
        [sys.executable, "-m", "redisq_django.core.scripts", "export", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.lua" for n in SCRIPT_NAMES)
    for name in SCRIPT_NAMES:
        assert (out / f"{name}.lua").read_bytes() == (SCRIPTS_DIR / f"{name}.lua").read_bytes()


def test_show_and_list_print_a_script_and_every_sha1(redis_client: redis.Redis) -> None:
    command = [sys.executable, "-m", "redisq_django.core.scripts"]
    shown = subprocess.run([*command, "show", "fail"], capture_output=True, check=True)
    assert shown.stdout == (SCRIPTS_DIR / "fail.lua").read_bytes()
    listed = subprocess.run([*command, "list"], capture_output=True, text=True, check=True)
    rows = [line.split("  ") for line in listed.stdout.splitlines()]
    assert [name for _, name in rows] == [f"{n}.lua" for n in SCRIPT_NAMES]
    for sha, name in rows:
        assert redis_client.script_load((SCRIPTS_DIR / name).read_text()) == sha
