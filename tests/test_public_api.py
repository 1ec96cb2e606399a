"""The package top: lazy (no settings or Redis needed to import it) and typed, so a type
checker catches a misspelled keyword in ``publish("q", {}, dely=1)``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import redisq_django

ROOT = Path(redisq_django.__file__).parent.parent


@pytest.mark.slow  # a fresh Python process
def test_importing_the_package_loads_no_django_and_names_resolve_lazily() -> None:
    program = textwrap.dedent(
        """
        import sys
        import redisq_django
        assert "django.db" not in sys.modules, "importing redisq_django loaded django.db"
        from redisq_django import Message, Reject, consumer
        assert consumer.__module__ == "redisq_django.consuming.declarations"
        assert sorted(redisq_django.__all__) == sorted(
            ["Message", "Reject", "consumer", "publish", "publish_many", "publish_on_commit"]
        )
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
        [sys.executable, "-c", program],
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


def test_a_dead_letter_in_redis_is_a_dead_entry_and_the_old_name_warns() -> None:
    # The Redis entry and the database row were both ``DeadLetter``: the core's is now
    # ``DeadEntry``, and its old name still works for one minor version, with a warning.
    from redisq_django import core
    from redisq_django.core.dead_entry import DeadEntry

    assert core.DeadEntry is DeadEntry
    assert "DeadEntry" in core.__all__
    assert "DeadLetter" not in core.__all__
    with pytest.warns(DeprecationWarning, match=r"core\.DeadLetter is now .*DeadEntry"):
        from redisq_django.core import DeadLetter
    assert DeadLetter is DeadEntry
    with pytest.raises(AttributeError, match="no_such_name"):
        core.no_such_name  # noqa: B018
