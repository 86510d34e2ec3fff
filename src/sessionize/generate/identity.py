"""Identity data (`sessionize generate --identity-data`): an anonymous id on every event and a
user id once the visitor has logged in (docs/concepts/identity.md).

Added on top of the simulated visits from a random stream of its own, so that without it
the data stays the same for a seed. Per user: a first device, and for SECOND_DEVICE_P of
them a second one that a visit uses with SECOND_DEVICE_USE; for SHARED_P of the users the
first device is the next user's (a shared device: two user ids on one anonymous id). Per
visit: never logged in (NEVER_P), logged in from its first event (a remembered login,
REMEMBERED_P), or logging in at a later event (the rest); LOGOUT_P of the logged-in visits
log out at a later event, after which the events carry no user id. The line's `user_id` is
then the string `u` + the user's number, present only while logged in, and
`anonymous_id` is `d` + the device's number.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sessionize.generate.visits import Events, IdentityFields, Users, Visits

SECOND_DEVICE_P = 0.3
SECOND_DEVICE_USE = 0.4
SHARED_P = 0.05
NEVER_P = 0.35
REMEMBERED_P = 0.25
LOGOUT_P = 0.15


def add_identity_data(
    users: Users, visits: Visits, events: Events, rng: np.random.Generator
) -> Events:
    """`events` with `identity` set (see the module doc)."""
    n_users = users.ids.size
    second = rng.random(n_users) < SECOND_DEVICE_P
    shared = rng.random(n_users) < SHARED_P
    first = np.where(shared, (np.arange(n_users) + 1) % n_users, np.arange(n_users))
    n_visits = visits.user.size
    use_second = second[visits.user] & (rng.random(n_visits) < SECOND_DEVICE_USE)
    device = np.where(use_second, n_users + visits.user, first[visits.user])
    mode = rng.random(n_visits)
    login_at, logout_at = rng.random(n_visits), rng.random(n_visits)
    logs_out = rng.random(n_visits) < LOGOUT_P

    # Each event's position in its visit and the visit's length (events are sorted by time).
    order = np.lexsort((events.t_ms, events.visit))
    length = np.bincount(events.visit, minlength=n_visits)
    first_of_visit = np.concatenate([[0], np.cumsum(length)[:-1]])
    position = np.empty(events.visit.size, np.int64)
    position[order] = np.arange(events.visit.size) - first_of_visit[events.visit[order]]

    # Positions where the visit logs in and out (an out at or past its length: never).
    login = np.where(
        mode < NEVER_P,
        length,
        np.where(mode < NEVER_P + REMEMBERED_P, 0, 1 + (login_at * (length - 1)).astype(np.int64)),
    )
    after = login + 1 + (logout_at * np.maximum(length - login - 1, 0)).astype(np.int64)
    logout = np.where(logs_out, after, length)
    v = events.visit
    logged_in = (position >= login[v]) & (position < logout[v])
    return replace(events, identity=IdentityFields(device[v].astype(np.int64), logged_in))
