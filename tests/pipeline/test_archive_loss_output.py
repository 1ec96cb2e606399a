"""What the archive command prints when it stops on data loss (``failOnDataLoss``): the
line that says what is gone and what to do, and hardly anything else, measured on the
process's real stdout and stderr (Spark's JVM and Python workers write there too)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.pipeline.cli import main
from tests.pipeline.archive_support import REPO, archive_cli, cli_env, publish

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: Most lines the command may print when it stops on data loss.
MOST_LINES = 10


@pytest.mark.timeout(300)
def test_the_stop_on_data_loss_prints_its_line_and_little_else(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given an archive that stored 50 messages, then a hard cap that dropped 200 it had
    # not stored
    broker = Broker(redis_client, CoreConfig(max_len=100, replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    root = tmp_path / "archive"
    ids = publish(broker, queue_name, 50)
    args = ["--redis-url", redis_url, "--root", str(root), "--queue", queue_name, "--once"]
    assert main(["archive", *args]) == 0
    ids += publish(broker, queue_name, 300, start=50)
    assert broker.trim(queue_name) == (0, 250)

    # When the archive command runs, as a process of its own
    done = subprocess.run(
        archive_cli(*args), cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=240
    )

    # Then it stops with exit status 1, saying what is gone and what to do...
    assert done.returncode == 1, done.stderr[-3000:]
    said = (
        "python -m redisq_django.pipeline archive: failed: archive stopped: Data loss in the "
        f"messages of queue {queue_name!r}: entries {ids[50]} to {ids[249]} (200) were "
        "removed before archive 'default' read them"
    )
    lines = done.stdout.splitlines() + done.stderr.splitlines()
    assert any(line.startswith(said) for line in lines), done.stderr[-3000:]
    # ...in a few lines, no stack trace among them
    assert len(lines) <= MOST_LINES, "\n".join(lines)
    assert not [line for line in lines if line.lstrip().startswith(("at ", "File "))]
