"""Kinesis stream -> streaming DataFrame (`value`, `error`, `source`), as a Python data source.

Offsets. The source's offset is ``{"stream": S, "shards": {SHARD_ID: {"after": SEQ}}}``: for
each shard, the sequence number of the last record consumed (``null``: none yet, so reading
starts at TRIM_HORIZON), plus ``"closed": true`` once a closed shard (after a split or merge)
has been read to its end. A micro-batch is exactly the records with
``start.after < sequence <= end.after`` of every shard, read on the executors, one Spark task
per shard, with GetShardIterator AFTER_SEQUENCE_NUMBER (or TRIM_HORIZON) and GetRecords until
the end sequence number. Spark keeps the offsets in its checkpoint: a restart resumes after the
last committed record, a replayed batch reads the same records.

End offsets. Kinesis has no "high watermark", and sequence numbers are not contiguous, so the
driver finds a batch's end by reading: from each shard's start it pages through GetRecords
until the shard's tip (an empty page with MillisBehindLatest 0), its end (a closed shard) or
the batch's share of ``maxRecordsPerTrigger``, and takes the last sequence number it saw. It
never claims a record it has not read itself; the payloads are read again by the executors,
so a record costs two reads. ``Trigger.AvailableNow`` stops at records that arrived
(ApproximateArrivalTimestamp) after the run started, on the driver's clock: a record stamped
later is left to the next run (its sequence number is past the run's end), never skipped.

Resharding. ListShards on every trigger. A new shard is read from TRIM_HORIZON, once its parent
shards are read to their end (or gone), so one key's records are read in order across a split
or merge. A closed, fully read shard leaves the offset when it leaves ListShards (retention).

``startingPosition=latest`` records the current last sequence number of every open shard when
the query first starts, by reading each shard to its tip once (kinesalite cannot answer
AT_TIMESTAMP when no record is that recent; on AWS this costs reading the retained data).

Time. ApproximateArrivalTimestamp is not exposed as event time: it is when Kinesis received
the record, not when the user acted. Event time comes from the JSON ``event_time`` only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import InputPartition

from sessionize.errors import ConfigError, SourceError
from sessionize.sources.admission import ReadAllAvailable, ReadLimit, ReadMaxRows
from sessionize.sources.record_source import RecordReader, RecordSource
from sessionize.sources.uri import (
    KINESIS_CLIENT_OPTIONS,
    KinesisAddress,
    SourceOptions,
    check_line_options,
    decode_records,
    kinesis_client,
    parse_kinesis_uri,
    parse_source_options,
)

FORMAT = "sessionize_kinesis"
_PAGE = 10_000  # GetRecords' maximum Limit
_MAX_EMPTY_PAGES = 20  # empty pages in a row while behind the tip before the driver moves on


class KinesisRange(InputPartition):
    """Records `after < sequence <= last` of one shard (`after` None: from TRIM_HORIZON)."""

    def __init__(self, stream: str, shard: str, after: str | None, last: str) -> None:
        self.stream, self.shard, self.after, self.last = stream, shard, after, last

    def __repr__(self) -> str:
        return f"KinesisRange({self.stream}/{self.shard} ({self.after}, {self.last}])"


def _iterator(client, stream: str, shard: str, after: str | None) -> str:
    if after is None:
        kwargs = {"ShardIteratorType": "TRIM_HORIZON"}
    else:
        kwargs = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": after}
    return client.get_shard_iterator(StreamName=stream, ShardId=shard, **kwargs)["ShardIterator"]


class _Scanner:
    """Driver-side walk through one shard, finding sequence numbers without keeping payloads."""

    def __init__(self, client, stream: str, shard: str, after: str | None, until_ms: int | None):
        self.client, self.stream, self.shard = client, stream, shard
        self.after = after  # last sequence number seen
        self.until_ms = until_ms
        self.iterator: str | None = None
        self.closed = False  # the shard is closed and read to its end
        self.finished = False  # nothing more to find now (tip, end, or AvailableNow target)

    def advance(self, want: int | None) -> int:
        """Find up to `want` (None: all) more records; return how many."""
        if self.iterator is None:
            self.iterator = _iterator(self.client, self.stream, self.shard, self.after)
        found = empty = 0
        while not self.finished and (want is None or found < want):
            limit = _PAGE if want is None else min(_PAGE, want - found)
            page = self.client.get_records(ShardIterator=self.iterator, Limit=limit)
            records = page["Records"]
            for record in records:
                arrived = record["ApproximateArrivalTimestamp"].timestamp() * 1000
                if self.until_ms is not None and arrived > self.until_ms:
                    self.finished = True
                    return found
                self.after = record["SequenceNumber"]
                found += 1
            self.iterator = page.get("NextShardIterator")
            if self.iterator is None:
                self.closed = self.finished = True
            elif not records:
                empty += 1
                if page.get("MillisBehindLatest", 0) == 0 or empty >= _MAX_EMPTY_PAGES:
                    self.finished = True
            else:
                empty = 0
        return found


class KinesisStreamReader(RecordReader):
    """Plans sequence-number ranges on the driver; `read` runs on executors.

    The instance is pickled to the executors: the boto3 client is created lazily and never
    pickled.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        if "uri" not in options:
            raise ConfigError(f"the {FORMAT} source needs option uri=kinesis://STREAM?...")
        self.address: KinesisAddress = parse_kinesis_uri(options["uri"])
        self.stream = self.address.stream
        self.opts: SourceOptions = parse_source_options(
            options, "kinesis", client_keys=KINESIS_CLIENT_OPTIONS, internal=("uri",)
        )
        self._until_ms: int | None = None  # AvailableNow: records that arrived by then

    def _make_client(self):
        return kinesis_client(self.address, self.opts.client)

    # ---- driver side -------------------------------------------------------------------

    def _shards(self) -> dict[str, dict]:
        client = self._client()
        try:
            page = client.list_shards(StreamName=self.stream)
        except client.exceptions.ResourceNotFoundException as e:
            raise SourceError(f"Kinesis stream '{self.stream}' does not exist") from e
        shards = list(page["Shards"])
        while page.get("NextToken"):
            page = client.list_shards(NextToken=page["NextToken"])
            shards += page["Shards"]
        return {s["ShardId"]: s for s in shards}

    def _offset(self, shards: Mapping[str, dict]) -> dict:
        return {"stream": self.stream, "shards": {k: shards[k] for k in sorted(shards)}}

    def _start(self, offset: dict) -> dict[str, dict]:
        if offset.get("stream") != self.stream:
            raise SourceError(
                f"the checkpoint holds offsets of Kinesis stream '{offset.get('stream')}', "
                f"not '{self.stream}': use a new checkpoint for another stream"
            )
        return dict(offset["shards"])

    def first_offset(self) -> dict:
        shards = self._shards()
        positions: dict[str, dict] = {}
        for shard_id, shard in shards.items():
            closed = "EndingSequenceNumber" in shard["SequenceNumberRange"]
            if self.opts.starting_position == "earliest":
                positions[shard_id] = {"after": None}
            elif closed:
                positions[shard_id] = {"after": None, "closed": True}  # nothing new can come
            else:
                scanner = _Scanner(self._client(), self.stream, shard_id, None, None)
                scanner.advance(None)
                positions[shard_id] = {"after": scanner.after}
        return self._offset(positions)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._until_ms = int(time.time() * 1000)

    def end_offset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._start(start)
        shards = self._shards()
        end: dict[str, dict] = {}
        for shard_id, position in begin.items():
            if shard_id in shards:
                end[shard_id] = dict(position)
            elif not position.get("closed"):
                raise SourceError(
                    f"Kinesis shard {self.stream}/{shard_id} disappeared before this query "
                    "read it to its end (retention period passed?)"
                )
        # A shard is read once its parents are read to their end, or are gone.
        for shard_id, shard in shards.items():
            parents = [shard.get("ParentShardId"), shard.get("AdjacentParentShardId")]
            if shard_id not in end and all(
                p is None or p not in shards or begin.get(p, {}).get("closed") for p in parents
            ):
                end[shard_id] = {"after": None}
        scanners = {
            shard_id: _Scanner(self._client(), self.stream, shard_id, pos["after"], self._until_ms)
            for shard_id, pos in end.items()
            if not pos.get("closed")
        }
        if isinstance(limit, ReadAllAvailable):
            budget = None
        elif isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        else:
            raise SourceError(f"unsupported read limit {limit!r}")
        _scan_fairly(scanners, budget)
        for shard_id, scanner in scanners.items():
            end[shard_id] = {"after": scanner.after}
            if scanner.closed:
                end[shard_id]["closed"] = True
        return self._offset(end)

    def ranges(self, start: dict, end: dict) -> list[KinesisRange]:
        begin = self._start(start)
        ranges = []
        for shard_id, position in self._start(end).items():
            after = begin.get(shard_id, {"after": None})["after"]
            if position["after"] is not None and position["after"] != after:
                ranges.append(KinesisRange(self.stream, shard_id, after, position["after"]))
        return ranges

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint."""

    # ---- executor side -----------------------------------------------------------------

    def read(self, partition: KinesisRange) -> Iterator:  # type: ignore[override]  # our plan's
        return read_range(self._client(), partition, self.opts)


def _scan_fairly(scanners: Mapping[str, _Scanner], budget: int | None) -> None:
    """Advance the scanners so that together they find at most `budget` records (None: all),
    in equal shares; a shard that has fewer leaves its share to the others."""
    active = sorted(scanners)
    left = budget
    while active and (left is None or left > 0):
        share = None if left is None else max(1, left // len(active))
        for shard_id in list(active):
            if left is not None and left <= 0:
                break
            found = scanners[shard_id].advance(None if left is None else min(share or 1, left))
            if left is not None:
                left -= found
            if scanners[shard_id].finished:
                active.remove(shard_id)


def read_range(client, part: KinesisRange, opts: SourceOptions) -> Iterator:
    """Yield Arrow batches of exactly the records `part.after < sequence <= part.last`.

    The driver has seen the record `part.last`; if it cannot be reached within `readTimeout`
    of the last progress, the task fails rather than end the range early.
    """
    last = int(part.last)
    after = None if part.after is None else int(part.after)
    iterator = _iterator(client, part.stream, part.shard, part.after)
    prefix = f"kinesis:{part.stream}/{part.shard}/"
    last_progress = time.monotonic()
    done = False
    while not done:
        page = client.get_records(ShardIterator=iterator, Limit=_PAGE)
        payloads: list[bytes | None] = []
        positions: list[str] = []
        for record in page["Records"]:
            sequence = int(record["SequenceNumber"])
            if after is not None and sequence <= after:
                continue
            if sequence > last:
                raise SourceError(f"reading {part!r}: record {part.last} is missing from the shard")
            payloads.append(record["Data"])
            positions.append(prefix + record["SequenceNumber"])
            if sequence == last:
                done = True
                break
        if payloads:
            last_progress = time.monotonic()
            yield decode_records(payloads, positions, opts.max_record_bytes)
        if done:
            return
        iterator = page.get("NextShardIterator")
        if iterator is None:
            raise SourceError(f"reading {part!r}: the shard ended before record {part.last}")
        if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
            if time.monotonic() - last_progress > opts.read_timeout_s:
                raise SourceError(
                    f"reading {part!r}: record {part.last} not delivered within "
                    f"{opts.read_timeout_s:g}s"
                )
            time.sleep(0.2)


class KinesisSource(RecordSource):
    """`spark.readStream.format("sessionize_kinesis").option("uri", "kinesis://STREAM?...")`."""

    format = FORMAT
    stream_reader = KinesisStreamReader


def kinesis_stream(spark: SparkSession, uri: str, options: Mapping[str, str]) -> DataFrame:
    """A streaming DataFrame (value, error, source) of the stream in `uri`; see the module doc."""
    parse_kinesis_uri(uri)
    parse_source_options(options, "kinesis", client_keys=KINESIS_CLIENT_OPTIONS)
    check_line_options(options)
    spark.dataSource.register(KinesisSource)
    return spark.readStream.format(FORMAT).options(**dict(options)).option("uri", uri).load()


def kinesis_lag(uri: str, options: Mapping[str, str], offset: Mapping | None) -> dict[str, dict]:
    """Per open shard, how far the query's last read record (`offset`, None: nothing read)
    is behind the tip: `millis_behind` as Kinesis reports it, and whether a record waits."""
    reader = KinesisStreamReader({**options, "uri": uri})
    client = reader._client()
    read = (offset or {}).get("shards", {})
    out = {}
    for shard_id, shard in reader._shards().items():
        if shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber"):
            continue  # closed by a split or merge: its children carry the lag
        after = read.get(shard_id, {}).get("after")
        page = client.get_records(
            ShardIterator=_iterator(client, reader.stream, shard_id, after), Limit=1
        )
        out[shard_id] = {
            "millis_behind": int(page.get("MillisBehindLatest", 0)),
            "waiting": bool(page["Records"]),
        }
    return out
