"""The documentation site builds in strict mode, works offline, and its plots and pages
say what the repository holds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.docs.blocks import all_pages

REPO = Path(__file__).resolve().parents[2]


def _nav_pages() -> list[str]:
    return re.findall(r":\s*([\w/.-]+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.M)


def test_every_page_is_built_and_in_the_navigation(site):
    nav = _nav_pages()
    pages = [str(p.relative_to(REPO / "docs")) for p in all_pages()]
    assert sorted(nav) == sorted(pages)  # no page left out of the navigation
    for page in nav:
        html = site / (page.removesuffix(".md").removesuffix("index") + "/index.html").lstrip("/")
        assert html.exists(), page


def test_the_site_fetches_nothing_from_elsewhere(site):
    """Offline: no web fonts, scripts or styles from another host."""
    for html in site.rglob("*.html"):
        text = html.read_text()
        for url in re.findall(r'(?:src|href)="(https?://[^"]+)"', text):
            # Links a reader follows are fine; what the page itself loads is not.
            tag = text[text.rfind("<", 0, text.find(url)) : text.find(url)]
            assert not tag.startswith(("<script", "<link", "<img")), (html, url)
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, html


def test_the_reference_is_generated_from_the_code(site):
    """Every command and option of the CLI, and the API's docstrings, are on their pages."""
    from sessionize.cli import cli

    html = (site / "reference" / "cli" / "index.html").read_text()
    for name, command in cli.commands.items():
        assert f'id="sessionize-{name}"' in html, name
        for param in command.params:
            for opt in param.opts:
                assert opt in html, (name, opt)
    api = (site / "reference" / "python-api" / "index.html").read_text()
    for name in ("sessionize.Sessionizer.stream", "sessionize.Sessionizer.sessions"):
        assert f'id="{name}"' in api, name
    assert api.count("Raises:") + api.count(">Raises<") >= 2


def test_the_cli_reference_shows_real_defaults(site):
    """An option given no default shows what it is when left out (False, None, required),
    never click's private sentinel."""
    html = (site / "reference" / "cli" / "index.html").read_text()
    assert "UNSET" not in html and "Sentinel" not in html
    rows = re.findall(r"<tr>\s*<td><code>(--[\w-]+)</code></td>.*?</tr>", html, re.S)
    assert "--debug" in rows and "--input" in rows
    row = re.search(r"<code>--debug</code>.*?</tr>", html, re.S).group(0)
    assert "<code>False</code>" in row


def test_the_plots_are_drawn_from_the_benchmarks_json(tmp_path):
    """benchmarks/plot.py on benchmarks/results/*.json gives exactly the committed SVGs."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "plot.py"), "--to", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    drawn = sorted(p.name for p in tmp_path.iterdir())
    assert drawn == [
        "batch_state_size.svg",
        "latency.svg",
        "state_size.svg",
        "stores.svg",
        "throughput.svg",
    ]
    for name in drawn:
        assert (tmp_path / name).read_bytes() == (REPO / "docs" / "benchmarks" / name).read_bytes()
        assert f"benchmarks/{name}" in (REPO / "docs" / "benchmarks.md").read_text()


def test_the_revisions_timeline_is_drawn_by_its_script(tmp_path):
    """benchmarks/revisions_timeline.py gives exactly the committed picture, which the
    revisions page shows."""
    drawn = tmp_path / "timeline.svg"
    script = REPO / "benchmarks" / "revisions_timeline.py"
    done = subprocess.run(
        [sys.executable, str(script), "--to", str(drawn)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    committed = REPO / "docs" / "concepts" / "revisions_timeline.svg"
    assert drawn.read_bytes() == committed.read_bytes()
    assert "](revisions_timeline.svg)" in (REPO / "docs" / "concepts" / "revisions.md").read_text()


def test_readme_is_short_and_points_into_the_site():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    assert "./dev test" in readme and "./dev docs" in readme
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).exists(), link


def test_readme_names_every_feature_with_its_page():
    """A reader who stops at the README knows each of these exists, and where to read on."""
    readme = (REPO / "README.md").read_text()
    features = readme.split("## Features", 1)[1].split("\n## ", 1)[0]
    named = {
        "maximum duration": "concepts/sessions.md#sessions-as-your-analytics-team-defines-them",
        "local midnight": "concepts/sessions.md#sessions-as-your-analytics-team-defines-them",
        "when a field changes": "concepts/sessions.md#sessions-as-your-analytics-team",
        "a gap per event": "concepts/sessions.md#sessions-as-your-analytics-team-defines-them",
        "landing and exit": "concepts/sessions.md#what-a-session-carries",
        "a channel": "concepts/sessions.md#what-a-session-carries",
        "engaged time": "concepts/sessions.md#what-a-session-carries",
        "conversions": "concepts/sessions.md#what-a-session-carries",
        "a bot flag": "concepts/sessions.md#what-a-session-carries",
        "Open sessions": "how-to/open-sessions.md",
        "PostgreSQL tables": "reference/outputs.md#postgresql-tables",
        "Kafka topics": "reference/outputs.md#kafka-topics",
        "sessionize.stateful": "how-to/stateful-job.md",
        "Prometheus metrics": "operations.md#metrics-and-alerts",
        "compaction": "operations.md#compacting-parquet-outputs",
    }
    items = re.split(r"\n- ", features)
    for words, page in named.items():
        item = next((i for i in items if words in i), None)
        assert item is not None, words
        assert f"(docs/{page}" in item, (words, page)
    for link in re.findall(r"\]\((docs/[^)#]+)#([^)]+)\)", readme):
        html_anchor = link[1]
        text = (REPO / link[0]).read_text().lower()
        heading = html_anchor.replace("-", " ")
        assert any(
            heading in re.sub(r"[^a-z0-9 ]", "", h.replace("-", " "))
            for h in re.findall(r"^#+ (.*)$", text, re.M)
        ), link


HISTORY = re.compile(
    r"this round|last round|before/now|before / now|when this row was measured"
    r"|\(before\)|\(now\)|used to|no longer|older sessionize|earlier runs",
    re.I,
)


def test_no_page_tells_the_history_of_its_making():
    for page in [*all_pages(), REPO / "README.md"]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            assert not HISTORY.search(line), f"{page.name}:{n}: {line}"
