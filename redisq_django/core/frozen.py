"""Frozen values built at the speed of plain ones.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: about
1.3 µs more per object than a plain slots dataclass (bench/RESULTS.md, "A frozen
Message"), paid for every message a worker fetches (:class:`~redisq_django.core.message.
Message`) and every one a publisher or a replay sends (:class:`~redisq_django.core.
envelope.Envelope`). So such a class keeps its fields in a plain slots dataclass, its
base, and subclasses it with :class:`Frozen` first: an object is built as the base at
full speed, then its class is set to the frozen one, which refuses every change. Same
slots, so the swap moves nothing, and reads cost what they cost before.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any


class _BuiltAsFields(type):
    """Builds a :class:`Frozen` class's objects as its fields' dataclass, then freezes
    them: no ``__new__`` and ``__init__`` of its own to pass the arguments through again."""

    _built_as: type

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        value = cls._built_as(*args, **kwargs)
        value.__class__ = cls  # frozen from here on
        return value


class Frozen(metaclass=_BuiltAsFields):
    """The frozen face of a slots dataclass: ``class Message(Frozen, MessageFields)``.

    Assigning or deleting a field raises ``dataclasses.FrozenInstanceError``;
    ``dataclasses.replace(value, **changes)`` builds another. Equal values are equal and,
    when their fields are, hashable, as a frozen dataclass's are; copies and pickles are
    rebuilt from the fields.
    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields_class = next(b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b))
        cls._built_as = fields_class
        # Its documented signature is its fields' (``help()``, the docs).
        cls.__signature__ = inspect.signature(fields_class)  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        kind = type(self).__name__
        article = "an" if kind[0] in "AEIOU" else "a"
        raise dataclasses.FrozenInstanceError(
            f"cannot assign to field {name!r}: {article} {kind} is frozen; "
            f"dataclasses.replace({kind.lower()}, {name}=...) builds another"
        )

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(
            f"cannot delete field {name!r}: this {type(self).__name__} is frozen"
        )

    def _items(self) -> tuple[tuple[str, Any], ...]:
        return tuple((f.name, getattr(self, f.name)) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return hash(self._items())

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy rebuild it from its fields (its __new__ needs them), by name:
        # a keyword-only dataclass takes no positional ones.
        return (_rebuild, (type(self), self._items()))


def _rebuild(cls: type[Frozen], items: tuple[tuple[str, Any], ...]) -> Frozen:
    return cls(**dict(items))
