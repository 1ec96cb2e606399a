"""What the browser tests share: their users' password and the real login form, the
rows of a changelist, and whether a page fits its viewport (the ``ops`` fixture is
tests/browser/conftest.py's)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Locator, Page, expect

from tests.support import admin_pages

#: The password of every user the browser tests make (the login form checks it).
PASSWORD = "a-long-test-password"
#: The viewports every page must fit without sideways scrolling: a laptop, a phone.
SIZES = {"1440": {"width": 1440, "height": 900}, "390": {"width": 390, "height": 844}}


def staff(username: str, *perms: str) -> User:
    """A staff user with these permissions (codenames) and :data:`PASSWORD`."""
    return admin_pages.staff(username, *perms, password=PASSWORD)


def log_in(page: Page, live_server: Any, user: User) -> None:
    """Through the real login form of the admin."""
    page.goto(f"{live_server.url}{reverse('admin:index')}")
    expect(page).to_have_url(f"{live_server.url}{reverse('admin:login')}?next=/admin/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#user-tools")).to_contain_text(user.username)


def result_rows(page: Page) -> Locator:
    return page.locator("#result_list tbody tr")


def fits(page: Page) -> dict[str, Any]:
    """Whether the page and its tables fit the viewport without sideways scrolling."""
    result: dict[str, Any] = page.evaluate(
        """() => {
        const tables = [...document.querySelectorAll(
            '#result_list, #redisq-overview, #redisq-causes, table.redisq-consumers, ' +
            '#redisq-list, .redisq-charts')];
        return {
            page: [document.documentElement.scrollWidth, window.innerWidth],
            tables: tables.map(t => {
                const box = t.closest('.results, .redisq-overview-box, .redisq-list-box')
                    || t.parentElement;
                return [t.id || t.className, t.scrollWidth, box.clientWidth];
            }),
        };
    }"""
    )
    return result


def assert_fits(page: Page, name: str) -> None:
    found = fits(page)
    width, inner = found["page"]
    assert width <= inner, f"{name}: the page is {width}px wide in a {inner}px viewport"
    for table, scroll, box in found["tables"]:
        assert scroll <= box + 1, f"{name}: table {table} is {scroll}px wide in {box}px"


def choose_filter(page: Page, title: str, value: str) -> None:
    """Choose ``value`` in the changelist filter ``title``, opening its menu first where
    the filters are a bar of menus (the dead letters' list, from 768 px)."""
    menu = page.locator(f'#changelist-filter details[data-filter-title="{title}"]')
    if not menu.evaluate("el => el.open"):
        menu.locator("summary").click()
    menu.get_by_role("link", name=value, exact=True).click()
