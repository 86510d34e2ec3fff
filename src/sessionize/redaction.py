"""Secrets out of every text the project writes or prints.

`redact_uri` is the one function every URI goes through on its way to text: errors, logs,
the progress log, checkpoint records, `status`, `history`, metrics and the report. It also
takes text that holds URIs (a client's error message) and the literal secrets a caller
knows (a password a server might echo back).
"""

from __future__ import annotations

import re
from urllib.parse import quote

from sessionize.errors import ConfigError

MASK = "***"
# `scheme://user:SECRET@` and `scheme://:SECRET@`; the secret runs to the last `@` before
# a blank, so an unencoded `@` in it is masked too.
_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/?#@:\s]*):[^\s]*@", re.I)
# `?password=...`, `&secret_key=...`, `sasl.password=`, `token=`, `access_key=`: a query
# parameter or option whose name says it is secret.
_SECRET_PARAM = re.compile(
    r"((?:^|[?&;\s])[^=&;\s]*(?:password|passwd|secret|token|access_key|credential)"
    r"[^=&;\s]*=)[^&;\s]*",
    re.I,
)


def redact_uri(text: str, *secrets: str | None) -> str:
    """`text` (a URI, or a message holding URIs) without passwords (`user:pw@` ->
    `user:***@`), secret query parameters (`?secret_key=...`, `password=`, `token=`,
    `access_key=`) or any of `secrets` (as given and percent-encoded).

    >>> redact_uri("postgresql://me:pw@db/app?schema=a&password=x")
    'postgresql://me:***@db/app?schema=a&password=***'
    >>> redact_uri("failed to resolve host 'pw@db'", "pw")
    "failed to resolve host '***@db'"
    """
    text = _USERINFO.sub(rf"\1:{MASK}@", text)
    text = _SECRET_PARAM.sub(rf"\1{MASK}", text)
    for secret in secrets:
        if secret:
            for form in {secret, quote(secret, safe="")}:
                text = text.replace(form, MASK)
    return text


# Schemes whose URIs carry a user and password that a client library reads.
_CREDENTIALED = ("postgresql", "postgres", "redis", "rediss", "s3")


def check_userinfo(uri: str, what: str) -> None:
    """Refuse a URI whose user or password holds an unencoded reserved character (`@`,
    `/`, `?`, `#`): clients split such a URI elsewhere than we do, and their errors would
    show part of the password as a host name or a port.

    Raises:
        ConfigError: `what` and the URI without its password, and how to encode it.

    >>> check_userinfo("postgresql://me:p%40ss@db/app", "--output")
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() not in _CREDENTIALED:
        return
    # The authority ends at the first / ? or #; a second @, or an @ after its end, means one
    # of those characters is in the password (or an @ in the query: encoded, it passes too).
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if rest.count("@") > 1 or ("@" not in authority and "@" in rest):
        postgres = scheme.lower().startswith("postgres")
        pg = " (or leave it out and set PGPASSWORD)" if postgres else ""
        raise ConfigError(
            f"{what} {redact_uri(uri)}: the user or password holds an unencoded @, /, ? or #: "
            f"percent-encode it (@ as %40, / as %2F, ? as %3F, # as %23, % as %25){pg}"
        )


def needs_secret(uri: str) -> bool:
    """Whether a recorded URI, its password masked, must be given again with it: a
    PostgreSQL client finds a missing password itself (PGPASSWORD, ~/.pgpass), the other
    clients do not.

    >>> needs_secret("postgresql://me:***@db/app"), needs_secret("redis://:***@r:6379/0")
    (False, True)
    """
    return MASK in uri and not uri.lower().startswith(("postgresql://", "postgres://"))
