"""Who owns a named archive: a token the archive's query keeps in its checkpoint.

Two queries under one archive name would both move its position, and retention would
then delete what one of them never stored. So a name is owned by one query, fenced as
Kafka fences a second producer with the same ``transactional.id``: the query's offsets,
which Spark logs in its checkpoint before each micro-batch runs, carry a token under
:data:`OWNER` beside each stream's last entry id; the query registers and commits with it
(:meth:`~redisq_django.core.archives.Archives.register`), and Redis refuses another
token once the name is owned (``ArchiveOwned``), unless the user takes the name over
(option ``takeOver``, ``--take-over``).

A new query makes its token in ``initialOffset``; a query resumed from a checkpoint of an
earlier version (offsets without a token) makes one at its first batch, which the batch's
logged end offset then carries. The name is claimed only by a commit of an offset Spark
has logged, so a query killed before its first batch was logged starts again with a new
token and is not refused. Spark also calls ``initialOffset`` when a query resumes before
its first batch was committed (to learn where that batch started): the token made there
is not the query's, so nothing is checked or claimed with it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping

#: The offset key holding the owner token: no stream is called so (queue names are
#: letters, digits and ``_.-``; a partition adds ``#i``, dead letters ``:consumer``).
OWNER = "@owner"


def new_token() -> str:
    """A fresh owner token (random, 128 bits)."""
    return secrets.token_hex(16)


def split(offset: Mapping[str, str] | None) -> tuple[str, dict[str, str]]:
    """``(token, streams)`` of an offset: its owner token ("" when it carries none: a new
    query's, or one an earlier version logged) and its streams' positions."""
    streams = dict(offset or {})
    return streams.pop(OWNER, ""), streams


def carry(token: str, streams: Mapping[str, str]) -> dict[str, str]:
    """``streams`` as an offset carrying ``token`` (none when it is "")."""
    return {OWNER: token, **streams} if token else dict(streams)
