"""The redis-py clients the core accepts have one name (``core/types.py``), used wherever
a client is passed, so a type checker sees what goes in."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import redisq_django
from redisq_django.core.types import AsyncRedisClient, RedisClient

PACKAGE = Path(redisq_django.__file__).parent
#: A client parameter, attribute or return left as ``Any``.
UNTYPED = re.compile(r"\bclient\w*: Any\b|def \w*client\w*\(.*\) -> Any:")


def test_the_client_types_are_the_redis_py_ones() -> None:
    assert typing.get_args(RedisClient) == (redis.Redis, redis.cluster.RedisCluster)
    assert typing.get_args(AsyncRedisClient) == (
        redis.asyncio.Redis,
        redis.asyncio.cluster.RedisCluster,
    )
    assert isinstance(redis.Redis(), RedisClient)


def test_no_client_is_typed_any() -> None:
    # Given every module of the package
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if UNTYPED.search(line)
    ]

    # Then none passes or returns a client as Any
    assert found == []


@pytest.mark.slow
def test_mypy_refuses_what_is_not_a_client(tmp_path: Path) -> None:
    # Given code that hands the broker a URL instead of a client
    code = tmp_path / "use.py"
    code.write_text(
        textwrap.dedent(
            """
            import redis
            from redisq_django.core import Broker

            Broker(redis.Redis())
            Broker("redis://localhost:6379/0")
            """
        )
    )

    # When mypy checks it
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(code)],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # Then the URL is the one error
    assert 'Argument 1 to "Broker" has incompatible type "str"' in result.stdout, result.stdout
    assert result.stdout.count("error:") == 1, result.stdout
