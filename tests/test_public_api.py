"""The package top: lazy (no settings or Redis needed to import it) and typed, so a type
checker catches a misspelled keyword in ``publish("q", {}, dely=1)``."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import redisq_django

ROOT = Path(redisq_django.__file__).parent.parent

#: docs/layout.md's "Public names", exactly: what ``import redisq_django`` offers.
PUBLIC = [
    # declaring and publishing
    "consumer",
    "periodic",
    "publish",
    "publish_many",
    "publish_on_commit",
    "apublish",
    "apublish_many",
    # what a handler gets and raises
    "Message",
    "Reject",
    # the errors a user catches
    "RedisqError",
    "PublishError",
    "PayloadTooLarge",
    "PayloadNotSerializable",
    "ConfigurationError",
    "RedisUnavailable",
    "RedisRefused",
    "ConsumerNotFound",
    "ProtocolMismatch",
    "ArchiveNotRegistered",
]


@pytest.mark.slow  # a fresh Python process
def test_importing_the_package_loads_no_django_and_names_resolve_lazily() -> None:
    program = textwrap.dedent(
        """
        import sys
        import redisq_django
        assert "django.db" not in sys.modules, "importing redisq_django loaded django.db"
        from redisq_django import Message, Reject, consumer
        assert consumer.__module__ == "redisq_django.consuming.declarations"
        assert sorted(redisq_django.__all__) == sorted(PUBLIC), redisq_django.__all__
        from redisq_django import PayloadTooLarge, RedisqError, RedisUnavailable
        assert "django.db" not in sys.modules, "importing the errors loaded django.db"
        assert issubclass(PayloadTooLarge, RedisqError)
        assert RedisUnavailable.__module__ == "redisq_django.core.errors"
        try:
            redisq_django.no_such_name
        except AttributeError as exc:
            assert "no_such_name" in str(exc)
        else:
            raise AssertionError("expected AttributeError")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", f"PUBLIC = {PUBLIC!r}\n{program}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.slow
def test_mypy_sees_the_real_signatures(tmp_path: Path) -> None:
    code = tmp_path / "use.py"
    code.write_text(
        textwrap.dedent(
            """
            import redisq_django

            redisq_django.publish("orders", {"n": 1}, delay=1)
            redisq_django.publish("orders", {"n": 1}, dely=1)
            """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--ignore-missing-imports",
            str(code),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 'Unexpected keyword argument "dely"' in result.stdout, result.stdout
    assert result.stdout.count("error:") == 1, result.stdout


def test_every_public_name_is_the_object_its_home_module_defines() -> None:
    # Given the names docs/layout.md promises
    from redisq_django.core import errors
    from redisq_django.schedules import declared

    # When each is read from the package top
    found = {name: getattr(redisq_django, name) for name in PUBLIC}

    # Then each is the one object of its home module, the errors all RedisqErrors
    assert found["periodic"] is declared.periodic
    for name in PUBLIC[9:]:
        assert found[name] is getattr(errors, name), name
        assert issubclass(found[name], errors.RedisqError), name
    assert set(PUBLIC) <= set(dir(redisq_django))


def test_the_layout_note_lists_the_same_public_names() -> None:
    # Given docs/layout.md's "Public names" section
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    section = text.split("## Public names", 1)[1].split("Also public", 1)[0]

    # When its back-quoted names are read
    listed = re.findall(r"`(\w+)`", section)

    # Then they are exactly the package's __all__
    assert sorted(listed) == sorted(PUBLIC)
