"""The start of a session stream once its lease is held: what `Sessionizer.start` does after
checking its arguments (the checkpoint's record and paths, the state, the sink, the engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessionize.api.arguments import progress_path, state_uri
from sessionize.api.inputs import reader
from sessionize.api.query import StreamRun, launch
from sessionize.api.workers import check_workers
from sessionize.engines.checkpoint import (
    check_or_record,
    output_lease,
    record_paths,
    refuse_if_rewinding,
)
from sessionize.engines.choice import engine_for
from sessionize.engines.ownership import stream_claim
from sessionize.errors import ConfigError
from sessionize.fs import child
from sessionize.redaction import redact_uri

if TYPE_CHECKING:
    from sessionize.api.sessionizer import Sessionizer


def start_stream(sz: Sessionizer, events, output, checkpoint, trigger, output_format,
                 progress_log, on_batch, input_name, lease, metrics, open_sessions,
                 compact_every) -> StreamRun:  # fmt: skip
    """Record the checkpoint's settings and paths, open the state and the sink, and launch
    the engine over `events` (`Sessionizer.start` has taken the lease and checked the rest)."""
    store_uri = state_uri(sz.state, child(checkpoint, "state"))
    refuse_if_rewinding(checkpoint)
    identity = {"output": output}
    if input_name != "dataframe":  # a DataFrame's source cannot be named
        identity["input"] = redact_uri(input_name)
    check_or_record(checkpoint, {**sz.recorded_settings(output_format), **identity})
    # The output is this checkpoint's: its lease too, so that no other driver (`maintain`
    # included) writes it while the stream runs.
    writer = output_lease(output)
    writer.acquire()
    try:
        return _launch(sz, events, output, checkpoint, trigger, output_format, progress_log,
                       on_batch, input_name, lease, writer, metrics, open_sessions,
                       compact_every, store_uri)  # fmt: skip
    except BaseException:
        writer.release()
        raise


def _launch(sz: Sessionizer, events, output, checkpoint, trigger, output_format, progress_log,
            on_batch, input_name, lease, writer, metrics, open_sessions, compact_every,
            store_uri) -> StreamRun:  # fmt: skip
    """The rest of `start_stream`, with the output's lease (`writer`) held."""
    claim = stream_claim(checkpoint, output, sz.job)  # the job's id, made now if new
    # What `history` and `rewind` need besides the settings (secrets left out).
    record_paths(checkpoint, {
        "input": redact_uri(input_name), "output": redact_uri(output),
        "output_format": output_format, "state": redact_uri(store_uri), "job": sz.job,
        "progress_log": progress_log,  # None: CHECKPOINT/progress.jsonl
    })  # fmt: skip
    # The engine of the state: ours opens and checks its store now, before Spark starts.
    kind = engine_for(sz.state)
    settings = sz.engine_settings(store_uri, output, output_format, open_sessions)
    state = kind.open_state(settings, checkpoint, store_uri)
    df = events() if callable(events) else events
    if not df.isStreaming:
        raise ConfigError("stream() needs a streaming DataFrame; use sessions() for a bounded one")
    records, parser = reader(df, sz.mapping)
    spark = df.sparkSession
    check_workers(spark)
    engine = kind.session_engine(spark, settings, state, checkpoint=checkpoint, parser=parser,
                                 lease=lease)  # fmt: skip
    return launch(
        spark, engine, records, job=sz.job, checkpoint=checkpoint, trigger=trigger,
        progress_log=progress_path(progress_log, checkpoint, "progress.jsonl"),
        on_batch=on_batch, lease=lease, metrics=metrics, compact_every=compact_every,
        claim=claim, output_lease=writer,
    )  # fmt: skip
