"""The README's examples run as written (the Spark section's: tests/pipeline/
test_readme_spark.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.readme import README, blocks


# The README's example uses the fixed queue "orders" and expects its consumers to be new.
@pytest.mark.usefixtures("empty_redis")
def test_readme_quick_start_runs_as_written(redisq_settings: Any) -> None:
    quick_start = [b for b in blocks(README.read_text()) if b.mark == "" and b.lang == "python"]
    assert quick_start, "README lost its tested quick-start block"
    for block in quick_start:
        exec(compile(block.code, str(README), "exec"), {})  # our own README, not input
