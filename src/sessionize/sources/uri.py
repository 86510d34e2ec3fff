"""Input URIs and options of the Kafka and Kinesis sources, and the record contract they share.

URIs::

    kafka://HOST:PORT[,HOST:PORT...]/TOPIC
    kinesis://STREAM[?endpoint=http://127.0.0.1:24567&region=us-east-1]

Options (names are case-insensitive, as Spark's are):

- ``startingPosition``: ``earliest`` (default) or ``latest``; used only when a query starts
  without a checkpoint. Partitions or shards that appear later are always read from their
  earliest record.
- ``maxRecordsPerTrigger``: at most this many records per micro-batch (Spark's admission
  control, Spark 4.2+: refused before, `check_line_options`); unset means everything
  available. ``Trigger.AvailableNow`` honours it too.
- ``maxRecordBytes``: payloads larger than this (default 1 MiB) are not decoded; the row gets
  ``value`` NULL and ``error`` ``record too large (N bytes)``.
- ``readTimeout``: how long an executor keeps trying to read records that the driver has
  already seen before the task fails (default ``2m``).
- ``kafka.*`` (Kafka): passed to confluent-kafka / librdkafka without the prefix, e.g.
  ``kafka.security.protocol``. ``kinesis.*`` (Kinesis): boto3 client arguments, see
  ``KINESIS_CLIENT_OPTIONS``.

Anything else is refused with the list of accepted names: a typo never passes silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from sessionize import spark_version
from sessionize.config import parse_duration
from sessionize.errors import ConfigError, EnvironmentProblem
from sessionize.redaction import redact_uri
from sessionize.sources.lines import RECORD_SCHEMA, SPARK_SCHEMA, text_or_error

__all__ = ["RECORD_SCHEMA", "SPARK_SCHEMA"]  # the record contract, re-exported for sources

DEFAULT_MAX_RECORD_BYTES = 1 << 20
DEFAULT_READ_TIMEOUT_S = 120.0
COMMON_OPTIONS = ("startingPosition", "maxRecordsPerTrigger", "maxRecordBytes", "readTimeout")
# boto3 client arguments accepted as `kinesis.NAME` options.
KINESIS_CLIENT_OPTIONS = (
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "endpoint_url",
    "region_name",
    "verify",
)


@dataclass(frozen=True)
class KafkaAddress:
    bootstrap: str  # HOST:PORT[,HOST:PORT...]
    topic: str


@dataclass(frozen=True)
class KinesisAddress:
    stream: str
    endpoint: str | None = None  # None: the AWS endpoint of the region
    region: str | None = None  # None: boto3's default (AWS_DEFAULT_REGION, config file)


def parse_kafka_uri(uri: str) -> KafkaAddress:
    """`kafka://HOST:PORT[,HOST:PORT]/TOPIC` -> KafkaAddress."""
    if "@" in uri:
        raise ConfigError(
            f"'{redact_uri(uri)}': a Kafka URI takes no user or password: give them as "
            "options (kafka.sasl.username=..., kafka.sasl.password=..., with "
            "kafka.security.protocol and kafka.sasl.mechanism)"
        )
    parts = urlsplit(uri)
    topic = parts.path.lstrip("/")
    if parts.scheme != "kafka" or not parts.netloc or not topic or "/" in topic:
        raise ConfigError(
            f"'{redact_uri(uri)}' is not a Kafka input: write kafka://HOST:PORT/TOPIC"
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"'{redact_uri(uri)}': a Kafka URI takes no query; pass options instead")
    for host in parts.netloc.split(","):
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit():
            raise ConfigError(f"'{redact_uri(uri)}': broker '{host}' must be HOST:PORT")
    return KafkaAddress(bootstrap=parts.netloc, topic=topic)


def parse_kinesis_uri(uri: str) -> KinesisAddress:
    """`kinesis://STREAM?endpoint=URL&region=REGION` -> KinesisAddress."""
    parts = urlsplit(uri)
    if parts.scheme != "kinesis" or not parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(
            f"'{redact_uri(uri)}' is not a Kinesis input: write kinesis://STREAM"
            "[?endpoint=http://HOST:PORT&region=REGION]"
        )
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - {"endpoint", "region"})
    if unknown:
        raise ConfigError(
            f"'{redact_uri(uri)}': unknown parameter(s) {unknown}; accepted: endpoint, region"
        )
    endpoint = query.get("endpoint") or None
    if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
        raise ConfigError(f"'{redact_uri(uri)}': endpoint must be an http:// or https:// URL")
    return KinesisAddress(
        stream=parts.netloc, endpoint=endpoint, region=query.get("region") or None
    )


def confluent_kafka(purpose: str):
    """The confluent_kafka module (admin included), or one line naming the extra to install."""
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise EnvironmentProblem(
            f"{purpose} needs confluent-kafka: pip install 'sessionize[kafka]'"
        ) from e
    return confluent_kafka


class LazyClient:
    """A reader's client, made on first use in each process and never pickled: Spark ships
    readers to executors, where each makes its own."""

    _handle: Any = None

    def _make_client(self) -> Any:
        raise NotImplementedError

    def _client(self) -> Any:
        if self._handle is None:
            self._handle = self._make_client()
        return self._handle

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_handle": None}


def kinesis_client(address: KinesisAddress, options: Mapping[str, str] | None = None):
    """A boto3 Kinesis client for `address`; `options` are extra client arguments
    (KINESIS_CLIENT_OPTIONS). Retries with backoff on throttling and transient errors."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise EnvironmentProblem("Kinesis needs boto3: pip install 'sessionize[kinesis]'") from e
    kwargs: dict = {"config": Config(retries={"max_attempts": 10, "mode": "standard"})}
    if address.endpoint:
        kwargs["endpoint_url"] = address.endpoint
    if address.region:
        kwargs["region_name"] = address.region
    kwargs.update(options or {})
    return boto3.client("kinesis", **kwargs)


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one source; `client` holds the prefixed options, prefix removed."""

    starting_position: str = "earliest"
    max_records_per_trigger: int | None = None
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    client: dict[str, str] = field(default_factory=dict)


def _positive_int(name: str, text: str) -> int:
    try:
        n = int(str(text).strip())
    except ValueError:
        n = 0
    if n <= 0:
        raise ConfigError(f"option {name}='{text}' must be a positive integer")
    return n


def parse_source_options(
    options: Mapping[str, str],
    prefix: str,
    *,
    client_keys: Iterable[str] | None = None,
    internal: Iterable[str] = (),
) -> SourceOptions:
    """Check `options` against the common names plus `PREFIX.*`, case-insensitively.

    `client_keys` limits which names may follow the prefix (None: any, the client checks);
    `internal` names are set by the source itself (e.g. the parsed URI) and skipped here.
    """
    common = {name.lower(): name for name in COMMON_OPTIONS}
    allowed_client = None if client_keys is None else {k.lower() for k in client_keys}
    skip = {name.lower() for name in internal}
    values: dict[str, str] = {}
    client: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low in skip:
            continue
        if low in common:
            values[common[low]] = str(value)
        elif low.startswith(prefix + ".") and len(low) > len(prefix) + 1:
            name = key[len(prefix) + 1 :]
            if allowed_client is not None and name.lower() not in allowed_client:
                raise ConfigError(
                    f"option '{key}' is not a {prefix} client setting; accepted: "
                    + ", ".join(f"{prefix}.{k}" for k in sorted(allowed_client))
                )
            client[name] = str(value)
        else:
            raise ConfigError(
                f"unknown source option '{key}'; accepted: {', '.join(COMMON_OPTIONS)} "
                f"and {prefix}.* settings"
            )
    position = values.get("startingPosition", "earliest").strip().lower()
    if position not in ("earliest", "latest"):
        raise ConfigError(f"option startingPosition='{position}': use earliest or latest")
    max_records = values.get("maxRecordsPerTrigger")
    max_bytes = values.get("maxRecordBytes")
    timeout = values.get("readTimeout")
    return SourceOptions(
        starting_position=position,
        max_records_per_trigger=(
            _positive_int("maxRecordsPerTrigger", max_records) if max_records else None
        ),
        max_record_bytes=(
            _positive_int("maxRecordBytes", max_bytes) if max_bytes else DEFAULT_MAX_RECORD_BYTES
        ),
        read_timeout_s=(parse_duration(timeout) / 1e6 if timeout else DEFAULT_READ_TIMEOUT_S),
        client=client,
    )


def check_line_options(options: Mapping[str, str]) -> None:
    """Refuse, in one line naming Spark 4.2, the per-trigger cap on a line whose Python
    sources have no admission control (4.0, 4.1): there every micro-batch reads all that
    the input holds, and nothing else changes."""
    for key in options:
        if key.lower() == "maxrecordspertrigger":
            spark_version.require("source_admission_control", f"the source option {key}")


def decode_records(
    payloads: list[bytes | None], positions: list[str], max_record_bytes: int
) -> pa.RecordBatch:
    """Rows of RECORD_SCHEMA: the payload as UTF-8 text in `value`, and an `error` if any.

    A payload that is absent (a Kafka record with a null value) or larger than
    `max_record_bytes` gets `value` NULL and the error; one that is not UTF-8 keeps its text
    escaped (`lines.text_or_error`) next to `not UTF-8 (byte N)`. Either goes on as data: it
    never stops the stream. Whether `value` is valid JSON is the parser's business.
    """
    raw = pa.array(payloads, pa.binary())
    sizes = pc.binary_length(raw)
    if raw.null_count == 0 and (len(raw) == 0 or pc.max(sizes).as_py() <= max_record_bytes):
        try:  # the usual case: the whole chunk is valid UTF-8, checked in one pass by Arrow
            return pa.RecordBatch.from_arrays(
                [raw.cast(pa.string()), pa.nulls(len(raw), pa.string()), pa.array(positions)],
                schema=RECORD_SCHEMA,
            )
        except pa.ArrowInvalid:
            pass
    values: list[str | None] = []
    errors: list[str | None] = []
    for payload in payloads:
        if payload is None:
            values.append(None)
            errors.append("no payload (null value)")
        elif len(payload) > max_record_bytes:
            values.append(None)
            errors.append(f"record too large ({len(payload)} bytes)")
        else:
            value, error = text_or_error(payload)
            values.append(value)
            errors.append(error)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(values, pa.string()),
            pa.array(errors, pa.string()),
            pa.array(positions, pa.string()),
        ],
        schema=RECORD_SCHEMA,
    )


def split_budget(backlog: Mapping[str, int], budget: int) -> dict[str, int]:
    """Share `budget` records among partitions with the given backlogs, deterministically.

    Water-filling: every partition gets an equal share, a partition needing less keeps only
    what it needs and the rest is shared again among the others; the last few units go to the
    partitions first in key order. The result never exceeds a backlog, and sums to
    min(budget, total backlog), so a batch always advances when anything is available.
    """
    grant = {key: 0 for key in backlog}
    hungry = sorted((k for k, n in backlog.items() if n > 0), key=_natural)
    left = budget
    while hungry and left > 0:
        share = left // len(hungry)
        if share == 0:
            for key in hungry[:left]:
                grant[key] += 1
            break
        still = []
        for key in hungry:
            take = min(share, backlog[key] - grant[key])
            grant[key] += take
            left -= take
            if grant[key] < backlog[key]:
                still.append(key)
        hungry = still
    return grant


def _natural(key: str) -> tuple[int, str]:
    """Sort '2' before '10' (Kafka partitions), other keys as text (Kinesis shard ids)."""
    return (int(key), "") if key.isdigit() else (1 << 62, key)
