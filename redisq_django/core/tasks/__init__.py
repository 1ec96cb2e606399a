"""The Django tasks' room of the core (Django-free): where a task's result lives in Redis
and how it is written, read and listed.

- :class:`TaskResultStore` (``store.py``): a queue's task results, enqueue to settle;
- :class:`TaskPipe` (``pipe.py``): a worker's result writes, batched per round trip;
- the wire (``result_wire.py``): statuses, the logical consumer every task queue has, the
  enqueue and settle calls and the reads both the synchronous and the asyncio side run;
- the listing (``result_listing.py``): bounded reads of the latest results, for the admin.

Outside this room, import these names from here (``tests/test_structure.py`` keeps it so).
"""

from redisq_django.core.tasks.pipe import TaskPipe
from redisq_django.core.tasks.result_listing import Listed, latest_results, result_fields
from redisq_django.core.tasks.result_wire import (
    FAILED,
    ONCE,
    READY,
    RUNNING,
    STATUSES,
    SUCCESSFUL,
    TASKS_CONSUMER,
    decode_hash,
    found,
    read_commands,
    task_of,
)
from redisq_django.core.tasks.store import TaskResultStore

__all__ = [
    "FAILED",
    "ONCE",
    "READY",
    "RUNNING",
    "STATUSES",
    "SUCCESSFUL",
    "TASKS_CONSUMER",
    "Listed",
    "TaskPipe",
    "TaskResultStore",
    "decode_hash",
    "found",
    "latest_results",
    "read_commands",
    "result_fields",
    "task_of",
]
