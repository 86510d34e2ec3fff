"""`Sessionizer`: sessionization inside the user's own PySpark application.

The `stream` and `batch` commands are built on it: the CLI opens a source and hands its
DataFrame to the same `Sessionizer.start` that `stream` calls, so the API has every
guarantee of the CLI (docs/design.md, "Commit order"): one driver per checkpoint (its
lease), the checkpoint's settings check, the same engines and batch runner, exactly-once
outputs, restart from the checkpoint. It runs on the session of the DataFrame it is given
and never creates or reconfigures one beyond the engine's settings for the life of a query.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from sessionize.api import launcher
from sessionize.api.arguments import event_mapping, session_rules
from sessionize.api.bounded import SessionsResult, bounded_sessions
from sessionize.api.inputs import file_parser, reader, settle_key_type
from sessionize.api.launcher import StreamPlaces
from sessionize.api.query import StreamRun
from sessionize.api.recorded import (
    RECORDED,
    RECORDED_ARGS,
    recorded_user_type,
    resolve,
    settings_record,
)
from sessionize.api.sessionizer_settings import SessionizerSettings, StoreSettings
from sessionize.api.stream_jobs import SessionStream
from sessionize.api.workers import check_workers
from sessionize.config import SessionRules
from sessionize.durations import Duration, duration_us
from sessionize.engines.checkpoint import Checkpoint, read_settings
from sessionize.engines.runner import Parser
from sessionize.engines.sessions import SessionSettings
from sessionize.errors import ConfigError
from sessionize.fs import absolute_local
from sessionize.mapping import EventMapping

OUTPUT_FORMATS = ("parquet", "delta")
_LOG = logging.getLogger("sessionize")

Resolved = tuple["Sessionizer", str]  # a Sessionizer and output format, nothing left out


class Sessionizer:
    """Sessionize events of the user's own DataFrames, streaming or bounded.

    `gap`, `lateness`, `close_actions` and `partitions` are the session rules and part of
    the state, as `--gap` etc. are for the CLI: a checkpoint records them (all but
    `max_future`) at its first run. Left out (None), an argument takes the checkpoint's
    recorded value when a query resumes (the defaults below otherwise); given with another
    value, even the default, the start is refused naming it.

    Args:
        gap: Inactivity that ends a session: `"10m"`, a `timedelta` or microseconds.
        lateness: How far the watermark trails the highest event time seen.
        close_actions: Actions that end a session (a list, or one comma-separated string).
        state: `files` (under the checkpoint), `files:PATH`, `postgresql://...`,
            `redis://...`, `dynamodb://...`, `spark-rocksdb` or `spark-hdfs`.
        partitions: State partitions, users hashed to them; fixed for a state's life.
        user: Dotted path of the user id (a struct field like `a.b`, or a top-level name).
        anonymous_field: Dotted path of the anonymous id (a cookie or device id on every
            event). Set, it keys the sessions (typed by `user_type`), `user` may be null
            or missing (a string when present), and sessions carry `anonymous_id`,
            `user_id` and `stitched_user_id` (docs/concepts/identity.md).
        time: Dotted path of the event time.
        page: Dotted path of the page.
        action: Dotted path of the action (absent or NULL means `view`).
        time_format: `iso8601` (strings or timestamps), `epoch-ms` or `epoch-s` (numbers).
        user_type: `long` (64-bit integers) or `string` (1 to 256 bytes of UTF-8). None:
            the user column's own type decides (a Spark string column gives string keys,
            an integral one long keys; JSON lines give long keys), and a checkpoint keeps
            the type it recorded (a column that implies another is refused; see `stream`).
        keep: Session columns to the paths of the first event's attributes they carry
            (None: the sample contract's `site`, `api_version`, `browser`, `language`,
            `device_type`; `{}`: none).
        max_future: Events more than this ahead of the batch's time are invalid (None: no
            limit).
        job: Job name, isolating jobs that share one state store.
        max_duration: A session lasts less than this (None: no cap). Part of the state,
            as are the four below.
        timezone: IANA zone of `session_date` and of `split_at_midnight` (default `UTC`).
        split_at_midnight: End sessions at midnight in `timezone`.
        user_ttl: With `anonymous_field`: an anonymous id's identity is forgotten this
            long after its last event, by event time (default `400d`; at least `gap`).
        attribution_lookback: With `anonymous_field`: how far back a direct session looks
            for its user's last non-direct source (default `90d`, GA4's).
        revise_within: Late events this far behind the watermark revise the sessions they
            join: in `session_revisions` on local Parquet, keyed by `session_id` on
            Kafka, upserted into `sessions` on Delta, PostgreSQL and Iceberg (None: off,
            they are late).
        split_on_change: Dotted path of a value (e.g. a campaign) whose change starts a
            new session (None: off).
        gap_field: Dotted path of each event's own gap in seconds; missing means `gap`.
        url: Dotted path of the page URL with its query string (`utm_*`, `gclid`; see
            docs/concepts/sessions.md). A `keep` name `last:NAME` keeps the last value.
        referrer: Dotted path of the referrer (`referrer_host`, `channel`).
        user_agent: Dotted path of the user agent (`is_bot`, `bots`).
        site_hosts: The site's own hosts (default: the first event's URL host).
        channel_rules: Path of a channel rules file replacing the default table.
        page_view_actions: Actions counted as page views (default `view`).
        max_page_time: The longest time one event counts in `engaged_time_ms` (30m).
        ping_action: The heartbeat action: engaged time from its events instead.
        heartbeat: The pings' period (10s). min_visit: what a ping adds (5s).
        engaged_after: A session this long is engaged (10s).
        conversions: `NAME=ACTION[,value=PATH]` each: `NAME_count`, `NAME_value`,
            `NAME_first_at` and `converted`.
        bots: `flag` (`is_bot`) or `drop` (bots' events are dropped and counted).
            All of these are part of the state, as are the mapping's fields.

    Raises:
        ConfigError: A setting is out of range or malformed (a duration that does not
            parse, `partitions` below 1, an unknown time format or user type, a bad path,
            `timezone="Mars/Olympus"`, `max_duration="0s"`).

    Example:
        >>> s = Sessionizer(gap="10m", lateness="10m", close_actions=["browser_close"],
        ...                 state="files", partitions=4,
        ...                 user="anonymous_id", time="ts", page="url", action="type",
        ...                 time_format="epoch-ms")
        >>> query = s.stream(events_df, output="out/", checkpoint="chk/")  # StreamingQuery
        >>> result = s.sessions(bounded_df)  # .sessions, .page_views, .invalid: DataFrames
        >>> daily = Sessionizer(max_duration="24h", timezone="Europe/Paris",
        ...                     split_at_midnight=True, split_on_change="utm.campaign",
        ...                     gap_field="session_gap_s")
    """

    def __init__(
        self,
        gap: Duration | None = None,
        lateness: Duration | None = None,
        close_actions: Iterable[str] | None = None,
        state: str | None = None,
        partitions: int | None = None,
        *,
        user: str | None = None,
        anonymous_field: str | None = None,
        time: str | None = None,
        page: str | None = None,
        action: str | None = None,
        time_format: str | None = None,
        user_type: str | None = None,
        keep: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        max_future: Duration | None = "1d",
        job: str | None = None,
        max_duration: Duration | None = None,
        timezone: str | None = None,
        split_at_midnight: bool | None = None,
        user_ttl: Duration | None = None,
        attribution_lookback: Duration | None = None,
        revise_within: Duration | None = None,
        split_on_change: str | None = None,
        gap_field: str | None = None,
        url: str | None = None,
        referrer: str | None = None,
        user_agent: str | None = None,
        site_hosts: str | Iterable[str] | None = None,
        channel_rules: str | None = None,
        page_view_actions: str | Iterable[str] | None = None,
        max_page_time: Duration | None = None,
        ping_action: str | None = None,
        heartbeat: Duration | None = None,
        min_visit: Duration | None = None,
        engaged_after: Duration | None = None,
        conversions: Iterable[str] | None = None,
        bots: str | None = None,
    ):
        # The recorded arguments by name (RECORDED_ARGS's keys are parameters): what the
        # caller chose; the rest takes a checkpoint's recorded value (or the default).
        given = {k: v for k, v in locals().items() if k in RECORDED_ARGS}
        self.settings = SessionizerSettings(
            rules=session_rules(given),
            mapping=event_mapping(given),
            store=StoreSettings(
                "files" if state is None else state,
                4 if partitions is None else partitions,
                "sessionize" if job is None else job,
            ),
            max_future_us=None if max_future is None else duration_us(max_future, "max_future"),
            explicit=frozenset(RECORDED_ARGS[k] for k, v in given.items() if v is not None),
            # Without a user_type, the input's user column decides it (`_for_input`).
            user_type_given=user_type is not None,
        )

    @classmethod
    def of(cls, settings: SessionizerSettings) -> Sessionizer:
        """A Sessionizer of already validated settings (the CLI's).

        Example:
            >>> settings = SessionizerSettings(SessionRules(), EventMapping())
            >>> Sessionizer.of(settings).partitions
            4
        """
        s = cls.__new__(cls)
        s.settings = settings
        return s

    # The groups' settings by name, as the keyword arguments call them.
    @property
    def rules(self) -> SessionRules:
        return self.settings.rules

    @property
    def mapping(self) -> EventMapping:
        return self.settings.mapping

    @property
    def state(self) -> str:
        return self.settings.store.state

    @property
    def partitions(self) -> int:
        return self.settings.store.partitions

    @property
    def job(self) -> str:
        return self.settings.store.job

    @property
    def max_future_us(self) -> int | None:
        return self.settings.max_future_us

    @property
    def explicit(self) -> frozenset[str]:
        """The recorded settings given (RECORDED's names)."""
        return RECORDED if self.settings.explicit is None else self.settings.explicit

    def resolved(self, record: Mapping[str, object], output_format: str | None = None) -> Resolved:
        """(this Sessionizer, output format) with every recorded setting it was not given
        taken from `record` (a checkpoint's or a state's settings as `recorded_settings`
        spells them), all counted as given then; one given with another value stays as
        given, for the checkpoint check to refuse. Raises ConfigError when the record hides
        the state's secret and no `state` was given, or when `user_ttl` or
        `attribution_lookback` is given without an anonymous field (given or recorded).

        >>> Sessionizer(gap="5m").resolved({"gap": "5m", "partitions": 8})[0].partitions
        8
        """
        settings, output_format = resolve(self.settings, record, output_format)
        return Sessionizer.of(settings), output_format

    def with_checkpoint(
        self, checkpoint: Checkpoint | str, output_format: str | None = None
    ) -> Resolved:
        """`resolved` against the settings `checkpoint` recorded (none for a new one)."""
        return self.resolved(read_settings(checkpoint), output_format)

    def _for_input(self, df: DataFrame, recorded_type: str | None) -> Sessionizer:
        """This Sessionizer with the user key type settled for `df` (`inputs.settle_key_type`)."""
        return Sessionizer.of(settle_key_type(self.settings, df, recorded_type))

    # ------------------------------------------------------------------ bounded

    def sessions(self, events: DataFrame) -> SessionsResult:
        """The sessions of a complete, bounded DataFrame of events, in one pass.

        No state and no checkpoint: every session is closed at the end of the data (by
        inactivity or a closing action, as in a stream whose watermark passed it), and
        nothing is late.

        Args:
            events: A bounded DataFrame of events in the shapes `stream` takes: typed
                columns at the mapped paths, or a `value` column of JSON lines.

        Returns:
            A SessionsResult of lazy DataFrames: `.sessions` (the columns of the `sessions`
            output, without `batch_id`), `.page_views` and `.invalid` (the rows that are not
            events, with their `reason`, as in `invalid_events`).

        Raises:
            ConfigError: A required field (user, time, page) has no column, or a column
                of a type that can never hold it.
            EnvironmentProblem: Spark's Python workers cannot import sessionize (checked
                once per session by a tiny job; the line names the PYSPARK_PYTHON to set).

        Example:
            >>> result = Sessionizer(user="anonymous_id").sessions(df)
            >>> result.sessions.show(); result.invalid.groupBy("reason").count().show()
        """
        s = self._for_input(events, None)
        records, parser = reader(events, s.mapping)
        check_workers(events.sparkSession)
        return bounded_sessions(
            records,
            parser,
            s.rules,
            s.partitions,
            time.time_ns() // 1000,
            s.max_future_us,
            s.mapping,
        )

    # ------------------------------------------------------------------ streaming

    def stream(
        self,
        events: DataFrame,
        *,
        output: str,
        checkpoint: str,
        trigger: str = "available-now",
        output_format: str | None = None,
        progress_log: str | None = None,
        on_batch: Callable[[str], None] | None = None,
        metrics_port: int | None = None,
        open_sessions: bool = False,
        compact_every: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> StreamingQuery:
        """Start sessionizing the streaming DataFrame `events`; returns its StreamingQuery.

        The four outputs (`sessions`, `page_views`, `late_events`, `invalid_events`) go to
        `output` exactly once. A restart with the same checkpoint resumes after its last
        committed batch, with the checkpoint's recorded values for the settings (and
        `output_format`) not given; another `output` is refused (outputs move with
        `sessionize maintain --move-output`). The checkpoint's lease is held until the
        query ends, however it ends. One line per batch goes to `on_batch` and, as JSON, to
        the progress log.

        Args:
            events: A streaming DataFrame of typed columns at the mapped paths, or of a
                `value` column of JSON lines (string or binary, as Spark's Kafka source
                gives it).
            output: Where the outputs go: a local path, a pyarrow filesystem URI
                (`s3://bucket/prefix?...`), PostgreSQL tables
                (`postgresql://USER@HOST/DB?schema=S`, docs/reference/outputs.md) or Kafka
                topics (`kafka://HOST:PORT/PREFIX`, staged under `CHECKPOINT/kafka-staging`
                unless `?staging=DIR` says where).
            checkpoint: Spark's checkpoint of the query (local or HDFS), plus the settings
                it is bound to and, with `state="files"`, the state.
            trigger: `available-now` (process what is there, then stop) or
                `processing-time=30s` (run continuously).
            output_format: `parquet` (Hive-partitioned directories) or `delta` (Delta Lake
                tables); None: the checkpoint's, else `parquet`.
            progress_log: Where the JSON line of each batch goes (default
                `CHECKPOINT/progress.jsonl`).
            on_batch: Called with each batch's one-line summary (default: the `sessionize`
                logger).
            metrics_port: Serve Prometheus metrics on this port of this process (0: any
                free port) while the query runs (engines/metrics.py; extra `metrics`); the
                address is said once to `on_batch` (`metrics on http://HOST:PORT/metrics`).
            open_sessions: Also keep `open_sessions`, the sessions not yet emitted, replaced
                by user each batch (Delta, PostgreSQL, Kafka; docs/how-to/open-sessions.md).
            compact_every: Local Parquet outputs: after every N-th batch, compact the
                published batches (`sinks/compaction.py`) before the next batch starts.
            metrics_host: The address the metrics listen on: this machine only by default;
                `0.0.0.0` (every interface) for a Prometheus server elsewhere.

        Returns:
            Spark's StreamingQuery of the run: `awaitTermination()`, `stop()`, `isActive`.

        Raises:
            ConfigError: A setting is wrong, `events` is not streaming, a required field
                has no column, or (without `user_type`) the user column implies another key
                type than the checkpoint recorded; the line says which `user_type` to pass.
            IncompatibleCheckpoint: A setting given differs from the checkpoint's record, or
                the output or input is another; the message names the difference.
            OutputOwned: The output belongs to another job (another checkpoint, a batch
                job); the message names it (docs/concepts/outputs.md, "One owner per output").
            LeaseHeld: Another driver runs on this checkpoint or writes the output.
            StateError: The state store is unreachable or does not match the checkpoint.
            EnvironmentProblem: Spark's Python workers cannot import sessionize (raised
                before the query starts).

        Example:
            >>> events = spark.readStream.text("events/")
            >>> query = Sessionizer().stream(events, output="out/", checkpoint="chk/")
            >>> query.awaitTermination()
        """
        return self.start(
            events,
            output=output,
            checkpoint=checkpoint,
            trigger=trigger,
            output_format=output_format,
            progress_log=progress_log,
            on_batch=on_batch,
            metrics_port=metrics_port,
            open_sessions=open_sessions,
            compact_every=compact_every,
            metrics_host=metrics_host,
        ).query

    def start(
        self,
        events: DataFrame | Callable[[], DataFrame],
        *,
        output: str,
        checkpoint: str,
        trigger: str = "available-now",
        output_format: str | None = None,
        progress_log: str | None = None,
        on_batch: Callable[[str], None] | None = None,
        input_name: str = "dataframe",
        metrics_port: int | None = None,
        source_options: Mapping[str, str] | None = None,
        open_sessions: bool = False,
        compact_every: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> StreamRun:
        """`stream`, returning the run (its query, batch records, `wait()`).

        Args:
            events: As for `stream`, or a function that builds the DataFrame: it is called
                after the checks that need no Spark (lease, checkpoint settings, state), so
                that those fail first.
            output: As for `stream`.
            checkpoint: As for `stream`.
            trigger: As for `stream`.
            output_format: As for `stream`.
            progress_log: As for `stream`.
            on_batch: As for `stream`.
            input_name: The `--input` URI (recorded: a checkpoint follows one input), or
                `dataframe`.
            metrics_host: As for `stream`.
            metrics_port: As for `stream`; the metrics include the input's lag unless
                `input_name` is `dataframe`.
            source_options: The input's options, to measure its lag.
            open_sessions: As for `stream`.
            compact_every: As for `stream`.

        Returns:
            The StreamRun: `query`, the committed batch `records`, and `wait()`, which
            waits for the end and raises a batch's SessionizeError as itself.

        Raises:
            ConfigError: As for `stream` (and `open_sessions` where it cannot be kept).
            IncompatibleCheckpoint: As for `stream`.
            OutputOwned: As for `stream`.
            LeaseHeld: As for `stream`.
            StateError: As for `stream`.

        Example:
            >>> run = Sessionizer().start(events, output="out/", checkpoint="chk/")
            >>> records = run.wait()            # one dict per committed batch
        """
        if output_format is not None and output_format not in OUTPUT_FORMATS:
            raise ConfigError(f"--output-format must be one of {', '.join(OUTPUT_FORMATS)}")
        ck = Checkpoint.at(checkpoint)
        places = StreamPlaces(
            output=output,
            checkpoint=ck,
            trigger=trigger,
            output_format=output_format,
            progress_log=progress_log,
            on_batch=on_batch,
            input_name=input_name,
            source_options=source_options or {},
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            compact_every=compact_every,
        )
        sessionizer = self
        # Without a user type, the DataFrame's user column decides it: build it now.
        if not self.settings.user_type_given:
            events = events() if callable(events) else events
            sessionizer = self._for_input(events, recorded_user_type(ck))
        return launcher.start(SessionStream(sessionizer, events, open_sessions), places)

    def engine_settings(
        self,
        state_uri: str,
        output: str,
        output_format: str,
        open_sessions: bool = False,
        handoff: str = "",
    ) -> SessionSettings:
        """What the store engine's tasks need for these rules, with absolute local paths
        (relative ones would resolve in each executor's own directory); `handoff`: where
        the sessions go to the users step with identity (engines/handoff.py)."""
        if state_uri.startswith("files:"):
            state_uri = "files:" + absolute_local(state_uri.removeprefix("files:"))
        return SessionSettings.of(
            self.rules,
            self.partitions,
            state_uri,
            self.job,
            absolute_local(output),
            output_format=output_format,
            max_future_us=self.max_future_us,
            mapping=self.mapping,
            open_sessions=open_sessions,
            handoff=absolute_local(handoff) if handoff else "",
        )

    def file_parser(self) -> Parser:
        """The parser of a file tree's records in the mapping's `input_format`: JSON lines,
        or the typed rows of `sources.parquet`."""
        return file_parser(self.mapping)

    def recorded_settings(self, output_format: str) -> dict[str, object]:
        """What the checkpoint is bound to (see engines.checkpoint)."""
        return settings_record(self.settings, output_format)
