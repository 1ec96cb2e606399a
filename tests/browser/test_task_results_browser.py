"""The task results page in a real browser: results of tasks run by a worker, filtered by
status and task, one result's page with its traceback, and Retry from its dead letter
making the result READY again."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.core.management import call_command
from django.tasks import TaskResultStatus
from playwright.sync_api import Page, expect

from redisq_django.deadletters.sinking import sink
from tests.support.browser_pages import log_in, result_rows, staff

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
QUEUE = "browser"


@pytest.fixture
def sample(settings: Any, redis_url: str, monkeypatch: Any) -> Any:
    settings.REDISQ = {"URL": redis_url}
    settings.TASKS = {
        "default": {
            "BACKEND": "redisq_django.tasks.RedisqBackend",
            "QUEUES": ["default", QUEUE],
        }
    }
    monkeypatch.setenv("REDISQ_TEST_RUNS_URL", redis_url)
    return importlib.import_module("tests.tasks.sample_tasks")


def run_worker() -> None:
    call_command(
        "runconsumer", "--tasks", QUEUE, "--burst", "--stats-interval", "0", stdout=io.StringIO()
    )


def test_results_are_listed_filtered_and_a_failed_one_is_retried_from_its_dead_letter(
    page: Page, live_server: Any, sample: Any, artifacts: Path
) -> None:
    # Given two successful tasks and a failed one, run by a worker
    ok = [sample.calculate.using(queue_name=QUEUE).enqueue(i, 1) for i in range(2)]
    failed = sample.failing.using(queue_name=QUEUE).enqueue("card <b>declined</b>")
    run_worker()
    sink(f"tasks.{QUEUE}", "tasks")
    ops = staff("ops", "view_taskresults", "view_deadletter", "retry_deadletter")

    # When staff open Task results from the admin index
    log_in(page, live_server, ops)
    page.locator("#content-main").get_by_role("link", name="Task results", exact=True).click()
    expect(result_rows(page)).to_have_count(3)
    page.screenshot(path=str(artifacts / "task-results.png"), full_page=True)

    # Then they filter by status and by task
    status_filter = page.locator('#changelist-filter details[data-filter-title="status"]')
    status_filter.get_by_role("link", name="FAILED", exact=True).click()
    expect(result_rows(page)).to_have_count(1)
    expect(result_rows(page).first).to_contain_text("tests.tasks.sample_tasks.failing")
    status_filter = page.locator('#changelist-filter details[data-filter-title="status"]')
    status_filter.get_by_role("link", name="All", exact=True).click()
    task_filter = page.locator('#changelist-filter details[data-filter-title="task"]')
    task_filter.get_by_role("link", name="tests.tasks.sample_tasks.calculate", exact=True).click()
    expect(result_rows(page)).to_have_count(2)
    expect(result_rows(page).locator(".redisq-status")).to_have_text(["SUCCESSFUL"] * 2)
    assert {ok[0].id, ok[1].id} == set(result_rows(page).locator("th a").all_inner_texts())

    # And open the failed one: its traceback is shown as text, with a link to its dead letter
    page.goto(f"{live_server.url}/admin/redisq_django/taskresults/result/{failed.id}/")
    expect(page.locator(".redisq-task-error pre")).to_contain_text(
        "ValueError: card <b>declined</b>"
    )
    page.screenshot(path=str(artifacts / "task-result-failed.png"), full_page=True)
    page.locator("#redisq-task-result").get_by_role("link", name="dead", exact=True).click()

    # When they retry the dead letter, the result is READY again
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".messagelist")).to_contain_text(f"{failed.id} sent again")
    page.goto(f"{live_server.url}/admin/redisq_django/taskresults/result/{failed.id}/")
    expect(page.locator("#redisq-task-result .redisq-status")).to_have_text("READY")
    failed.refresh()
    assert failed.status == TaskResultStatus.READY


def test_the_console_page_fits_1366_pages_and_retries_a_failed_task(
    page: Page, live_server: Any, sample: Any, artifacts: Path
) -> None:
    # Given 55 successful tasks with long arguments and a failed one, run by a worker
    for i in range(55):
        sample.calculate.using(queue_name=QUEUE).enqueue(i, 10**40, scale=7)
    failed = sample.failing.using(queue_name=QUEUE).enqueue("x" * 300)
    run_worker()
    sink(f"tasks.{QUEUE}", "tasks")
    ops = staff("ops", "view_taskresults", "change_taskresults")

    # When staff open the task results on a 1366x768 laptop
    page.set_viewport_size({"width": 1366, "height": 768})
    log_in(page, live_server, ops)
    page.goto(f"{live_server.url}/admin/redisq_django/taskresults/")
    page.screenshot(path=str(artifacts / "task-results-1366.png"), full_page=True)

    # Then 50 rows show, one line each, no column cut off, the statuses as badges
    expect(result_rows(page)).to_have_count(50)
    found = page.evaluate(
        """() => {
        const table = document.querySelector('#result_list');
        const rows = [...table.querySelectorAll('tbody tr')];
        const cell = table.querySelector('tbody td');
        return {
            table: [table.scrollWidth, table.closest('.results').clientWidth],
            page: [document.documentElement.scrollWidth, window.innerWidth],
            tallest: Math.max(...rows.map(r => r.getBoundingClientRect().height)),
            line: parseFloat(getComputedStyle(cell).lineHeight),
        };
    }"""
    )
    assert found["table"][0] <= found["table"][1] + 1, found
    assert found["page"][0] <= found["page"][1], found
    assert found["tallest"] <= 2 * found["line"], found
    badge = result_rows(page).locator(".redisq-status.redisq-active").first
    expect(badge).to_have_text("SUCCESSFUL")

    # And the next page holds the other 6
    page.locator("#redisq-next").click()
    expect(result_rows(page)).to_have_count(6)

    # When they filter the FAILED ones and press Retry
    status_filter = page.locator('#changelist-filter details[data-filter-title="status"]')
    status_filter.get_by_role("link", name="FAILED", exact=True).click()
    expect(result_rows(page)).to_have_count(1)
    result_rows(page).get_by_role("button", name="Retry").click()

    # Then the page says the task was enqueued again, and the new result is READY
    message = page.locator("ul.messagelist li.success")
    expect(message).to_contain_text("tests.tasks.sample_tasks.failing enqueued again")
    new_id = message.inner_text().split("new result ")[1].split(".")[0]
    page.goto(f"{live_server.url}/admin/redisq_django/taskresults/result/{new_id}/")
    expect(page.locator("#redisq-task-result .redisq-status")).to_have_text("READY")
    assert new_id != failed.id
