"""What analytics teams look at first, from the traffic, engagement, conversion and bot
columns of `sessions`: sessions by channel, bounce rate and engaged time per hour,
conversions and their value by channel, and the share of bot sessions; with identity
(`--anonymous-field`), new vs returning sessions and the first-user channels.

Outputs written before these columns existed do not have them: every part is then None and
`missing` names the column, so the page says so in place of the chart. Sessions flagged
`is_bot` are left out of the channel, engagement and conversion figures (as analytics tools
exclude known bots) and counted in the bot share only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.report.data import Counts

TRAFFIC_COLUMNS = ["start_time", "channel", "bounce", "engaged_time_ms", "converted", "is_bot"]
NO_CHANNEL = "(none)"
# With identity: a session is a new user's when it is their first (`session_number` 1).
NEW_USER = "is_new_user"
FIRST_CHANNELS_SHOWN = 10


@dataclass(frozen=True)
class HourlyRates:
    """Per UTC hour of session start: sessions, bounce rate (0..1) and mean engaged time."""

    hours: np.ndarray  # datetime64[h]
    sessions: np.ndarray
    bounce_rate: np.ndarray  # NaN in an hour without sessions
    engaged_s: np.ndarray  # mean engaged_time_ms / 1000, NaN in an hour without sessions


@dataclass(frozen=True)
class Conversions:
    """Per conversion name and channel: conversion events (sum of NAME_count) and value
    (sum of NAME_value, nulls as 0); channels in the order of `channels`."""

    channels: list[str]
    names: list[str]
    counts: dict[str, list[int]]  # name -> per channel
    values: dict[str, list[float]]  # name -> per channel


@dataclass
class Traffic:
    """The traffic figures; a None part's reason is in `missing[part]`."""

    channels: Counts | None = None  # human sessions per channel, most first
    rates: HourlyRates | None = None
    conversions: Conversions | None = None
    bots: Counts | None = None  # sessions: "bot" and "human"
    # With identity (sessions carry `is_new_user`) only, else None and not on the page.
    identity: bool = False
    new_users: Counts | None = None  # human sessions: "new" and "returning"
    first_channels: Counts | None = None  # new users (sessions numbered 1) per channel
    missing: dict[str, str] = field(default_factory=dict)


def conversion_names(columns: list[str]) -> list[str]:
    """Names NAME with all of NAME_count, NAME_value and NAME_first_at among `columns`."""
    have = set(columns)
    return sorted(
        c[: -len("_count")]
        for c in columns
        if c.endswith("_count") and {c[:-6] + "_value", c[:-6] + "_first_at"} <= have
    )


def load_traffic(root: str) -> Traffic:
    """The traffic figures of the `sessions` output under `root`."""
    from sessionize.sinks.registry import committed_rows

    dataset = committed_rows(root, "sessions")
    names = dataset.schema.names if dataset is not None else []
    conversions = conversion_names(names)
    extra = [f"{n}_{part}" for n in conversions for part in ("count", "value")]
    wanted = [c for c in [*TRAFFIC_COLUMNS, NEW_USER, *extra] if c in names]
    t, rows = None, 0
    if dataset is not None and set(wanted) - {"start_time"}:
        t = dataset.to_table(columns=wanted)
        rows = t.num_rows
    elif dataset is not None:  # none of the columns: only say whether there are rows
        rows = dataset.count_rows()
    traffic = Traffic(identity=NEW_USER in names)
    have = set(wanted)

    def absent(part: str, *columns: str) -> bool:
        gone = [c for c in columns if c not in have]
        if rows == 0:
            traffic.missing[part] = "no rows in the outputs"
        elif gone:
            traffic.missing[part] = (
                f"no {' or '.join(gone)} column in sessions (an output whose checkpoint was "
                "created before sessions carried it)"
            )
        return part in traffic.missing

    if not absent("bots", "is_bot"):
        assert t is not None  # rows and the column: read above
        bot = pc.fill_null(t["is_bot"], False)
        n_bot = pc.sum(bot).as_py() or 0
        traffic.bots = Counts(["human", "bot"], [t.num_rows - n_bot, n_bot])
        t = t.filter(pc.invert(bot))  # the other figures count human sessions only
    if not absent("channels", "channel"):
        assert t is not None
        traffic.channels = _channels(t["channel"])
    if not absent("rates", "start_time", "bounce", "engaged_time_ms"):
        traffic.rates = hourly_rates(t)
    if not absent("conversions", "channel"):
        if conversions:
            traffic.conversions = _conversions(t, conversions)
        else:
            traffic.missing["conversions"] = (
                "no conversion columns in sessions (map one with --conversion NAME=ACTION)"
            )
    if traffic.identity and not absent("new_users", NEW_USER):
        assert t is not None
        new = pc.fill_null(t[NEW_USER], False)
        n_new = pc.sum(new).as_py() or 0
        traffic.new_users = Counts(["new", "returning"], [n_new, t.num_rows - n_new])
        if not absent("first_channels", "channel"):
            top = _channels(t["channel"].filter(new))
            shown = FIRST_CHANNELS_SHOWN
            traffic.first_channels = Counts(top.labels[:shown], top.values[:shown])
    return traffic


