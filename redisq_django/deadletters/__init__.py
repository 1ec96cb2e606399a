"""Dead letters in the database, one wing for the admin and ``manage.py redisq dead``:
the sink from Redis (:mod:`.sinking`), which rows an operator means (:mod:`.selection`),
retry and discard of a few or of every one matching (:mod:`.triage`), and causes (dead
letters that failed the same way) and summaries (:mod:`.breakdown`). The Redis entry
itself is the core's ``DeadEntry``."""

import warnings
from typing import Any

from redisq_django.deadletters.breakdown import (
    BY_ERROR,
    BY_TASK,
    CAUSES_LIMIT,
    Cause,
    Summary,
    causes,
    summary,
)
from redisq_django.deadletters.selection import rows
from redisq_django.deadletters.sinking import SINK_BATCH, row_message_id, sink, sink_all
from redisq_django.deadletters.triage import (
    CHUNK,
    DISCARDED_LOG,
    BulkResult,
    RetryConflict,
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
    "CAUSES_LIMIT",
    "CHUNK",
    "DISCARDED_LOG",
    "SINK_BATCH",
    "BulkResult",
    "Cause",
    "RetryConflict",
    "Summary",
    "causes",
    "discard",
    "discard_matching",
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

#: Names of 0.9 for the causes, kept one minor version with a warning (docs/layout.md,
#: "Words": the word is the Redis consumer group's alone).
_RENAMED = {"groups": "causes", "Group": "Cause", "GROUPS_LIMIT": "CAUSES_LIMIT"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(
            f"redisq_django.deadletters.{name} is now redisq_django.deadletters.{new} (dead "
            f"letters that failed the same way are a cause; the word of the old name is "
            f"the Redis consumer group's). It is removed in the next minor version.",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
