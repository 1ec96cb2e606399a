"""The README's and the documentation pages' examples run as written: every Python block
marked ``<!-- readme-test -->`` (the Spark section's blocks: tests/pipeline/
test_readme_spark.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.readme import README, ROOT, Block, blocks, pages


def _runnable(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return [b for b in blocks(text) if b.mark == "" and b.lang == "python"]


CASES = [
    pytest.param(path, block, id=f"{path.relative_to(ROOT)}:{block.line}")
    for path in [README, *pages()]
    for block in _runnable(path)
]


def test_the_readme_keeps_its_tested_quick_start() -> None:
    assert _runnable(README), "README lost its tested quick-start block"


# The examples use fixed queues ("orders") and expect their consumers to be new.
@pytest.mark.usefixtures("empty_redis")
@pytest.mark.parametrize(("path", "block"), CASES)
def test_example_runs_as_written(path: Path, block: Block, redisq_settings: Any) -> None:
    where = f"{path}:{block.line}"
    exec(compile(block.code, where, "exec"), {})  # our own docs, not input
