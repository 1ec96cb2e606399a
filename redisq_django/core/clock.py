"""Time in milliseconds since the epoch: the unit of stream ids, due times and scores."""

from __future__ import annotations

import datetime as dt
import time


def now_ms() -> int:
    """This host's wall clock, ms since the epoch: for times kept or shown for
    information (``published_at``, failure times, stats), never to decide what is due.

    A host's clock may be skewed, or stepped by NTP or a resumed VM. What is due (a
    delivery, a lease, a promotion, a schedule tick) is decided by Redis's clock: the
    scripts read ``TIME``. How long to wait is timed with :func:`monotonic_ms`.
    """
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """This host's monotonic clock, ms: for local timers only (when to look again, how
    long to block). A wall-clock step does not move it; its zero means nothing, so it is
    never stored nor compared with another host's time or with Redis's."""
    return time.monotonic_ns() // 1_000_000


#: The last millisecond a ``datetime`` can hold (9999-12-31T23:59:59.999Z). Envelope
#: times beyond it are refused at decode: they could be neither shown nor stored.
MAX_TIME_MS = 253_402_300_799_999


def ms_to_datetime(ms: int) -> dt.datetime:
    """An aware UTC datetime from milliseconds since the epoch.

    Raises:
        ValueError: ``ms`` is negative or after :data:`MAX_TIME_MS`.
    """
    if not 0 <= ms <= MAX_TIME_MS:
        raise ValueError(f"{ms} ms since the epoch is not a time between 1970 and 9999")
    return _EPOCH + dt.timedelta(milliseconds=ms)


def datetime_to_ms(when: dt.datetime) -> int:
    """Milliseconds since the epoch of an aware datetime, rounded *up*, so a due time
    computed from it is never earlier than ``when``.

    Raises:
        ValueError: ``when`` is naive.
    """
    if when.tzinfo is None:
        raise ValueError(f"{when!r} has no time zone; pass an aware datetime.")
    micros = (when - _EPOCH) // dt.timedelta(microseconds=1)
    return -(-micros // 1000)


def ms_from_entry_id(entry_id: bytes | str) -> int:
    """The millisecond part of a stream entry id (``b"1700000000000-3"`` → 1700000000000)."""
    if isinstance(entry_id, bytes):  # int() reads ASCII digits in bytes: no text made
        return int(entry_id.partition(b"-")[0])
    return int(entry_id.partition("-")[0])


#: The largest sequence number of a stream entry id: ``f"{ms}-{MAX_SEQ}"`` is the last
#: possible id of millisecond ``ms``.
MAX_SEQ = 2**64 - 1


def first_id_of_ms(ms: int) -> str:
    """The first possible stream entry id of millisecond ``ms`` (``0-0`` before the epoch)."""
    return f"{max(ms, 0)}-0"


def last_id_of_ms(ms: int) -> str:
    """The last possible stream entry id of millisecond ``ms`` (``0-0`` before the epoch)."""
    return f"{ms}-{MAX_SEQ}" if ms >= 0 else "0-0"


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
