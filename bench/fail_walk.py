"""The fail path's walk, counted: what one ``Subscription.fail`` of a delivery (a retry,
and a dead letter) goes through in our code before and after ``fail.lua`` runs (what it
costs: ``bench/settle_cost.py``).

A *stop* is a call into a function of ``redisq_django`` (``sys.setprofile``), at any
depth; a *return to a module* is a call made from that module's code into another
module's function (control comes back to it). Run against any tree of the package:
``python bench/fail_walk.py`` counts this checkout's; put another tree first on
``PYTHONPATH`` to count that one's (``git worktree`` or ``git archive`` of an older
commit), e.g. the numbers in bench/RESULTS.md, "The fail path's walk" (issue 33).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.append(str(BENCH_DIR.parent))  # after PYTHONPATH: a tree given there wins

import redisq_django  # noqa: E402
from redisq_django.core import Broker, CoreConfig, RetryPolicy  # noqa: E402
from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402

PACKAGE = str(Path(redisq_django.__file__).resolve().parent)


def _module(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    if not path.startswith(PACKAGE):
        return None
    return path[len(PACKAGE) + 1 :]


def walk(call: Any) -> tuple[list[str], Counter[str]]:
    """The stops of ``call()`` (``module:function``, in order) and, per module, how many
    calls from its code into another module's function returned to it."""
    stops: list[str] = []
    returns: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = _module(frame)
        if module is None:
            return
        stops.append(f"{module}:{frame.f_code.co_name}")
        caller = frame.f_back and _module(frame.f_back)
        if caller is not None and caller != module:
            returns[caller] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return stops, returns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--history", action="store_true", help="with lifecycle events")
    ap.add_argument("--list", action="store_true", help="print every stop")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="redisq-walk-") as tmp:
        server = RedisServer(find_redis_server(), Path(tmp)).start()
        try:
            broker = Broker(server.client(), CoreConfig(history=args.history))
            broker.consumers.ensure("walk", "billing")
            broker.publish_many("walk", [{"n": 1}, {"n": 2}, {"n": 3}])
            policy = RetryPolicy(max_retries=1)
            with broker.subscribe("walk", "billing", "i1", policy=policy) as sub:
                first, second, third = sub.fetch(count=3, block_ms=100)
                sub.fail(first, ValueError("warm-up"))  # scripts loaded, caches warm
                print(f"package: {PACKAGE}")
                for name, delivery, policy in (
                    ("retry", second, RetryPolicy(max_retries=1)),
                    ("dead letter", third, RetryPolicy(max_retries=0)),
                ):
                    sub.policy = policy
                    stops, returns = walk(lambda d=delivery: sub.fail(d, ValueError("x")))
                    shown = ", ".join(f"{m} {n}" for m, n in returns.most_common())
                    print(f"{name}: {len(stops)} stops; returns to: {shown}")
                    if args.list:
                        print("  " + "\n  ".join(stops))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
