"""JSON lines of one hour's events, built column-wise with numpy and Arrow.

A line is a concatenation of pieces: per visit (user id; visit id and the optional `source`,
`user`, `technical` sections), per event (time, action, page) and small vocabularies. Times
are formatted as fixed-width ASCII digits in a numpy byte matrix, and Arrow's element-wise
join builds all lines of an hour in one kernel: no Python call per event (`json.dumps` per
event is ~10x slower). Lines carry their trailing newline, so a file's bytes are the data
buffer of its lines, taken in file order. Invalid twins are built in Python (they are few).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.generate import catalog as cat
from sessionize.generate import web_catalog as web
from sessionize.generate.visits import Events, Users, Visits

TEXT = pa.large_string()  # an hour of lines may exceed 2 GiB


def _vocab(items) -> pa.Array:
    return pa.array(list(items), TEXT)


def _join(*parts) -> pa.Array:
    """Element-wise concatenation of arrays and constant strings."""
    return pc.binary_join_element_wise(
        *(pa.scalar(p, TEXT) if isinstance(p, str) else p for p in parts), pa.scalar("", TEXT)
    )


ACTION_PIECES = tuple("" if a is None else f', "action": "{a}"' for a in cat.ACTIONS)
# (action, page) pairs in one vocabulary: code = action * len(PAGES) + page.
ACTION_PAGE = _vocab(f'{a}, "page": {{"current": "{p}"' for a in ACTION_PIECES for p in cat.PAGES)
# The previous page, closing the page object and the line: code = prev + 1 (0: landing page).
_PREV_END = ("}}\n", *(f', "previous": "{p}"}}}}\n' for p in cat.PAGES))
PREV_END = _vocab(_PREV_END)
SOURCES = _vocab(
    [
        f', "source": {{"site": "{s}", "api_version": "{a}"}}'
        for s in cat.SITES
        for a in cat.API_VERSIONS
    ]
    + [""]
)
TECHNICAL = _vocab(
    [
        f', "technical": {{"browser": "{browser}", "os": "{os}", "lang": "{lang}", '
        f'"network": "{net}", "device": {{"type": "{kind}", "version": "{model}"}}}}'
        for kind, model, os, browser in cat.DEVICE_COMBOS
        for lang in cat.LANGUAGES
        for net in cat.NETWORKS
    ]
    + [""]
)

# Rule data (generate/rules.py): code = (campaign + 1) * (len(GAP_SECONDS) + 1) + gap + 1.
RULE_FIELDS = _vocab(
    c + g
    for c in ("", *(f', "utm": {{"campaign": "{x}"}}' for x in cat.CAMPAIGNS))
    for g in ("", *(f', "gap_s": {x}' for x in cat.GAP_SECONDS))
)

# Web data (generate/web.py). The page object stays open for url and referrer: PREV_CLOSE
# closes it (code = prev + 1), an order object may follow, then the line ends.
PREV_CLOSE = _vocab(("}", *(f', "previous": "{p}"}}' for p in cat.PAGES)))
# A page's URL up to its query string: code = site * len(PAGES) + page.
URLS = _vocab(f', "url": "https://{h}{p}' for h in web.HOSTS for p in web.PATHS)
QUERIES = _vocab(q + '"' for q in web.QUERIES)  # with the url's closing quote
# External referrers, then internal ones (code = len(REFERRERS) + site * len(PAGES) + prev).
REFERRER_PIECES = _vocab(
    [("" if r is None else f', "referrer": "{r}"') for r in web.REFERRERS]
    + [f', "referrer": "https://{h}{p}"' for h in web.HOSTS for p in web.PATHS]
)
AGENT_PIECES = _vocab(f', "user_agent": "{a}"}}' for a in web.AGENTS)

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_SUFFIX_LEN = np.array([len(s) for s in cat.TIME_SUFFIXES], dtype=np.int64)
_SUFFIX_BYTES = np.array([list(s.ljust(6).encode()) for s in cat.TIME_SUFFIXES], dtype=np.uint8)

# Kinds of invalid lines (docs/design.md, "Events"), in the order of the `kind` codes.
INVALID_KINDS = (
    "not JSON",
    "truncated JSON",
    "missing user_id",
    "missing event_time",
    "missing page.current",
    "user_id as string",
    "bad timestamp",
)
_BAD_TIMES = ("not a timestamp", "", "10/10/2019 15:06:45")


def _rows_to_text(chars: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Rows of an (n, w) ASCII byte matrix, each cut to its length, as a string array."""
    keep = np.arange(chars.shape[1]) < lengths[:, None]
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = chars[keep]  # row-major: rows stay in order
    return pa.LargeStringArray.from_buffers(lengths.size, pa.py_buffer(offsets), pa.py_buffer(data))


_DIGITS = {
    n: np.array([list(f"{i:0{n}d}".encode()) for i in range(10**n)], dtype=np.uint8)
    for n in (2, 3, 4)
}


def _put(chars: np.ndarray, col: int, value: np.ndarray, digits: int) -> None:
    chars[:, col : col + digits] = _DIGITS[digits][value]


