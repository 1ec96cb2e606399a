"""The archives' room of the core: what the history pipeline stored of each queue, and
the retention that trims a log only behind it.

- the named archives (``named.py``): :class:`Archives` registers, commits, lists and
  removes a queue's archives and their positions, per partition of a partitioned queue;
  :class:`Gap` says what an archive lost (:class:`Purge`: the part a purge
  removed), :class:`Unarchived` what a purge would make it lose; the streams archived
  and their fields;
- retention (``retention.py``): :func:`trim_log` trims a log behind every consumer and
  every archive, within the replay window and the caps; :func:`purge_place` empties a
  place, keeping its consumers registered.

Outside this room, import these names from here (``tests/test_structure.py`` keeps it so).
"""

from redisq_django.core.archives.named import (
    DEFAULT_ARCHIVE,
    LAG_COUNT_CAP,
    TRIMMED_FIELDS,
    ArchivedStream,
    ArchiveRegistration,
    Archives,
    ArchiveState,
    Gap,
    Purge,
    Registered,
    Unarchived,
    legacy_field,
    parse_id,
    stream_key,
)
from redisq_django.core.archives.retention import Purged, purge_place, trim_log

__all__ = [
    "DEFAULT_ARCHIVE",
    "LAG_COUNT_CAP",
    "TRIMMED_FIELDS",
    "ArchiveRegistration",
    "ArchiveState",
    "ArchivedStream",
    "Archives",
    "Gap",
    "Purge",
    "Purged",
    "Registered",
    "Unarchived",
    "legacy_field",
    "parse_id",
    "purge_place",
    "stream_key",
    "trim_log",
]
