"""README.md's metrics table lists exactly the metrics we export, with their types."""

from __future__ import annotations

import re
from pathlib import Path

from redisq_django.metrics import families

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `(redisq_\w+)` \| (counter|gauge|histogram) \|", re.M)


def test_the_readme_table_lists_every_metric_and_its_type() -> None:
    documented = dict(ROW.findall(README.read_text()))
    assert documented == {f.name: f.kind.value for f in families.ALL}
