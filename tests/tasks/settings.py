"""Settings of the processes the tasks tests start: tests.settings with TASKS on redisq
(the test's queue from ``REDISQ_TEST_TASK_QUEUE``)."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

TASKS = {
    "default": {
        "BACKEND": "redisq_django.tasks.RedisqBackend",
        "QUEUES": ["default", os.environ.get("REDISQ_TEST_TASK_QUEUE", "default")],
    }
}
