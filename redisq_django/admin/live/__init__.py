"""The admin's live side: what it reads from Redis and the pages that show it live.

- the admin's access to Redis (:mod:`.access`): :func:`admin_broker` (short timeouts,
  no retries), :func:`guarded` reads that give a :class:`Reading` (a value, or why Redis
  could not answer, with an outage remembered for a few seconds), :func:`live_stats` of
  many queues in two round trips (a :class:`Live`), :func:`queue_names`, :func:`status`,
  :func:`answered_ago_ms` (how old the last good figures are), and
  :func:`forget_figures` / :func:`clear` of what it cached;
- live figures in a changelist (:mod:`.row_figures`): :class:`LiveRows`, which the queue
  and consumer admins hold, and the :func:`live_column` columns that show them;
- the live pages of a logical consumer and of a queue (:mod:`.pages`, their actions
  :mod:`.page_actions`, whose they are :mod:`.scope`): :class:`LivePages`, which the
  consumer and queue admins hold and whose URLs they add to their own;
- what a live page reads (:mod:`.snapshots`: :func:`overview_trends` for the
  overview), its lists (:mod:`.lists`), an ordered consumer's held-back keys
  (:mod:`.held_keys`: :func:`declared_ordered`, :func:`ordered_text`), a partitioned
  queue's partitions side by side with the hot or stuck one flagged
  (:mod:`.partition_rows`), and the trend charts the live pages and the overview draw
  (:mod:`.charts`).

Everything outside this package imports these names from here (``tests/test_structure.py``
keeps it so); the modules inside import each other.
"""

from redisq_django.admin.live.access import (
    Live,
    Reading,
    admin_broker,
    answered_ago_ms,
    clear,
    forget_figures,
    guarded,
    live_stats,
    queue_names,
    status,
)
from redisq_django.admin.live.charts import range_links, range_of, trend_charts, unknown_charts
from redisq_django.admin.live.held_keys import declared_ordered, ordered_text
from redisq_django.admin.live.pages import LivePages
from redisq_django.admin.live.row_figures import CHANGE_LIST_TEMPLATE, LiveRows, live_column
from redisq_django.admin.live.scope import CONSUMER, QUEUE
from redisq_django.admin.live.snapshots import overview_trends

__all__ = [
    "CHANGE_LIST_TEMPLATE",
    "CONSUMER",
    "QUEUE",
    "Live",
    "LivePages",
    "LiveRows",
    "Reading",
    "admin_broker",
    "answered_ago_ms",
    "clear",
    "declared_ordered",
    "forget_figures",
    "guarded",
    "live_column",
    "live_stats",
    "ordered_text",
    "overview_trends",
    "queue_names",
    "range_links",
    "range_of",
    "status",
    "trend_charts",
    "unknown_charts",
]
