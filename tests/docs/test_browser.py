"""The built site in headless Chromium, served over http on 127.0.0.1: every page loads
without console errors, the search finds "rewind", and the home page is photographed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from tests.docs.cdp import Browser
from tests.docs.test_site import _nav_pages
from tests.report.test_report_page import _chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    b = Browser(_chromium())
    yield b
    b.close()


def test_every_page_loads_without_console_errors(served, browser):
    for page in _nav_pages():
        url = f"{served}/" + (page.removesuffix(".md") + "/").removeprefix("index/")
        browser.errors.clear()
        browser.open(url)
        title = browser.evaluate("document.querySelector('article h1')?.textContent")
        assert title, f"{url}: no article heading"
        # Material's scripts ran: they set this class on the root element.
        assert browser.evaluate("document.documentElement.classList.contains('js')"), url
        assert browser.errors == [], f"{url}: {browser.errors}"


def test_the_search_finds_rewind(served, browser, site):
    # The index the client-side search loads holds the rewind guide.
    index = json.loads((site / "search" / "search_index.json").read_text())
    assert any(
        d["location"].startswith("how-to/rewind/")
        for d in index["docs"]
        if "rewind" in d["text"].lower() or "rewind" in d["title"].lower()
    )
    # And the search box, driven by `?q=`, shows it first among its results.
    browser.errors.clear()
    browser.open(f"{served}/?q=rewind")
    count = browser.wait_for("document.querySelectorAll('.md-search-result__item').length")
    assert count and count > 0, "no search results for 'rewind'"
    first = browser.evaluate(
        "document.querySelector('.md-search-result__item a').getAttribute('href')"
    )
    assert "how-to/rewind/" in first, first
    assert browser.errors == []


def test_a_screenshot_of_the_home_page_is_kept(served, browser, tmp_path_factory):
    browser.open(f"{served}/")
    shot = tmp_path_factory.mktemp("docs-screenshot") / "home.png"  # kept with the run's files
    shot.write_bytes(browser.screenshot())
    print(f"home page screenshot: {shot}")
    pixels = matplotlib.image.imread(shot)[:, :, :3]
    assert pixels.shape[0] > 500 and pixels.shape[1] > 1000
    # The header bar drew in Material's indigo.
    header = np.array([0x3F, 0x51, 0xB5]) / 255
    assert (np.abs(pixels - header).max(axis=2) < 0.03).sum() > 10_000
    assert Path(shot).stat().st_size > 50_000
