"""Without the ``pipeline`` extra, everything but the pipeline works: the package, the
core, the admin, the checks, the commands; ``redisq_pipeline`` says what to install; the
archive's committed files can be listed (``archive_files``) for other engines."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import redisq_django

ROOT = Path(redisq_django.__file__).parent.parent

PROGRAM = textwrap.dedent(
    """
    import importlib.abc, io, sys

    class NoSpark(importlib.abc.MetaPathFinder):
        # As if the pipeline extra were not installed.
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyspark", "pyarrow", "pandas"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoSpark())

    import django
    django.setup()
    import redisq_django, redisq_django.core, redisq_django.admin
    from redisq_django import publish, consumer
    from django.core.management import call_command
    from django.core.management.base import CommandError

    call_command("migrate", verbosity=0)  # an in-memory database of its own
    call_command("check")
    out = io.StringIO()
    call_command("redisq", "status", stdout=out)
    try:
        call_command("redisq_pipeline", "archive", "--once")
    except CommandError as exc:
        message = str(exc)
    else:
        raise AssertionError("redisq_pipeline ran without PySpark")
    assert "pipeline extra" in message and "pip install" in message, message

    # The archive's committed files, for engines other than Spark, need no PySpark.
    import json, pathlib, tempfile
    from redisq_django.pipeline import archive_files
    root = pathlib.Path(tempfile.mkdtemp())
    log = root / "messages" / "_spark_metadata"
    log.mkdir(parents=True)
    part = f"{root}/messages/queue=q/date=2026-11-01/part-0.parquet"
    (log / "0").write_text("v1\\n" + json.dumps({"path": f"file:{part}", "action": "add"}))
    assert archive_files(str(root)) == [part], archive_files(str(root))
    assert not [m for m in sys.modules if m.split(".")[0] in ("pyspark", "pyarrow")]
    print("ok")
    """
)


@pytest.mark.slow  # a fresh Python process
def test_everything_but_the_pipeline_works_without_pyspark(redis_url: str) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "REDISQ_TEST_URL": redis_url,
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
