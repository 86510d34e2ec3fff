"""A session's channel, from its traffic source, by an ordered rule table.

`source` is the lower-cased `utm_source`, else `referrer_host`; `medium` the lower-cased
`utm_medium`. The table (`data/channels.txt`, or a `--channel-rules` file of the same
format) has one rule per line, `CHANNEL = CONDITION, CONDITION, ...`: a rule matches when
all its conditions hold (none: always), and the first rule that matches wins. Conditions:

- `gclid`: the session has a `gclid`;
- `paid`: `medium` matches `^(cpc|ppc|paid.*)$`;
- `source is search` / `source is social` (and `is not`): the source is a search engine or
  a social network, by host (any subdomain of a listed host) or by name;
- `source in A|B|...`, `medium in ...` (and `not in`): equal to one of the values, `-`
  standing for null;
- `source matches REGEX`, `medium matches REGEX`: the whole value matches.

Search engines and social networks come from `data/referers.json`, made from Matomo's
searchengine-and-social-list (CC0-1.0; origin and commit in the file); a source on both
lists (Facebook, MySpace) is a social network. Channels are decided
once per distinct (source, medium, gclid) of a batch.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.errors import ConfigError

_PAID = re.compile(r"cpc|ppc|paid.*")
# A second condition inside one (`source in a|b medium in c`): a comma is missing, and its
# text would be read as a value or a pattern that matches nothing.
_ANOTHER_CONDITION = re.compile(
    r"(^|\s|\|)(source|medium)\s+(not\s+)?(in|is|matches)\s"
)
Facts = tuple[str | None, str | None, bool]  # (source, medium, has gclid)


@dataclass(frozen=True)
class Rule:
    channel: str
    conditions: tuple[Callable[[Facts], bool], ...]

    def matches(self, facts: Facts) -> bool:
        return all(c(facts) for c in self.conditions)


def default_rules_text() -> str:
    return resources.files("sessionize.logic").joinpath("data/channels.txt").read_text("utf-8")


def parse_rules(text: str, origin: str = "--channel-rules") -> tuple[Rule, ...]:
    """The rules of a table's text; a ConfigError naming the line that is not a rule.

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
            _condition(c.strip(), f"{origin} line {number}")
            for c in conditions.split(",")
            if c.strip()
        )
        rules.append(Rule(channel.strip(), parsed))
    if not rules:
        raise ConfigError(f"{origin}: no rule; write one per line, CHANNEL = CONDITION, ...")
    return tuple(rules)


def _condition(text: str, where: str) -> Callable[[Facts], bool]:
    if text == "gclid":
        return lambda f: f[2]
    if text == "paid":
        return lambda f: f[1] is not None and _PAID.fullmatch(f[1]) is not None
    words = text.split(None, 2)
    if _ANOTHER_CONDITION.search(text.partition(" ")[2]):
        raise ConfigError(
            f"{where}: '{text}' holds two conditions; separate conditions with a comma"
        )
    if len(words) >= 3 and words[0] in ("source", "medium"):
        at = 0 if words[0] == "source" else 1
        op, rest = words[1], words[2]
        negate = op == "not" or (op == "is" and rest.startswith("not "))
        if op == "not":
            op, _, rest = rest.partition(" ")
            op = "not " + op
        elif op == "is" and negate:
            rest = rest.removeprefix("not ").strip()
        check = _predicate(at, op.removeprefix("not "), rest.strip())
        if check is not None:
            return (lambda f: not check(f)) if negate else check
    raise ConfigError(
        f"{where}: '{text}' is not a condition (gclid, paid, source is search|social, "
        "source|medium in A|B, source|medium matches REGEX, with `not`)"
    )


def _predicate(at: int, op: str, arg: str) -> Callable[[Facts], bool] | None:
    if op == "in":
        values = {None if v.strip() == "-" else v.strip().lower() for v in arg.split("|")}
        return lambda f: f[at] in values
    if op == "matches":
        try:
            pattern = re.compile(arg)
        except re.error:
            return None
        return lambda f: f[at] is not None and pattern.fullmatch(f[at]) is not None
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
        names, hosts, bases = set(), set(), set()
        for name, patterns in data[kind].items():
            names.add(name.lower())
            for pattern in patterns:
                h = pattern.split("/", 1)[0].removeprefix("{}.").removeprefix("www.")
                if "." not in h:
                    continue
                (bases if h.endswith(".{}") else hosts).add(h.removesuffix(".{}"))

        def most_labels(found: set[str]) -> int:
            return max((h.count(".") + 1 for h in found), default=0)

        out[kind] = SiteList(frozenset(names), frozenset(hosts), frozenset(bases),
                             most_labels(hosts), most_labels(bases))  # fmt: skip
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
def rules_of(text: str | None) -> tuple[Rule, ...]:
    """The rules of a `--channel-rules` text (None: the default table)."""
    return parse_rules(text) if text is not None else parse_rules(default_rules_text(), "default")


def channels(
    utm_source: pa.Array, utm_medium: pa.Array, gclid: pa.Array, referrer_host: pa.Array,
    rules: tuple[Rule, ...],
) -> pa.Array:  # fmt: skip
    """Per session, its channel (see the module doc)."""
    source = pc.coalesce(pc.utf8_lower(utm_source), referrer_host)
    medium = pc.utf8_lower(utm_medium)
    src_codes, src_values = _codes(source)
    med_codes, med_values = _codes(medium)
    has_gclid = pc.is_valid(gclid).to_numpy(zero_copy_only=False).astype(np.int64)
    key = (src_codes * len(med_values) + med_codes) * 2 + has_gclid
    distinct, inverse = np.unique(key, return_inverse=True)
    decided = [
        channel_of(rules, (src_values[k // 2 // len(med_values)],
                           med_values[k // 2 % len(med_values)], bool(k % 2)))
        for k in distinct.tolist()
    ]  # fmt: skip
    return pa.array(decided, pa.string()).take(pa.array(inverse.reshape(-1)))


def _codes(values: pa.Array) -> tuple[np.ndarray, list[str | None]]:
    """(code of each value, the distinct values with None last)."""
    encoded = pc.dictionary_encode(values)
    codes = encoded.indices.fill_null(len(encoded.dictionary))
    return codes.to_numpy(zero_copy_only=False).astype(np.int64), [
        *encoded.dictionary.to_pylist(), None,
    ]  # fmt: skip
