"""The metrics reference page (docs/reference/metrics.md) lists exactly the metrics we
export, with their types."""

from __future__ import annotations

import re

from redisq_django.metrics import families
from tests.support.readme import DOCS

PAGE = DOCS / "reference" / "metrics.md"
ROW = re.compile(r"^\| `(redisq_\w+)` \| (counter|gauge|histogram) \|", re.M)


def test_the_reference_table_lists_every_metric_and_its_type() -> None:
    documented = dict(ROW.findall(PAGE.read_text(encoding="utf-8")))
    assert documented == {f.name: f.kind.value for f in families.ALL}
