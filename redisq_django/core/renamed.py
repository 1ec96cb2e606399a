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
