"""The doctor: a consistent report, and fixing twice changes nothing the second time."""

import os

import pytest
from rich.console import Console

from emu.host.doctor import check, dockerd_pids

pytestmark = pytest.mark.emu

CHECKS = ["platform", "root", "docker engine", "docker SDK", "arm64 (qemu binfmt)",
          "debootstrap", "static busybox", "docker-registry", "kernel netem", "link shaper"]


@pytest.fixture(autouse=True)
def as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the doctor's fixes need root")


def test_the_report_is_consistent() -> None:
    report = check(report=lambda line: pytest.fail(f"check without fix acted: {line}"))
    assert [item.name for item in report.checks] == CHECKS
    assert all(item.status in ("ok", "missing", "failed") for item in report.checks)
    assert report.ready == all(item.passed for item in report.checks)
    netem = next(item for item in report.checks if item.name == "kernel netem")
    assert not netem.required
    assert report.shaper is not None
    if report.shaper.shaper == "netem":
        assert netem.status == "ok"
    console = Console(record=True, width=200)
    console.print(report.table())
    text = console.export_text()
    assert all(name in text for name in CHECKS)


def test_fixing_twice_is_idempotent() -> None:
    first = check(fix=True, report=lambda line: None)
    assert first.ready, first.checks
    engines = dockerd_pids()
    actions: list[str] = []
    second = check(fix=True, report=actions.append)
    assert second.ready
    assert actions == []
    assert [item.status for item in second.checks if item.required] == ["ok"] * 7
    # Not required (agents then start one by one), but the fix installs it.
    assert next(c for c in second.checks if c.name == "static busybox").status == "ok"
    assert dockerd_pids() == engines
    assert len(engines) == 1