def _channels(channel: pa.ChunkedArray) -> Counts:
    if len(channel) == 0:
        return Counts([], [])
    vc = pc.value_counts(channel)
    table = pa.table({"value": vc.field("values"), "count": vc.field("counts")})
    table = table.sort_by([("count", "descending"), ("value", "ascending")])
    labels = [NO_CHANNEL if v is None else v for v in table["value"].to_pylist()]
    return Counts(labels, table["count"].to_pylist())


def hourly_rates(t: pa.Table) -> HourlyRates | None:
    """Sessions, bounce rate and mean engaged time per hour of `start_time` (every hour from
    the first to the last; null bounce counts as not a bounce, null time as 0)."""
    if t.num_rows == 0:
        return None
    hour = pc.divide(pc.cast(t["start_time"], pa.int64()), 3_600_000_000).to_numpy()
    first = int(hour.min())
    at = hour - first
    size = int(hour.max()) - first + 1
    sessions = np.bincount(at, minlength=size)
    bounces = np.bincount(at, pc.fill_null(t["bounce"], False).to_numpy().astype(float), size)
    engaged = np.bincount(at, pc.fill_null(t["engaged_time_ms"], 0).to_numpy() / 1000.0, size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return HourlyRates(
            hours=np.datetime64(first, "h") + np.arange(size),
            sessions=sessions,
            bounce_rate=np.where(sessions > 0, bounces / sessions, np.nan),
            engaged_s=np.where(sessions > 0, engaged / sessions, np.nan),
        )


def _conversions(t: pa.Table, names: list[str]) -> Conversions:
    keys = pc.fill_null(t["channel"], NO_CHANNEL)
    cols = {"channel": keys}
    for n in names:
        cols[f"{n}_count"] = pc.fill_null(t[f"{n}_count"], 0)
        cols[f"{n}_value"] = pc.fill_null(pc.cast(t[f"{n}_value"], pa.float64()), 0.0)
    sums = pa.table(cols).group_by("channel").aggregate([(c, "sum") for c in list(cols)[1:]])
    # Channels by conversion events, then value, then name: the best channel first.
    total = np.zeros(sums.num_rows)
    value = np.zeros(sums.num_rows)
    for n in names:
        total += sums[f"{n}_count_sum"].to_numpy()
        value += sums[f"{n}_value_sum"].to_numpy()
    labels = sums["channel"].to_pylist()
    order = sorted(range(len(labels)), key=lambda i: (-total[i], -value[i], labels[i]))
    return Conversions(
        channels=[labels[i] for i in order],
        names=names,
        counts={n: [int(sums[f"{n}_count_sum"][i].as_py()) for i in order] for n in names},
        values={n: [float(sums[f"{n}_value_sum"][i].as_py()) for i in order] for n in names},
    )
