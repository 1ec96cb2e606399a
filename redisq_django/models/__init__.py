"""The app's models, one module per concern, all importable from here as Django expects.

- :mod:`.queues`: ``Queue`` and ``Consumer`` (the queue configuration, with admin
  overrides) and the proxies behind the overview and task-result pages;
- :mod:`.deadletters`: ``DeadLetter`` and ``DeadLetterFailure`` (every death kept);
- :mod:`.outbox`: ``OutboxMessage`` (the transactional outbox);
- :mod:`.schedules`: ``Schedule`` (periodic schedules);
- :mod:`.inbox`: ``InboxEntry`` (the messages ``atomic=True`` consumers handled).
"""

from redisq_django.models.deadletters import DeadLetter, DeadLetterFailure
from redisq_django.models.inbox import InboxEntry
from redisq_django.models.outbox import OutboxMessage
from redisq_django.models.queues import (
    SOURCE_CODE,
    SOURCE_DEFAULT,
    SOURCE_OVERRIDE,
    TUNABLES,
    Consumer,
    Effective,
    Overview,
    Queue,
    TaskResults,
    override_problem,
)
from redisq_django.models.schedules import Schedule, default_timezone

__all__ = [
    "SOURCE_CODE",
    "SOURCE_DEFAULT",
    "SOURCE_OVERRIDE",
    "TUNABLES",
    "Consumer",
    "DeadLetter",
    "DeadLetterFailure",
    "Effective",
    "InboxEntry",
    "OutboxMessage",
    "Overview",
    "Queue",
    "Schedule",
    "TaskResults",
    "default_timezone",
    "override_problem",
]
