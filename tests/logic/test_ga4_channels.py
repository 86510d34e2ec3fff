"""GA4's channel table as the docs give it, the site lists' entry kinds, and
`--split-on-change utm_campaign` reading the URL (schema 3)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from sessionize.config import SessionRules
from sessionize.content import SessionContent
from sessionize.logic import advance
from sessionize.logic.channel import (
    _combinations,
    channel_of,
    default_rules_text,
    ga4_facts,
    parse_rules,
)
from sessionize.logic.sites import site_kind
from sessionize.logic.traffic import click_id
from sessionize.mapping import EventMapping
from sessionize.schema import layout

from .helpers import MIN, T0, rows_of

DOCS = Path(__file__).parents[2] / "docs" / "concepts" / "sessions.md"


def test_the_docs_channel_table_is_the_shipped_one():
    """Every row of the docs' GA4 table, in order, is a line of the shipped rules file."""
    text = DOCS.read_text()
    section = text.split("### Channels: GA4's default channel group", 1)[1]
    rows = re.findall(r"^\| \d+ \| ([^|]+) \| (.+?) \| .+\|$", section, re.M)
    documented = []
    for channel, rule in rows:
        rule = rule.replace("\\|", "|").strip()
        conditions = "" if rule == "(always)" else rule.strip("`")
        documented.append(f"{channel.strip()} = {conditions}".strip())
    shipped = [
        line.strip()
        for line in default_rules_text(3).splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [d.rstrip("= ").strip() for d in documented] == [s.rstrip("= ").strip() for s in shipped]
    assert len(rows) == 28


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("google", "search"),  # a name of Google's list
        ("l.facebook.com", "social"),  # a host of Google's list, exactly
        ("m.youtube.com", "video"),
        ("amazon.com", "shopping"),
        ("mail.google.com", None),  # webmail, which Google lists as search: left out
        ("mail.yandex.ru", None),
        ("duckduckgo.com", "search"),  # a host of Matomo's list
        ("shop.duckduckgo.com", None),  # not its subdomains
        ("google.de", "search"),  # google.{}: a one-label top-level domain
        ("google.co.uk", "search"),  # or a second-level one
        ("com.google.android.gm", None),  # the Gmail app is not google.{}
        ("google.android.gm", None),
        ("mail.google.de", None),  # nothing before the base
        ("uk.search.yahoo.com", "search"),  # {}.search.yahoo.com: any subdomain
        ("youtube.com", "video"),  # Google's video list wins over Matomo's social one
        ("x" * 254, None),  # longer than a host can be
    ],
)
def test_site_list_entry_kinds(source, kind):
    assert site_kind(source) == kind


def test_split_on_change_utm_campaign_reads_the_url_query():
    mapping = EventMapping(
        url="u", change="utm_campaign", session_columns=3, content=SessionContent()
    )
    lay = layout(mapping)
    assert "change_value" not in lay.event.names  # no field is read for it
    urls = [
        "https://s.example/?utm_campaign=spring",
        "https://s.example/p",
        "https://s.example/?UTM_CAMPAIGN=Spring+Sale",
        "https://s.example/q",
    ]
    rows = [{n: None for n in lay.event.names} for _ in urls]
    for i, (r, u) in enumerate(zip(rows, urls, strict=True)):
        r.update(user_id=1, event_time=T0 + i * MIN, page=f"/{i}", action="view", u=u, url=u)
    res = advance(
        lay.state.empty_table(),
        pa.Table.from_pylist(rows, lay.event),
        rules=SessionRules(gap_us=10 * MIN),
        watermark_before=None,
        watermark_after=T0 + 10**12,
        layout=lay,
    )
    got = [
        (s["pages"], s["end_reason"], s["utm_campaign"], s["continues_session_id"])
        for s in rows_of(res.sessions)
    ]
    assert got == [
        (["/0", "/1"], "field_change", "spring", None),
        (["/2", "/3"], "inactivity", "Spring Sale", None),
    ]
    with pytest.raises(Exception, match="--url-field"):
        EventMapping(change="utm_campaign", session_columns=3)


def test_a_url_with_several_click_ids_gives_the_first_in_the_documented_order():
    """docs/concepts/sessions.md's order: Google's ids, then Microsoft's, Meta's, TikTok's,
    LinkedIn's; a Google id is Google paid traffic whatever the `utm_*` say."""
    order = ["gclid", "dclid", "gbraid", "wbraid", "msclkid", "fbclid", "ttclid", "li_fat_id"]
    for first in range(len(order)):
        held = list(reversed(order[first:]))  # in the URL, the later ids come first
        url = "https://s.example/?" + "&".join(f"{name}=v{name}" for name in held)
        assert click_id(url) == (order[first], f"v{order[first]}")
    rules = parse_rules(default_rules_text(3))
    facts = ga4_facts("facebook", "paid_social", None, "facebook.com", "gclid", True)
    assert channel_of(rules, facts) == "Paid Search"
    facts = ga4_facts("facebook", "paid_social", None, "facebook.com", "fbclid", False)
    assert channel_of(rules, facts) == "Paid Social"


def test_a_job_recorded_with_schema_2_keeps_its_outputs_and_channel_rules():
    """A checkpoint's recorded mapping reads back with its `session_columns`: schema 2's
    outputs (no `events`, page views without ids) and schema 2's channel table."""
    recorded = EventMapping(
        url="u", referrer="r", session_columns=2, content=SessionContent()
    ).record()
    old = EventMapping.from_record(recorded)
    assert old.session_columns == 2
    lay_2, lay_3 = (
        layout(old),
        layout(EventMapping(url="u", referrer="r", session_columns=3, content=SessionContent())),
    )
    assert "events" not in lay_2.outputs and "events" in lay_3.outputs
    assert "page_view_id" not in lay_2.page_views.names
    channels = []
    for lay in (lay_2, lay_3):
        row = {n: None for n in lay.event.names}
        row.update(
            user_id=1,
            event_time=T0,
            page="/",
            action="view",
            u="x",
            url="https://s.example/?utm_source=google&utm_medium=cpm",
        )
        res = advance(
            lay.state.empty_table(),
            pa.Table.from_pylist([row], lay.event),
            rules=SessionRules(gap_us=10 * MIN),
            watermark_before=None,
            watermark_after=T0 + 10**12,
            layout=lay,
        )
        channels.append(rows_of(res.sessions)[0]["channel"])
    assert channels == ["Display", "Paid Search"]  # GA4: a paid medium from a search engine


@pytest.mark.parametrize("high", [7, 2**32 - 1])
def test_channel_inputs_are_grouped_by_every_column(high):
    """Each session's channel is decided once per distinct combination of its inputs:
    rows of equal codes in every column share a combination, others never do, also
    when the columns' codes together pass what one int64 holds."""
    rng = np.random.default_rng(5)
    codes = [rng.choice([0, 1, high], size=400) for _ in range(4)]
    first, inverse = _combinations(codes)
    rows = list(zip(*(c.tolist() for c in codes), strict=True))
    distinct = set(rows)
    assert len(first) == len(distinct) == 81
    assert {rows[i] for i in first} == distinct
    assert all(rows[first[inverse[i]]] == rows[i] for i in range(len(rows)))
