"""The tasks the tasks tests' worker processes run: a worker runs only the tasks its
project declared (an installed app's ``tasks.py`` defines or imports them), never a
module a message names. Imported only with tests/tasks/settings.py (TASKS on redisq)."""

from __future__ import annotations

from tests.tasks.sample_tasks import *  # noqa: F403  (imported here: declared)
