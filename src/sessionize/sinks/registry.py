"""Output URI and format -> sink, imported lazily (as the state stores' registry).

A sink is found by its output's scheme (`postgresql://`, `kafka://`, `iceberg://`) or, for
a file output (a local path, `file://`, `s3://`), by its format (`parquet`, `delta`). Each
entry is "module:Class" plus the extra to install; a sink declares what it can do on its
class (`base.Capabilities`), so the layers above ask the sink, never which one it is. A
new sink is one module, one line here and a fixture of the sink contract suite
(tests/sinks/conftest.py).
"""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

import pyarrow.dataset as ds

from sessionize.errors import ConfigError, EnvironmentProblem
from sessionize.fs import is_local, without_options
from sessionize.mapping import EventMapping
from sessionize.redaction import redact_uri
from sessionize.sinks import replaced
from sessionize.sinks.base import Capabilities, Sink
from sessionize.sinks.outputs import Outputs, session_outputs

# kind -> ("module:Class", the extra its imports need, or None)
_REGISTRY: dict[str, tuple[str, str | None]] = {
    "parquet": ("sessionize.sinks.parquet:ParquetSink", None),
    "parquet-s3": ("sessionize.sinks.parquet_s3:ManifestParquetSink", "s3"),
    "delta": ("sessionize.sinks.delta:DeltaSink", None),
    "postgresql": ("sessionize.sinks.postgres:PostgresSink", "postgres"),
    "kafka": ("sessionize.sinks.kafka:KafkaSink", "kafka"),
    "iceberg": ("sessionize.sinks.iceberg:IcebergSink", "iceberg"),
}
# URI schemes whose sink writes its own kind of storage (a format does not apply).
_SCHEMES = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "kafka": "kafka",
    "iceberg": "iceberg",
}
FORMATS = ("parquet", "delta")
WRITTEN = "a local path, file://, s3://, postgresql://, kafka:// or iceberg://"