def event_times(t_ms: np.ndarray, tz: np.ndarray) -> pa.Array:
    """`YYYY-MM-DDTHH:MM:SS.fff` + the offset of each time zone code, at local time."""
    local = t_ms + cat.TIME_OFFSETS_MS[tz]
    day = (local // 86_400_000).astype("datetime64[D]")
    month = day.astype("datetime64[M]")
    ms = (local % 86_400_000).astype(np.int32)
    chars = np.empty((local.size, 29), dtype=np.uint8)
    _put(chars, 0, day.astype("datetime64[Y]").astype(np.int64) + 1970, 4)
    _put(chars, 5, month.astype(np.int64) % 12 + 1, 2)
    _put(chars, 8, (day - month).astype(np.int64) + 1, 2)
    _put(chars, 11, ms // 3_600_000, 2)
    _put(chars, 14, ms // 60_000 % 60, 2)
    _put(chars, 17, ms // 1000 % 60, 2)
    _put(chars, 20, ms % 1000, 3)
    for col, ch in ((4, "-"), (7, "-"), (10, "T"), (13, ":"), (16, ":"), (19, ".")):
        chars[:, col] = ord(ch)
    chars[:, 23:] = _SUFFIX_BYTES[tz]
    return _rows_to_text(chars, 23 + _SUFFIX_LEN[tz])


def _visit_ids(raw: np.ndarray) -> pa.Array:
    chars = np.empty((raw.shape[0], 32), dtype=np.uint8)
    chars[:, 0::2] = _HEX[raw >> 4]
    chars[:, 1::2] = _HEX[raw & 15]
    return _rows_to_text(chars, np.full(raw.shape[0], 32, dtype=np.int64))


def _visit_pieces(
    users: Users, visits: Visits, rows: np.ndarray, agent: np.ndarray | None = None
) -> tuple[pa.Array, pa.Array]:
    """Per visit: the head up to the opening quote of event_time, and the middle from its
    closing quote through visit_id, source, user and technical (with `technical.user_agent`
    where `agent`, a code into web_catalog.AGENTS, is not -1)."""
    u = visits.user[rows]
    omit = visits.omit[rows]
    head = _join('{"user_id": ', pc.cast(pa.array(users.ids[u]), TEXT), ', "event_time": "')
    source = np.where(
        omit & 1, len(SOURCES) - 1, visits.site[rows].astype(np.int64) * 3 + visits.api[rows]
    )
    ip = users.ip[u]
    octets = [pc.cast(pa.array((ip >> s) & 255), TEXT) for s in (24, 16, 8, 0)]
    user = _join(
        ', "user": {"ip": "',
        pc.binary_join_element_wise(*octets, pa.scalar(".", TEXT)),
        '", "latitude": ',
        pc.cast(pa.array(users.lat[u] / 100), TEXT),
        ', "longitude": ',
        pc.cast(pa.array(users.lon[u] / 100), TEXT),
        "}",
    )
    user = pc.if_else(pa.array((omit & 2) > 0), pa.scalar("", TEXT), user)
    technical = np.where(
        omit & 4,
        len(TECHNICAL) - 1,
        (users.device[u].astype(np.int64) * len(cat.LANGUAGES) + users.language[u])
        * len(cat.NETWORKS)
        + visits.network[rows],
    )
    tech = TECHNICAL.take(pa.array(technical))
    if agent is not None:
        with_agent = _join(
            pc.utf8_slice_codeunits(tech, 0, -1), AGENT_PIECES.take(pa.array(np.maximum(agent, 0)))
        )
        tech = pc.if_else(pa.array(agent >= 0), with_agent, tech)
    middle = _join(
        '", "visit_id": "',
        _visit_ids(visits.visit_id[rows]),
        '"',
        SOURCES.take(pa.array(source)),
        user,
        tech,
    )
    return head, middle


def _identity_heads(uid: np.ndarray, device: np.ndarray, logged_in: np.ndarray) -> pa.Array:
    """Per event, with identity data: the head up to the opening quote of event_time, with
    the anonymous id and, while logged in, the user id (generate/identity.py)."""
    anonymous = _join('{"anonymous_id": "d', pc.cast(pa.array(device), TEXT), '", ')
    user = _join('"user_id": "u', pc.cast(pa.array(uid), TEXT), '", ')
    user = pc.if_else(pa.array(logged_in), user, pa.scalar("", TEXT))
    return _join(anonymous, user, '"event_time": "')


class HourLines:
    """The valid line (with its newline) of each of an hour's events; `rows` index Events."""

    def __init__(self, users: Users, visits: Visits, events: Events, rows: np.ndarray):
        v = events.visit[rows]
        present = np.zeros(visits.user.size, dtype=bool)
        present[v] = True
        self.visit_rows = np.flatnonzero(present)  # the visits with events in this hour
        self._visit_at = np.cumsum(present)[v] - 1  # row of each event's visit in visit_rows
        agent = None
        if events.web is not None:
            agent = np.full(self.visit_rows.size, -1, np.int16)
            agent[self._visit_at] = events.web.agent[rows]
        head, self._middle = _visit_pieces(users, visits, self.visit_rows, agent)
        self._uid = users.ids[visits.user[v]]
        self._action = events.action[rows]
        self._page = events.page[rows]
        self._prev = events.prev[rows]
        self._times = event_times(events.t_ms[rows], events.tz[rows])
        at = pa.array(self._visit_at)
        action_page = self._action.astype(np.int64) * len(cat.PAGES) + self._page
        middle = self._middle.take(at)
        if events.campaign is not None and events.gap is not None:
            code = (events.campaign[rows].astype(np.int64) + 1) * (len(cat.GAP_SECONDS) + 1)
            middle = _join(middle, RULE_FIELDS.take(pa.array(code + events.gap[rows] + 1)))
        if events.web is None:
            page_end = [PREV_END.take(pa.array(self._prev.astype(np.int64) + 1))]
        else:
            page_end = _web_page_end(events, rows, visits.site[v])
        if events.identity is not None:
            head = _identity_heads(
                self._uid, events.identity.device[rows], events.identity.logged_in[rows]
            )
        else:
            head = head.take(at)
        self.lines = _join(
            head, self._times, middle, ACTION_PAGE.take(pa.array(action_page)), *page_end
        )

    def invalid(self, at: np.ndarray, kinds: np.ndarray, variants: np.ndarray) -> pa.Array:
        """An invalid twin (with newline) of each event at `at`: `kinds` index INVALID_KINDS,
        `variants` are uniform numbers in [0, 1) that pick among the forms of a kind."""
        pieces = zip(
            at.tolist(),
            kinds.tolist(),
            variants.tolist(),
            self._times.take(pa.array(at, pa.int64())).to_pylist(),
            self._middle.take(pa.array(self._visit_at[at])).to_pylist(),
            strict=True,
        )
        return pa.array(
            [self._invalid(i, k, x, ts, mid) + "\n" for i, k, x, ts, mid in pieces], TEXT
        )

    def _invalid(self, i: int, kind: int, x: float, ts: str, mid: str) -> str:
        uid, current = int(self._uid[i]), cat.PAGES[self._page[i]]
        action = ACTION_PIECES[self._action[i]]
        prev = _PREV_END[self._prev[i] + 1][:-1]
        rest = f'{mid}{action}, "page": {{"current": "{current}"{prev}'
        if kind == 0:  # not JSON: a key=value log line, a CSV row, an HTML error page
            forms = (
                f"user_id={uid} event_time={ts} page={current}",
                f"{uid},{ts},{current}",
                "<html><head><title>502 Bad Gateway</title></head></html>",
            )
            return forms[int(x * len(forms))]
        if kind == 1:  # truncated: no proper prefix of a JSON object is valid JSON
            line = f'{{"user_id": {uid}, "event_time": "{ts}' + rest
            return line[: 10 + int(x * (len(line) - 11))]
        if kind == 2:
            return '{"event_time": "' + ts + rest
        if kind == 3:
            return f'{{"user_id": {uid}' + rest[1:]
        if kind == 4:  # no page at all, an empty page, or only the previous page
            forms = ("}", ', "page": {}}', f', "page": {{"previous": "{current}"}}}}')
            return f'{{"user_id": {uid}, "event_time": "{ts}' + mid + action + forms[int(x * 3)]
        if kind == 5:
            return f'{{"user_id": "{uid}", "event_time": "{ts}' + rest
        # kind 6, bad timestamp: month 13, hour 25, or not a timestamp at all
        times = (ts[:5] + "13" + ts[7:], ts[:11] + "25" + ts[13:], *_BAD_TIMES)
        bad = times[int(x * len(times))]
        return f'{{"user_id": {uid}, "event_time": "{bad}' + rest


def _web_page_end(events: Events, rows: np.ndarray, site: np.ndarray) -> list[pa.Array]:
    """From the page object's url to the end of the line: url, referrer (the previous page's
    URL on internal navigation), previous page, the purchase's order, newline. Each piece is
    one take from a vocabulary: joining nested pieces would copy every line's bytes again."""
    w = events.web
    assert w is not None  # called for events with web data only
    page, prev = events.page[rows].astype(np.int64), events.prev[rows].astype(np.int64)
    on_site = site.astype(np.int64) * len(cat.PAGES)
    ref = w.referrer[rows].astype(np.int64)
    ref_code = np.where(ref >= 0, ref, len(web.REFERRERS) + on_site + np.maximum(prev, 0))
    cents = w.value_cents[rows]
    buys = np.flatnonzero(cents >= 0)
    order_code = np.zeros(rows.size, np.int64)
    order_code[buys] = np.arange(1, buys.size + 1)
    orders = _join(
        ', "order": {"value": ', pc.cast(pa.array(cents[buys] / 100), TEXT), ', "currency": "EUR"}'
    )
    orders = pa.concat_arrays([pa.array([""], TEXT), orders])
    return [
        URLS.take(pa.array(on_site + page)),
        QUERIES.take(pa.array(w.query[rows])),
        REFERRER_PIECES.take(pa.array(ref_code)),
        PREV_CLOSE.take(pa.array(prev + 1)),
        orders.take(pa.array(order_code)),
        "}\n",
    ]
