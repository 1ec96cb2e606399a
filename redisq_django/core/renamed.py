"""Keyword parameters renamed since the last release, kept one minor version.

A method whose parameter got a new name still accepts the old one as a keyword, with a
``DeprecationWarning`` that says the new name; positional calls are untouched. Checked
once per call, before the method runs (a dict lookup on the keywords given).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


def renamed_keyword(old: str, new: str) -> Callable[[F], F]:
    """Let the decorated method be called with keyword ``old`` for ``new``.

    Args:
        old: the parameter's name in the last release.
        new: its name now.
    """

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{method.__qualname__}() got both {old!r} and {new!r}")
                warnings.warn(
                    f"{method.__qualname__}({old}=...) is deprecated and removed in the next "
                    f"minor version: pass {new}= (a {new} is what the subscription fetched; "
                    f"its message is {new}.message)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return method(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def moved_methods(cls: type, moves: dict[str, str]) -> None:
    """Give ``cls`` each method of the last release that moved to an object it holds:
    ``moves`` maps the old name to the new path from an instance (``"consumers.ensure"``:
    ``self.consumers.ensure``). Each warns (``DeprecationWarning``, naming the new path)
    and forwards its arguments as they are.
    """
    for old, new in moves.items():
        setattr(cls, old, _forward(cls.__name__, old, new))


def _forward(owner: str, old: str, new: str) -> Callable[..., Any]:
    attributes = new.split(".")

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            f"{owner}.{old}() is deprecated and removed in the next minor version: use "
            f"{owner.lower()}.{new}()",
            DeprecationWarning,
            stacklevel=2,
        )
        target = self
        for attribute in attributes:
            target = getattr(target, attribute)
        return target(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = old
    forward.__doc__ = f"Deprecated: ``{new}``."
    return forward