def kind_of(output: str, fmt: str | None = "parquet") -> str:
    """The registry's kind for `--output` and `--output-format` (None: the place only).

    Raises:
        ConfigError: a scheme no sink writes, a format a scheme's sink does not take, or
            an unknown format, in one line.

    >>> kind_of("out/"), kind_of("s3://b/out", "delta"), kind_of("kafka://h:9092/web")
    ('parquet', 'delta', 'kafka')
    """
    scheme = urlsplit(output).scheme.lower() if "://" in output else ""
    if scheme in _SCHEMES:
        if fmt not in (None, "parquet"):  # parquet: the default, given or not
            raise ConfigError(
                f"--output {without_options(redact_uri(output))}: {_SCHEMES[scheme]} outputs "
                "have their own format; leave --output-format out (Delta is for paths and s3://)"
            )
        return _SCHEMES[scheme]
    if not (is_local(output) or scheme == "s3"):
        raise ConfigError(
            f"--output {without_options(output)}: outputs are not written to {scheme}:// "
            f"URIs; give {WRITTEN}"
        )
    fmt = fmt or "parquet"
    if fmt not in FORMATS:
        raise ConfigError(f"unknown output format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "parquet" and scheme == "s3":
        return "parquet-s3"
    return fmt


def register(kind: str, target: str, extra: str | None = None) -> None:
    """Map `kind` to a sink class given as "module:Class" (imported on first use)."""
    _REGISTRY[kind] = (target, extra)


def sink_class(kind: str) -> type[Sink]:
    """The sink class of `kind`, imported now.

    Raises:
        ConfigError: its extra is not installed, in one line naming it.
    """
    target, extra = _REGISTRY[kind]
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if e.name == module_name or extra is None:
            raise EnvironmentProblem(f"the {kind} output is not available: {e}") from e
        raise ConfigError(
            f"{kind} outputs need the {extra} extra: pip install 'sessionize[{extra}]'"
        ) from None
    return getattr(module, class_name)


def check_output(output: str, fmt: str | None = "parquet") -> None:
    """Before a job starts: `--output` is a place a sink writes, with what writing it needs
    installed (`fmt` None: the place only, before the format is resolved).

    Raises:
        ConfigError: another scheme, a format its sink does not take, a missing extra, a
            malformed URI, in one line naming what is written.
        StateError: a local output whose move was cut short (sinks/tree_move.py).

    >>> check_output("out/")
    """
    kind = kind_of(output, fmt)
    if fmt is None and kind == "parquet-s3":
        return  # the extra is asked for once the format is known
    sink_class(kind).check_place(output)  # type: ignore[attr-defined]
    if fmt is not None:
        open_sink(output, fmt).check()  # a broker answers, with transactions if needed


def capabilities(output: str, fmt: str = "parquet") -> Capabilities:
    """What the sink of `--output` and `--output-format` can do (its class's declaration).

    >>> capabilities("out/").replaces_by_key, capabilities("out/", "delta").replaces_by_key
    (False, True)
    """
    return sink_class(kind_of(output, fmt)).capabilities


def check_open_sessions(wanted: bool, output: str, fmt: str) -> None:
    """Before a job starts: `--open-sessions` needs an output that replaces rows by key
    (the engine must feed it too: engines.choice, `check_replaced_by_key`).

    Raises:
        ConfigError: an output that cannot, in one line naming those that can.
    """
    if wanted and not capabilities(output, fmt).replaces_by_key:
        raise replaced.refuse(
            f"a {kind_of(output, fmt)} output cannot replace rows by user",
            "use --output-format delta, a postgresql://, kafka:// or iceberg:// output",
        )


def check_revisions(wanted: bool, output: str, fmt: str) -> None:
    """Before a job starts: `--revise-within` needs an output that takes revisions
    (Parquet's `session_revisions`, local or on `s3://`, Kafka's keyed records; Delta's,
    PostgreSQL's and Iceberg's upserts): every built-in sink does; a registered one may not.

    Raises:
        ConfigError: an output whose sink takes no revisions, in one line.
    """
    can = capabilities(output, fmt)
    if wanted and not (can.appends_revisions or can.upserts_revisions):
        raise ConfigError(
            f"--revise-within: {kind_of(output, fmt)} outputs do not take revisions "
            "(Parquet, Delta, PostgreSQL, Iceberg and Kafka outputs do): leave "
            "--revise-within out, or give such an --output"
        )


def open_sink(
    output: str,
    fmt: str = "parquet",
    *,
    job: str = "sessionize",
    outputs: Outputs | None = None,
    mapping: EventMapping | None = None,
    open_sessions: bool = False,
    revise: bool = False,
) -> Sink:
    """The sink for `--output` and `--output-format`, writing `outputs` (default: the
    session outputs of `mapping`, with `open_sessions` replaced by user when asked,
    `identities` kept current where the sink `keeps_current`, and the revision outputs
    with `revise`); `job` names the writer in a table's commits and a topic's markers.

    Raises:
        ConfigError: as `check_output`.
    """
    kind = kind_of(output, fmt)
    cls = sink_class(kind)
    cls.check_place(output)  # type: ignore[attr-defined]
    if outputs is None:
        outputs = session_outputs(
            mapping, open_sessions, cls.capabilities.keeps_current, revise=revise
        )
    return sink_at(output, fmt, job=job, outputs=outputs)


def sink_at(
    output: str, fmt: str = "parquet", *, job: str = "sessionize", outputs: Outputs | None = None
) -> Sink:
    """The sink of `output` without the checks of its place: for its records and leases,
    which tools (a move completing one cut short) reach whatever state the place is in."""
    cls = sink_class(kind_of(output, fmt))
    return cls(output, job, outputs or session_outputs())  # type: ignore[call-arg]


def record_place(output: str) -> str:
    """Where a batch job keeps its records for `output` (the output itself; a Kafka
    output's staging place, `?staging=DIR`, required there).

    Raises:
        ConfigError: a Kafka output that names no staging place.

    >>> record_place("kafka://broker:9092/web?staging=/data/web-staging")
    '/data/web-staging'
    """
    return open_sink(output).record_place  # type: ignore[attr-defined]


def committed_rows(output: str, name: str) -> ds.Dataset | None:
    """Output `name` under `output` as its readers should see it, whatever wrote it: a
    table's current version (Delta, Iceberg, PostgreSQL), the committed batches of Parquet
    on s3:// (its commit files), local Parquet's batch directories and compacted files.
    None when the output is not there.

    Raises:
        ConfigError: a Kafka output (its records are read with a Kafka consumer)."""
    if kind_of(output, None) in ("parquet", "parquet-s3"):  # read in the format it holds
        table = open_sink(output, "delta", job="reader").committed(name)
        if table is not None:
            return table
    return open_sink(output).committed(name)
