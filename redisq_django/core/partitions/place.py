"""Where a message lives: a queue, or one partition of a partitioned queue.

``Place("orders")`` is a queue of one partition (or every partition of one, where that
means something: a merged list); ``Place("orders", 2)`` is partition 2. The broker's
objects take a place where they need one, instead of a queue and a ``partition=``
keyword each; a plain queue name is a place too. Written ``"orders#2"`` (the
partition's hash tag, ``{orders#2}``, and the pipeline's streaming offsets say the
same): :meth:`Place.parse` reads it back.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Place:
    """A queue (``partition`` None) or one of its partitions (0 to K - 1)."""

    queue: str
    partition: int | None = None

    def __str__(self) -> str:
        return self.queue if self.partition is None else f"{self.queue}#{self.partition}"

    @classmethod
    def parse(cls, text: str) -> Place:
        """``"orders#2"`` as ``Place("orders", 2)``; ``"orders"`` as ``Place("orders")``.

        Raises:
            ValueError: what follows ``#`` is not a partition number.
        """
        queue, hashed, part = text.partition("#")
        if not hashed:
            return cls(queue)
        if not (part.isascii() and part.isdigit()):
            raise ValueError(f"{text!r} is no place: after '#' comes a partition number.")
        return cls(queue, int(part))


def place_of(where: str | Place, partition: Any = None, *, caller: str = "") -> Place:
    """``where`` as a place; ``partition``: the ``partition=`` keyword of 0.9, which the
    place replaces (kept one minor version, with a ``DeprecationWarning``).

    Raises:
        TypeError: both a place with a partition and ``partition=``.
    """
    place = where if isinstance(where, Place) else Place(where)
    if partition is None:
        return place
    if place.partition is not None:
        raise TypeError(f"{caller}() got a place with a partition and partition= too")
    warnings.warn(
        f"{caller}(..., partition=...) is deprecated and removed in the next minor version: "
        f"pass Place({place.queue!r}, {partition!r}) where the queue goes",
        DeprecationWarning,
        stacklevel=3,
    )
    return Place(place.queue, partition)
