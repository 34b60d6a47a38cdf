"""Real Chromium for the browser tests: Debian's ``chromium`` driven by Playwright for Python.

Playwright's own browser downloads are never used (no ``playwright install``): it drives the
system's Chromium through ``executable_path``. Where Chromium or Playwright is missing, the
tests skip with a loud message on a developer's machine, and FAIL under CI (``CI=true``),
so a CI run can never pass without having run them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

#: Names of the Chromium executable on Debian, Ubuntu and elsewhere, tried in this order.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def in_ci() -> bool:
    """True where the CI environment variable says so (GitHub, GitLab and .ci/run set it)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


#: Start of every skip reason here; conftest.py repeats such skips loudly at the end of a run.
NO_BROWSER = "no headless chromium installed"


def _missing(what: str) -> None:
    # .ci/run installs Debian's chromium; where it cannot (not root, no apt-get, apt failed)
    # it says why in PIPEMARE_NO_BROWSER, and only then may CI skip instead of failing.
    impossible = os.environ.get("PIPEMARE_NO_BROWSER", "")
    message = (
        f"{NO_BROWSER} (BROWSER TESTS NOT RUN): {what}. Install Debian's chromium "
        "(`apt-get install -y chromium`) and the test dependencies (`make setup`); "
        "CI fails here instead of skipping."
    )
    if impossible:
        message += f" Installing was impossible here: {impossible}."
    if in_ci() and not impossible:
        pytest.fail(message, pytrace=False)
    warnings.warn(message, stacklevel=3)
    pytest.skip(message)


def chromium_path() -> str:
    """The system Chromium, or a skip (a failure under CI) saying what is missing."""
    found = next((shutil.which(name) for name in CHROMIUM_NAMES if shutil.which(name)), None)
    if found is None:
        _missing(f"no Chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)})")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("the playwright package is not installed")
    return found


@contextlib.contextmanager
def chromium(viewport: tuple[int, int] = (1280, 900)) -> Iterator[object]:
    """A headless Chromium browser context (Playwright's ``BrowserContext``)."""
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        # --no-sandbox: containers (CI, this machine) run as root, where the sandbox refuses
        browser = driver.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
            context.set_default_timeout(60_000)
            yield context
            context.close()
        finally:
            browser.close()


@dataclass
class PageProblems:
    """What went wrong while a page was open: console errors, script errors, failed requests."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        """Every problem, one line each."""
        return (
            [f"console error: {m}" for m in self.console_errors]
            + [f"script error: {m}" for m in self.page_errors]
            + [f"failed request: {m}" for m in self.failed_requests]
        )


def watch(page) -> PageProblems:
    """Record the problems of a Playwright ``page`` from now on."""
    problems = PageProblems()
    page.on(
        "console",
        lambda message: message.type == "error" and problems.console_errors.append(message.text),
    )
    page.on(
        "pageerror",
        lambda error: problems.page_errors.append(
            f"{error} at {' | '.join((error.stack or '').splitlines()[1:4]).strip()}"
        ),
    )
    page.on(
        "requestfailed",
        lambda request: problems.failed_requests.append(f"{request.url} ({request.failure})"),
    )

    def bad_status(response):
        if response.status >= 400:
            problems.failed_requests.append(f"{response.url} (HTTP {response.status})")

    page.on("response", bad_status)
    return problems
