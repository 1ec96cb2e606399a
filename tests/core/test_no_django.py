"""``redisq_django.core`` works without Django: no import of it, at runtime or in source."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import redisq_django.core

CORE_DIR = Path(redisq_django.core.__file__).parent
PROJECT_ROOT = CORE_DIR.parent.parent

PROGRAM = """
import json, sys

import redis

import redisq_django.core as core

assert "django" not in sys.modules, sorted(m for m in sys.modules if m.startswith("django"))
broker = core.Broker(redis.Redis.from_url(sys.argv[1]))
queue = sys.argv[2]
broker.consumers.ensure(queue, "worker", start="latest")
message_id = broker.publish(queue, {"n": 1}, headers={"from": "script"})
with broker.subscribe(queue, "worker", instance="w1") as sub:
    messages = sub.fetch(count=10, block_ms=1000)
    acked = sub.ack(messages)
print(json.dumps({
    "published": message_id,
    "received": [[m.id, m.payload, m.headers, m.attempts] for m in messages],
    "acked": acked,
    "django_modules": sorted(m for m in sys.modules if m.split(".")[0] == "django"),
}))
"""


@pytest.mark.slow  # a fresh Python process
def test_core_publishes_and_consumes_without_django(redis_url: str, queue_name: str) -> None:
    # Given a Python process with no Django settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    # When it imports the core, publishes one message and consumes it
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, redis_url, queue_name],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then it exits 0, got its message back, and never imported Django
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["received"] == [[report["published"], {"n": 1}, {"from": "script"}, 1]]
    assert report["acked"] == 1
    assert report["django_modules"] == []


def _imported_modules(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from redisq_django import conf" imports redisq_django.conf
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def test_no_core_module_imports_django() -> None:
    # Given every Python module under redisq_django/core
    sources = sorted(CORE_DIR.rglob("*.py"))
    assert CORE_DIR / "broker.py" in sources
    # When their imports are listed (also inside functions and TYPE_CHECKING blocks)
    offenders = {
        str(path.relative_to(CORE_DIR)): name
        for path in sources
        for name in _imported_modules(ast.parse(path.read_text(), filename=str(path)))
        if name.split(".")[0] == "django"
        or (name.startswith("redisq_django.") and not name.startswith("redisq_django.core"))
    }
    # Then none is Django, nor the Django layer of redisq_django
    assert offenders == {}
