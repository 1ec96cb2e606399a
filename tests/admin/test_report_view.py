"""The admin's history report view: the latest ``report.html`` under ARCHIVE_ROOT, served
to staff with ``redisq_django.view_queue`` only, a clear 404 when there is none.

The report here is a stand-in file: the view only reads it (no PySpark in the admin).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.support.admin_pages import staff

pytestmark = pytest.mark.django_db

PAGE = "<!DOCTYPE html><html><body><h1>redisq history report</h1><svg></svg></body></html>"
URL = "admin:redisq_django_overview_report"


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def write_report(root: Path, name: str, *, symlink: bool = True) -> Path:
    """``root/reports/<name>/report.html`` and ``latest`` pointing at it."""
    target = root / "reports" / name
    target.mkdir(parents=True)
    (target / "report.html").write_text(PAGE.replace("report<", f"report {name}<"))
    latest = root / "reports" / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    if symlink:
        os.symlink(name, latest)
    else:
        latest.write_text(name + "\n")
    return target


@pytest.fixture
def archive_root(settings: Any, tmp_path: Path) -> Path:
    settings.REDISQ = {"ARCHIVE_ROOT": str(tmp_path)}
    return tmp_path


def test_permitted_staff_get_the_latest_report(
    archive_root: Path, settings: Any, redis_url: str
) -> None:
    settings.REDISQ = {**settings.REDISQ, "URL": redis_url}  # the overview reads Redis
    write_report(archive_root, "2026-11-22T10-00-00Z")
    write_report(archive_root, "2026-11-23T10-00-00Z")
    client = client_for(staff("ops", "view_queue"))

    response = client.get(reverse(URL))

    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert b"report 2026-11-23T10-00-00Z" in response.content
    assert "default-src 'none'" in response["Content-Security-Policy"]
    overview = client.get(reverse("admin:redisq_django_overview_changelist"))
    assert reverse(URL).encode() in overview.content  # linked from the overview


def test_latest_as_a_text_file_where_symlinks_fail(archive_root: Path) -> None:
    write_report(archive_root, "2026-11-23T11-00-00Z", symlink=False)

    response = client_for(staff("ops", "view_queue")).get(reverse(URL))

    assert response.status_code == 200 and b"2026-11-23T11-00-00Z" in response.content


def test_no_report_is_a_clear_404(archive_root: Path) -> None:
    response = client_for(staff("ops", "view_queue")).get(reverse(URL))

    assert response.status_code == 404
    assert b"No report yet" in response.content
    assert b"manage.py redisq_pipeline report" in response.content


def test_no_archive_root_is_a_clear_404(settings: Any) -> None:
    settings.REDISQ = {}

    response = client_for(staff("ops", "view_queue")).get(reverse(URL))

    assert response.status_code == 404 and b"ARCHIVE_ROOT" in response.content


def test_others_are_refused(archive_root: Path) -> None:
    write_report(archive_root, "2026-11-23T10-00-00Z")

    assert client_for(staff("clerk")).get(reverse(URL)).status_code == 403
    not_staff = client_for(staff("user", "view_queue", is_staff=False)).get(reverse(URL))
    assert not_staff.status_code == 302 and "/login/" in not_staff["Location"]
    anonymous = Client().get(reverse(URL))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
