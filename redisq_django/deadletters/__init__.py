"""Dead letters in the database, one wing for the admin and ``manage.py redisq dead``:
the sink from Redis (:mod:`.sinking`), which rows an operator means (:mod:`.selection`),
retry and discard of a few or of every one matching (:mod:`.triage`), and groups by error
and summaries (:mod:`.breakdown`). The Redis entry itself is the core's ``DeadEntry``."""

from redisq_django.deadletters.breakdown import (
    BY_ERROR,
    BY_TASK,
    GROUPS_LIMIT,
    Group,
    Summary,
    groups,
    summary,
)
from redisq_django.deadletters.selection import rows
from redisq_django.deadletters.sinking import SINK_BATCH, row_message_id, sink, sink_all
from redisq_django.deadletters.triage import (
    CHUNK,
    DISCARDED_LOG,
    BulkResult,
    discard,
    discard_matching,
    not_redrivable_reason,
    redrivable,
    retried_log,
    retry,
    retry_matching,
)

__all__ = [
    "BY_ERROR",
    "BY_TASK",
    "CHUNK",
    "DISCARDED_LOG",
    "GROUPS_LIMIT",
    "SINK_BATCH",
    "BulkResult",
    "Group",
    "Summary",
    "discard",
    "discard_matching",
    "groups",
    "not_redrivable_reason",
    "redrivable",
    "retried_log",
    "retry",
    "retry_matching",
    "row_message_id",
    "rows",
    "sink",
    "sink_all",
    "summary",
]
