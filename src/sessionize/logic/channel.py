"""A session's channel, from its traffic source, by an ordered rule table.

The table has one rule per line, `CHANNEL = CONDITION, CONDITION, ...`: a rule matches when
all its conditions hold (none: always), and the first rule that matches wins (no rule:
`Unassigned`). Two tables ship, one per `sessions` schema (a job keeps its schema's):

- schema 3 (`data/channels_ga4.txt`): GA4's default channel group. `source` is the
  lower-cased `utm_source`, else the referrer host; `medium` the lower-cased `utm_medium`,
  else `organic` for a search engine's referrer, `referral` for another referrer;
  `campaign` the lower-cased `utm_campaign`. A Google click id on the landing URL is Google
  paid traffic, as GA4's auto-tagging makes it (and as it does, it wins over `utm_*`):
  `gclid`, `gbraid`, `wbraid` give source `google`, medium `cpc`; `dclid` (Display &
  Video 360, Campaign Manager 360) source `dv360`, medium `cpm`. Site lists: `sites.py`.
- schema 2 (`data/channels.txt`): `source` is the lower-cased `utm_source`, else
  `referrer_host`; `medium` the lower-cased `utm_medium`; Matomo's lists as they were
  (`is_kind`: any subdomain of a listed host, `{}` any suffix).

Conditions: `gclid` (the landing URL has one); `paid` (`medium` matches
`^(cpc|ppc|paid.*)$`; schema 3: GA4's `^(.*cp.*|ppc|retargeting|paid.*)$`);
`SUBJECT is KIND` / `is not KIND`; `SUBJECT in A|B|...` / `not in` (`-` stands for null);
`SUBJECT matches REGEX` / `not matches` (the whole value). Subjects: `source`, `medium`,
and with schema 3 also `campaign`, `utm_source`, `utm_medium`, `utm_campaign`, `referrer`
(the referrer host) and `click_id` (its type: `gclid`, `fbclid`, ...); kinds: `search`,
`social`, and with schema 3 `video`, `shopping`. Values compare lower-cased. Channels are
decided once per distinct traffic source of a batch.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import NamedTuple, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.errors import ConfigError
from sessionize.logic.sites import KINDS, site_kind

_PAID = re.compile(r"cpc|ppc|paid.*")
_PAID_GA4 = re.compile(r".*cp.*|ppc|retargeting|paid.*")
# Google's click ids and the source and medium GA4's auto-tagging gives them.
GOOGLE_CLICK_IDS = {
    "gclid": ("google", "cpc"),
    "gbraid": ("google", "cpc"),
    "wbraid": ("google", "cpc"),
    "dclid": ("dv360", "cpm"),
}
SUBJECTS = (
    "source",
    "medium",
    "campaign",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "referrer",
    "click_id",
)
_SUBJECTS_2 = ("source", "medium")
# A second condition inside one (`source in a|b medium in c`): a comma is missing, and its
# text would be read as a value or a pattern that matches nothing.
_ANOTHER_CONDITION = re.compile(rf"(^|\s|\|)({'|'.join(SUBJECTS)})\s+(not\s+)?(in|is|matches)\s")


class Facts(NamedTuple):
    """What the conditions test, lower-cased; `gclid`: the landing URL has one."""

    source: str | None
    medium: str | None
    campaign: str | None = None
    utm_source: str | None = None
    utm_medium: str | None = None
    utm_campaign: str | None = None
    referrer: str | None = None
    click_id: str | None = None
    gclid: bool = False


def ga4_facts(
    utm_source: str | None,
    utm_medium: str | None,
    utm_campaign: str | None,
    referrer: str | None,
    click_id: str | None,
    gclid: bool,
) -> Facts:
    """Schema 3's facts of a session's landing (see the module doc); values lower-cased.

    >>> ga4_facts(None, None, None, "google.de", None, False)[:2]
    ('google.de', 'organic')
    """
    source, medium = utm_source, utm_medium
    if click_id in GOOGLE_CLICK_IDS:
        source, medium = GOOGLE_CLICK_IDS[click_id]
    elif source is None and referrer is not None:
        source = referrer
        if medium is None:
            medium = "organic" if site_kind(referrer) == "search" else "referral"
    return Facts(
        source,
        medium,
        utm_campaign,
        utm_source,
        utm_medium,
        utm_campaign,
        referrer,
        click_id,
        gclid,
    )


@dataclass(frozen=True)
class Rule:
    channel: str
    conditions: tuple[Callable[[Facts], bool], ...]

    def matches(self, facts: Facts) -> bool:
        return all(c(facts) for c in self.conditions)


def default_rules_text(version: int = 3) -> str:
    """The default table of `sessions` schema `version` (GA4's from 3 on)."""
    name = "channels_ga4.txt" if version >= 3 else "channels.txt"
    return resources.files("sessionize.logic").joinpath(f"data/{name}").read_text("utf-8")


def parse_rules(text: str, origin: str = "--channel-rules", version: int = 3) -> tuple[Rule, ...]:
    """The rules of a table's text for `sessions` schema `version`; a ConfigError naming
    the line that is not a rule.

    >>> parse_rules("Paid = paid\\nOther =")[0].channel
    'Paid'
    """
    rules = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        channel, sep, conditions = line.partition("=")
        if not sep or not channel.strip():
            raise ConfigError(f"{origin} line {number}: '{line}' is not CHANNEL = CONDITION, ...")
        parsed = tuple(
            _condition(c.strip(), f"{origin} line {number}", version)
            for c in conditions.split(",")
            if c.strip()
        )
        rules.append(Rule(channel.strip(), parsed))
    if not rules:
        raise ConfigError(f"{origin}: no rule; write one per line, CHANNEL = CONDITION, ...")
    return tuple(rules)


def _condition(text: str, where: str, version: int = 3) -> Callable[[Facts], bool]:
    if text == "gclid":
        return lambda f: f.gclid
    if text == "paid":
        paid = _PAID_GA4 if version >= 3 else _PAID
        return lambda f: f.medium is not None and paid.fullmatch(f.medium) is not None
    subjects = SUBJECTS if version >= 3 else _SUBJECTS_2
    words = text.split(None, 2)
    if _ANOTHER_CONDITION.search(text.partition(" ")[2]):
        raise ConfigError(
            f"{where}: '{text}' holds two conditions; separate conditions with a comma"
        )
    if len(words) >= 3 and words[0] in subjects:
        at = SUBJECTS.index(words[0])
        op, rest = words[1], words[2]
        negate = op == "not" or (op == "is" and rest.startswith("not "))
        if op == "not":
            op, _, rest = rest.partition(" ")
            op = "not " + op
        elif op == "is" and negate:
            rest = rest.removeprefix("not ").strip()
        check = _predicate(at, op.removeprefix("not "), rest.strip(), version)
        if check is not None:
            return (lambda f: not check(f)) if negate else check
    kinds = "|".join(KINDS if version >= 3 else KINDS[:2])
    raise ConfigError(
        f"{where}: '{text}' is not a condition (gclid, paid, SUBJECT is {kinds}, "
        f"SUBJECT in A|B, SUBJECT matches REGEX, with `not`; SUBJECT: {', '.join(subjects)})"
    )


def _predicate(at: int, op: str, arg: str, version: int) -> Callable[[Facts], bool] | None:
    if op == "in":
        values = {None if v.strip() == "-" else v.strip().lower() for v in arg.split("|")}
        return lambda f: f[at] in values
    if op == "matches":
        try:
            pattern = re.compile(arg)
        except re.error:
            return None
        return lambda f: f[at] is not None and pattern.fullmatch(cast(str, f[at])) is not None
    if op == "is" and version >= 3 and arg in KINDS:
        return lambda f: site_kind(cast(str | None, f[at])) == arg
    if op == "is" and at == 0 and arg in ("search", "social"):
        return lambda f: f[0] is not None and is_kind(f[0], arg)
    return None


# The longest host DNS allows (RFC 1035): a longer source is no listed host, nor a name
# (docs/operations.md, "Bounds"), and is not looked at further.
MAX_HOST_CHARS = 253


@dataclass(frozen=True)
class SiteList:
    """One kind's list: names, hosts, `{}`-wildcard bases (`google.{}`: the base, then any
    suffix), and the most labels a host or a base has (what a lookup needs to try)."""

    names: frozenset[str]
    hosts: frozenset[str]
    bases: frozenset[str]
    host_labels: int
    base_labels: int


@functools.lru_cache(maxsize=1)
def _lists() -> dict[str, SiteList]:
    """Per kind, the shipped list."""
    data = json.loads(
        resources.files("sessionize.logic").joinpath("data/referers.json").read_text("utf-8")
    )
    out = {}
    for kind in ("search", "social"):
        names: set[str] = set()
        hosts: set[str] = set()
        bases: set[str] = set()
        for name, patterns in data[kind].items():
            names.add(name.lower())
            for pattern in patterns:
                h = pattern.split("/", 1)[0].removeprefix("{}.").removeprefix("www.")
                if "." not in h:
                    continue
                (bases if h.endswith(".{}") else hosts).add(h.removesuffix(".{}"))

        def most_labels(found: set[str]) -> int:
            return max((h.count(".") + 1 for h in found), default=0)

        out[kind] = SiteList(
            frozenset(names),
            frozenset(hosts),
            frozenset(bases),
            most_labels(hosts),
            most_labels(bases),
        )
    return out


def is_kind(source: str, kind: str) -> bool:
    """Whether `source` (a lower-case name or host) is a search engine (`kind="search"`)
    or a social network (`"social"`) of the shipped list: a listed name, a listed host or
    any subdomain of one, or a base then any suffix (`google.{}`: `google.co.uk`). A source
    longer than MAX_HOST_CHARS is neither. Only the suffixes and label runs as long as the
    list's longest entries are looked up, so the work is linear in the source.

    >>> is_kind("news.google.co.uk", "search"), is_kind("facebook", "social")
    (True, True)
    """
    return len(source) <= MAX_HOST_CHARS and _listed(source, kind)


@functools.lru_cache(maxsize=65536)
def _listed(source: str, kind: str) -> bool:
    """`is_kind` of a source no longer than MAX_HOST_CHARS (so the cache stays small)."""
    if kind == "search" and _listed(source, "social"):
        return False  # both lists name Facebook and MySpace: their visits are social
    site = _lists()[kind]
    if source in site.names:
        return True
    labels = source.split(".")
    n = len(labels)
    for i in range(max(0, n - site.host_labels), n):
        if ".".join(labels[i:]) in site.hosts:
            return True
    for i in range(n):  # a base must leave at least one label for the suffix
        for j in range(i + 1, min(n, i + 1 + site.base_labels)):
            if ".".join(labels[i:j]) in site.bases:
                return True
    return False


def channel_of(rules: tuple[Rule, ...], facts: Facts) -> str:
    for rule in rules:
        if rule.matches(facts):
            return rule.channel
    return "Unassigned"


@functools.lru_cache(maxsize=8)
def rules_of(text: str | None, version: int = 2) -> tuple[Rule, ...]:
    """The rules of a `--channel-rules` text (None: the default table of `sessions` schema
    `version`)."""
    if text is not None:
        return parse_rules(text, version=version)
    return parse_rules(default_rules_text(version), "default", version)


def channels(
    utm_source: pa.Array,
    utm_medium: pa.Array,
    gclid: pa.Array,
    referrer_host: pa.Array,
    rules: tuple[Rule, ...],
) -> pa.Array:
    """Per session, its channel (see the module doc)."""
    source = pc.coalesce(pc.utf8_lower(utm_source), referrer_host)
    medium = pc.utf8_lower(utm_medium)
    src_codes, src_values = _codes(source)
    med_codes, med_values = _codes(medium)
    has_gclid = pc.is_valid(gclid).to_numpy(zero_copy_only=False).astype(np.int64)
    key = (src_codes * len(med_values) + med_codes) * 2 + has_gclid
    distinct, inverse = np.unique(key, return_inverse=True)
    decided = [
        channel_of(
            rules,
            Facts(
                src_values[k // 2 // len(med_values)],
                med_values[k // 2 % len(med_values)],
                gclid=bool(k % 2),
            ),
        )
        for k in distinct.tolist()
    ]
    return pa.array(decided, pa.string()).take(pa.array(inverse.reshape(-1)))


def ga4_channels(
    utm_source: pa.Array,
    utm_medium: pa.Array,
    utm_campaign: pa.Array,
    referrer_host: pa.Array,
    click_id_type: pa.Array,
    gclid: pa.Array,
    rules: tuple[Rule, ...],
) -> pa.Array:
    """Per session, its channel by schema 3's facts (see the module doc), decided once
    per distinct combination of the inputs."""
    columns = [
        pc.utf8_lower(utm_source),
        pc.utf8_lower(utm_medium),
        pc.utf8_lower(utm_campaign),
        referrer_host,
        click_id_type,
    ]
    coded = [_codes(c) for c in columns]
    has_gclid = pc.is_valid(gclid).to_numpy(zero_copy_only=False).astype(np.int64)
    if len(has_gclid) == 0:
        return pa.array([], pa.string())
    first, inverse = _combinations([c for c, _ in coded] + [has_gclid])
    decided = []
    for row in first.tolist():
        source, medium, campaign, referrer, click = (values[c[row]] for c, values in coded)
        facts = ga4_facts(source, medium, campaign, referrer, click, bool(has_gclid[row]))
        decided.append(channel_of(rules, facts))
    return pa.array(decided, pa.string()).take(pa.array(inverse))


def _combinations(codes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(a row of each distinct combination of `codes` (non-negative, one array per column),
    each row's combination as an index into those rows). The columns are folded into one
    integer key, made dense again whenever the next column could overflow it: 1-D sorts
    of a few thousand keys, where `np.unique(axis=0)` sorts rows as bytes."""
    key = np.zeros(len(codes[0]), dtype=np.int64)
    size = 1
    for column in codes:
        width = int(column.max()) + 1 if len(column) else 1
        if size * width >= 2**62:
            distinct, key = np.unique(key, return_inverse=True)
            size = len(distinct)
        key = key * width + column
        size *= width
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _codes(values: pa.Array) -> tuple[np.ndarray, list[str | None]]:
    """(code of each value, the distinct values with None last)."""
    encoded = pc.dictionary_encode(values)
    codes = encoded.indices.fill_null(len(encoded.dictionary))
    return codes.to_numpy(zero_copy_only=False).astype(np.int64), [
        *encoded.dictionary.to_pylist(),
        None,
    ]
