"""S3 URIs taken apart: for delta-rs (object_store options) and boto3 (conditional writes).

An S3 endpoint other than AWS goes in the URI's query, as pyarrow reads it:
`s3://bucket/prefix?endpoint_override=127.0.0.1:29900&scheme=http`; credentials come from the
usual AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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

    def client(self):  # -> botocore S3 client
        """A boto3 client for what pyarrow cannot do (conditional writes)."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise EnvironmentProblem(
                "Parquet outputs on s3:// need boto3: pip install 'sessionize[s3]'"
            ) from exc

        cfg = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5)
        return boto3.client("s3", endpoint_url=self.endpoint, config=cfg)
