"""Settings of the processes the tasks tests start: tests.settings with TASKS on redisq
(the test's queue from ``REDISQ_TEST_TASK_QUEUE``, its OPTIONS as JSON from
``REDISQ_TEST_TASK_OPTIONS``) and the app declaring the sample tasks (tests/taskapp)."""

from __future__ import annotations

import json
import os

from tests.settings import *  # noqa: F403

# Its tasks.py imports tests/tasks/sample_tasks.py: the tasks these workers may run.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.taskapp"]  # noqa: F405

TASKS = {
    "default": {
        "BACKEND": "redisq_django.tasks.RedisqBackend",
        "QUEUES": ["default", os.environ.get("REDISQ_TEST_TASK_QUEUE", "default")],
        "OPTIONS": json.loads(os.environ.get("REDISQ_TEST_TASK_OPTIONS", "{}")),
    }
}

# The fault tests' crash budget (REDISQ["MAX_RETRIES"]), when they set one.
if os.environ.get("REDISQ_TEST_MAX_RETRIES"):
    REDISQ = {**REDISQ, "MAX_RETRIES": int(os.environ["REDISQ_TEST_MAX_RETRIES"])}  # noqa: F405
