"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
MARKED_BLOCK = re.compile(r"<!-- readme-test -->\n```python\n(.*?)```", re.S)


# The README's example uses the fixed queue "orders" and expects its consumers to be new.
@pytest.mark.usefixtures("empty_redis")
def test_readme_quick_start_runs_as_written(redisq_settings: Any) -> None:
    blocks = MARKED_BLOCK.findall(README.read_text())
    assert blocks, "README lost its tested quick-start block"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {})  # our own README, not input
