"""What a user writes: a `Processor` declares its key, event time, state and outputs, and
turns a partition's state and rows into an `Update` (docs/design.md, "The keyed core")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pyarrow as pa

if TYPE_CHECKING:
    from sessionize.core.context import Context
    from sessionize.core.update import Update

OutputMode = Literal["append", "replace"]


@dataclass(frozen=True)
class Output:
    """An output declared with more than its schema.

    Args:
        schema: the columns every batch's table of this output has, in order.
        mode: "append" (the default: every batch adds its rows) or "replace" (every batch
            replaces the rows of the keys it writes and deletes the keys it lists in
            `Update.deletes`; only on sinks that can: Delta, not plain Parquet).
        key: with mode "replace", the column(s) that identify a row of the output.
        partition_by: columns whose values name the output's directories below a batch.

    Raises:
        ProcessorError: when the processor is used, if `key` or `partition_by` name columns
            the schema lacks, or `key` is given with mode "append" or missing with "replace".

    Example:
        >>> import pyarrow as pa
        >>> Output(pa.schema([("id", pa.string()), ("n", pa.int64())]), mode="replace", key="id")
        Output(schema=id: string
        n: int64, mode='replace', key=('id',), partition_by=())
    """

    schema: pa.Schema
    mode: OutputMode = "append"
    key: tuple[str, ...] | str = ()
    partition_by: tuple[str, ...] | str = ()

    def __post_init__(self) -> None:
        for name in ("key", "partition_by"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, (value,))
            else:
                object.__setattr__(self, name, tuple(value))


@dataclass(frozen=True)
class FollowOn:
    """A second keyed step in the same batch: `processor` runs on the rows that this
    processor writes to `output`, keyed by `processor.key`, a column of that output.

    The rows of `output` are not published: the first step's tasks hand them to the second
    step (through files of the batch), which runs `processor` on its own state, under the
    job name `JOB.job` in the same store, committing the same version; its outputs are
    published with the first step's, in the batch's one commit. A rerun of a batch restarts
    both steps from the version before it, so the outputs stay exactly once. The follow-on
    is told the first step's watermarks: declare its `event_time` as a column the first
    step never writes below the watermark before the batch (the close of an emitted
    session), or None.

    Args:
        output: the output of this processor whose rows go to `processor`, appended.
        processor: the follow-on processor; it may not have a follow-on itself.
        job: its name in the state store, after the job's: `JOB.job`.

    Example:
        >>> import pyarrow as pa
        >>> class Counts(Processor):
        ...     key = "user"
        ...     state_schema = pa.schema([("user", pa.string()), ("n", pa.int64())])
        ...     def process(self, state, rows, ctx): ...
        >>> FollowOn("sessions", Counts(), job="users").job
        'users'
    """

    output: str
    processor: Processor
    job: str = "next"


class Processor(ABC):
    """A keyed, stateful computation over micro-batches, vectorized over all keys of a
    partition. Subclass it, set the class attributes and write `process`.

    Class attributes:
        key: the input column that keys the state: int64 or string values. It must also
            be a column of `state_schema`.
        event_time: the input's timestamp column that drives the watermark; None (the
            default) means no watermark, no late rows and no timers.
        state_schema: the columns of a key's state rows (any number of rows per key).
        outputs: every output `process` writes, by name: a `pa.Schema` (appended per
            batch) or an `Output` (to declare it replaced by key, or partitioned).
        late_output: the output that receives the rows older than the watermark (default
            "late": the input's columns plus `watermark`; declare it in `outputs` to fix
            its columns).
        late_names: the late output's name for an input column, where it differs (an
            input column `user_id` that the outputs call `anonymous_id`, say). Default:
            the input's names.
        allowed_lateness_us: rows behind the watermark by at most this many microseconds
            are handed to `process` with the on-time ones, for a processor that revises
            what it emitted (default 0: every row behind the watermark is late).
        sorted_rows: True (the default): `rows` come sorted by (key, event time). A
            processor that orders its rows itself sets False and gets them in the batch's
            order, which saves a sort and a copy of every row.
        gauges: names of `Update.counters` that count changes of something the state
            holds (keys open, say): the engine keeps their running sum per partition with
            the state, and the batch record, progress line and status show that sum, the
            value after the batch, instead of adding up the changes. Default: none.
        follow_on: a `FollowOn`: a second processor run in the same batch on the rows of
            one of this processor's outputs, keyed by another column (default None).
        timer_column, store_key_column: the names of the core's own columns in the stored
            rows (a key's timer, and with string keys the 64-bit store key); change them
            only to match an existing store's layout.

    Example:
        >>> import pyarrow as pa
        >>> import pyarrow.compute as pc
        >>> from sessionize import stateful
        >>> class Counts(stateful.Processor):
        ...     key = "user"
        ...     state_schema = pa.schema([("user", pa.int64()), ("n", pa.int64())])
        ...     outputs = {"counts": state_schema}
        ...     def process(self, state, rows, ctx):
        ...         ones = pa.table({"user": rows["user"], "n": pc.if_else(
        ...             pc.is_valid(rows["user"]), 1, 0).cast(pa.int64())})
        ...         both = pa.concat_tables([state, ones]).group_by("user")
        ...         new = both.aggregate([("n", "sum")]).select(["user", "n_sum"])
        ...         new = new.rename_columns(["user", "n"])
        ...         return stateful.Update(state=new, outputs={"counts": new})
        >>> run = stateful.run_local(Counts(), [pa.table({"user": [1, 1, 2]})])
        >>> sorted(run.output("counts").to_pylist(), key=lambda r: r["user"])
        [{'user': 1, 'n': 2}, {'user': 2, 'n': 1}]
    """

    key: ClassVar[str]
    event_time: ClassVar[str | None] = None
    # Class attributes, or set per instance by a processor whose schemas depend on its
    # arguments (the session processor's on its event mapping).
    state_schema: pa.Schema
    outputs: Mapping[str, pa.Schema | Output] = {}
    late_output: ClassVar[str] = "late"
    late_names: Mapping[str, str] = {}
    allowed_lateness_us: int = 0
    sorted_rows: ClassVar[bool] = True
    gauges: ClassVar[tuple[str, ...]] = ()
    follow_on: FollowOn | None = None
    timer_column: ClassVar[str] = "_timer"
    store_key_column: ClassVar[str] = "_key"

    @property
    def name(self) -> str:
        """How errors, the checkpoint and the status name this processor (its class name)."""
        return type(self).__name__

    def params(self) -> dict[str, Any]:
        """The processor's own parameters (JSON values), recorded with the state: a restart
        with other parameters is refused. Default: none.

        Returns:
            A dict of parameter name -> JSON value.
        """
        return {}

    def drop(self, rows: pa.Table) -> pa.Array | pa.ChunkedArray | None:
        """The input rows this processor never sees, not even as late rows (a boolean mask
        over `rows`; None, the default: none). They count as `dropped` in the batch.

        Args:
            rows: the batch's rows of one partition, before the late ones are split off.

        Returns:
            A boolean array as long as `rows` (True: drop the row), or None.
        """
        return None

    @abstractmethod
    def process(self, state: pa.Table, rows: pa.Table, ctx: Context) -> Update:
        """Advance the keys of one partition by one micro-batch.

        Args:
            state: the current rows (`state_schema`) of every key handed in, sorted by key;
                the order of one key's rows is not guaranteed.
            rows: the batch's on-time rows of those keys (the input's columns), sorted by
                (key, event time); ties in any order.
            ctx: the batch id, partition, watermarks and the keys whose timer fired.

        Returns:
            An `Update`: new rows of changed keys, keys to remove, output tables, timers
            and counters (each optional).

        Raises:
            Exception: any exception stops the batch with one line naming the processor
                (a ProcessorError), and nothing of the batch is committed.
        """
