"""The operator's room of the core: what the admin, ``manage.py redisq`` and the metrics
read and do, through :class:`QueueOperator` (``broker.operator``).

- ``queue_operator.py``: :class:`QueueOperator`, the face the broker hands out;
- ``browse.py``: every message before it dies, page by page (waiting, delayed, retrying,
  in flight, the log), and one found again by its ref;
- ``partition_pages.py``: those pages merged over a partitioned queue's partitions;
- ``actions.py``: deliver now, deliver what waits, end a message, purge one consumer;
- ``trend_sampler.py``: the site's sampled figures, one sampler at a time;
- ``server.py``: what the Redis server lacks for redisq (version, persistence, memory
  policy).

Outside this room, import these names from here (``tests/test_structure.py`` keeps it so).
"""

from redisq_django.core.members import S_DELAYED, S_DIRECT, S_LOG, S_RETRY
from redisq_django.core.operator.actions import ENDABLE, Ended, Undeliverable
from redisq_django.core.operator.browse import (
    DELAYED,
    IN_FLIGHT,
    LOG,
    MAX_PAGE,
    PAGE_SIZE,
    RETRYING,
    WAITING,
    Entry,
    Page,
)
from redisq_django.core.operator.partition_pages import split_ref
from redisq_django.core.operator.queue_operator import QueueOperator
from redisq_django.core.operator.server import ServerProblem

__all__ = [
    "DELAYED",
    "ENDABLE",
    "IN_FLIGHT",
    "LOG",
    "MAX_PAGE",
    "PAGE_SIZE",
    "RETRYING",
    "S_DELAYED",
    "S_DIRECT",
    "S_LOG",
    "S_RETRY",
    "WAITING",
    "Ended",
    "Entry",
    "Page",
    "QueueOperator",
    "ServerProblem",
    "Undeliverable",
    "split_ref",
]
