"""Dead letters in the database: the sink from Redis and the triage the admin and
``manage.py redisq dead`` call (the Redis entry itself is the core's ``DeadEntry``)."""

from redisq_django.deadletters.sinking import SINK_BATCH, row_message_id, sink, sink_all
from redisq_django.deadletters.triage import discard, redrivable, retry

__all__ = ["SINK_BATCH", "discard", "redrivable", "retry", "row_message_id", "sink", "sink_all"]
