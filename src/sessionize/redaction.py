"""Secrets out of every text the project writes or prints.

`redact_uri` is the one function every URI goes through on its way to text: errors, logs,
the progress log, checkpoint records, `status`, `history`, metrics and the report. It also
takes text that holds URIs (a client's error message) and the literal secrets a caller
knows (a password a server might echo back).
"""

from __future__ import annotations

import re
from urllib.parse import quote

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
