"""The partitions' room of the core: a queue of K partitions, where each message goes,
what Redis records of K, and "where" as one small value.

- ``routing.py``: :class:`Partitions`, the key hash (:func:`partition_of`) and
  :func:`route`;
- ``record.py``: K recorded in Redis and checked where each write happens
  (:func:`retried`, :func:`recorded`, the first-use :func:`checking`);
- ``place.py``: :class:`Place`, a queue or one of its partitions.

What builds on them lives beside what it partitions: the broker's ``broker.partitions``
(``core/layouts.py``) and changing K (``core/repartition.py``) beside the broker's other
objects, a partitioned queue's stats beside the stats (``core/partition_stats.py``), its
pages beside the pages (``core/operator/partition_pages.py``). Outside this room,
import these names from here (``tests/test_structure.py`` keeps it so).
"""

from redisq_django.core.partitions.place import Place, place_of
from redisq_django.core.partitions.record import (
    FENCE_PREFIX,
    META_FIELD,
    arecorded,
    aretried,
    arun_steps,
    checking,
    parse_recorded,
    recorded,
    refused,
    retried,
    run_steps,
)
from redisq_django.core.partitions.routing import (
    MAX_PARTITIONS,
    Partitions,
    partition_of,
    pick,
    route,
)

__all__ = [
    "FENCE_PREFIX",
    "MAX_PARTITIONS",
    "META_FIELD",
    "Partitions",
    "Place",
    "arecorded",
    "aretried",
    "arun_steps",
    "checking",
    "parse_recorded",
    "partition_of",
    "pick",
    "place_of",
    "recorded",
    "refused",
    "retried",
    "route",
    "run_steps",
]
