"""S3 URIs taken apart: for delta-rs (object_store options) and boto3 (conditional writes).

pyarrow's filesystems cannot create an object only if it is absent; `put_if_absent` can
(`If-None-Match: *`), and it is what every writer that must not overwrite a concurrent
writer's object uses: commit files, lease epochs, state commit records.

An S3 endpoint other than AWS goes in the URI's query, as pyarrow reads it:
`s3://bucket/prefix?endpoint_override=127.0.0.1:29900&scheme=http`; credentials come from the
usual AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`).
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sessionize.errors import EnvironmentProblem


@dataclass(frozen=True)
class ObjectStoreUri:
    """An `s3://bucket/prefix?endpoint_override=HOST:PORT&scheme=http` URI, taken apart."""

    bucket: str
    prefix: str  # no leading or trailing slash
    endpoint: str | None  # e.g. http://127.0.0.1:29900; None = AWS itself
    query: str  # the original query string, to build child URIs

    @classmethod
    def parse(cls, uri: str) -> ObjectStoreUri | None:
        parts = urlsplit(uri)
        if parts.scheme != "s3":
            return None
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        endpoint = None
        if "endpoint_override" in q:
            host = q["endpoint_override"]
            endpoint = host if "://" in host else f"{q.get('scheme', 'https')}://{host}"
        return cls(parts.netloc, parts.path.strip("/"), endpoint, parts.query)

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def child(self, rel: str) -> str:
        """The s3:// URI of `rel` below the prefix, without the query (for delta-rs)."""
        return f"s3://{self.bucket}/{self.key(rel)}"

    def storage_options(self) -> dict[str, str]:
        """delta-rs (object_store) options: endpoint, and few quick retries while it is down."""
        opts = {"max_retries": "2", "retry_timeout": "5 seconds", "timeout": "30 seconds"}
        if self.endpoint:
            opts["AWS_ENDPOINT_URL"] = self.endpoint
            if self.endpoint.startswith("http://"):
                opts["AWS_ALLOW_HTTP"] = "true"
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            opts["AWS_REGION"] = region
        return opts

    def client(self) -> Any:  # a botocore S3 client
        """A boto3 client for what pyarrow cannot do (conditional writes); one per endpoint
        and process, as botocore clients are safe to share between threads."""
        return _client(self.endpoint, os.getpid())

    def put_if_absent(self, rel: str, body: bytes) -> bool:
        """Create object `rel` (below the prefix) with `body` unless it exists: False if it
        did, or if another writer created it at the same moment. Other errors propagate."""
        return put_if_absent(self.client(), self.bucket, self.key(rel), body)


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, pid: int):
    """`pid` in the key: a forked worker makes its own (connection pools do not survive a
    fork)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise EnvironmentProblem(
            "outputs and state on s3:// need boto3: pip install 'sessionize[s3]'"
        ) from exc

    cfg = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5)
    with _CLIENT_LOCK:  # boto3's default session is not thread-safe
        return boto3.session.Session().client("s3", endpoint_url=endpoint, config=cfg)


_CLIENT_LOCK = threading.Lock()


def put_if_absent(client, bucket: str, key: str, body: bytes) -> bool:
    """A conditional PUT (`If-None-Match: *`) with `client`: False when the key exists."""
    try:
        client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    except Exception as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
            return False
        raise
    return True
