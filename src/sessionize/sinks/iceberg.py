"""The outputs as Apache Iceberg tables in a SQL catalog (pyiceberg; `--output iceberg://...`).

    iceberg://NAMESPACE?uri=CATALOG_URI&warehouse=WAREHOUSE[&OTHER_CATALOG_PROPERTY=...]

The query holds the catalog's properties: `uri` is the SQL catalog's database (a SQLite
file, `sqlite:////data/catalog.db`, or PostgreSQL, `postgresql+psycopg2://...`),
`warehouse` where the tables' files go (`file:///data/warehouse`), and optionally
`catalog`, the catalog's name in that database (default `default`, the name pyiceberg's
`load_catalog` uses). Output
NAME is the table `NAMESPACE.NAME` (`web.sessions`, ...), created on first use from its
declared columns (an appended output gets `batch_id`), partitioned by its partition
columns (`sessions` by `session_date`).

    WAREHOUSE/NAMESPACE/NAME/{data,metadata}/   the tables (the catalog's default places)
    WAREHOUSE/NAMESPACE/_staging/NAME/...        task output of a running batch (staging.py)
    WAREHOUSE/NAMESPACE/_owner.json, _lease/     the output's owner and lease (sinks/owner.py)

Tasks stage Parquet as the file sinks do; the driver's `publish` commits each table once
per batch: one Iceberg transaction that deletes the batch's rows (`batch_id = N`) and
appends its staged ones, its snapshot summary carrying `sessionize.job` and
`sessionize.batch_id`. A reader of a table's current snapshot therefore sees every batch
whole. A publish repeated with nothing newly staged finds the batch in the table's latest
summary of the job and commits nothing, and a replayed one deletes and appends the same
rows: after a crash at any step, the rerun commits nothing twice. An output replaced by key
(`open_sessions`) is one transaction per batch too, committed first: the rows of the keys
the batch touched deleted, its rows appended. With `--revise-within`, `sessions` and
`page_views` are kept current by `session_id` with their side tables
(`iceberg_revised.py`), set back first by `invalidate_from`. `invalidate_from(N)` is one
delete commit per table whose summary sets the job's batch back to N-1, so the rerun
commits those batches again; an output replaced by key is emptied for the engine to
rebuild (batch -1). As on Delta, each table commits on its own: between two tables'
commits a reader may see one output a batch ahead of another.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    Or,
)
from pyiceberg.table import Table

from sessionize.errors import ConfigError, SinkError
from sessionize.redaction import redact_uri
from sessionize.sinks import iceberg_revised, revised_rows
from sessionize.sinks.base import Capabilities, StagedSink, sink_errors
from sessionize.sinks.outputs import Outputs, OutputSpec, session_outputs

URI_FORM = "iceberg://NAMESPACE?uri=CATALOG_URI&warehouse=WAREHOUSE"
_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
JOB, BATCH = "sessionize.job", "sessionize.batch_id"  # snapshot summary properties
_LOOKBACK = 1000  # snapshots searched back for the job's last one
DEFAULT_CATALOG = "default"  # pyiceberg's load_catalog() name


@dataclass(frozen=True)
class IcebergOutput:
    """A parsed `--output iceberg://...`."""

    namespace: str
    properties: tuple[tuple[str, str], ...]  # the catalog's, `uri` and `warehouse` among them

    @staticmethod
    def parse(uri: str) -> IcebergOutput:
        """Raises ConfigError (one line, no password) for a malformed URI."""
        shown = redact_uri(uri)
        parts = urlsplit(uri)
        namespace = parts.netloc
        if parts.scheme != "iceberg" or parts.path.strip("/"):
            raise ConfigError(f"--output {shown}: write {URI_FORM}")
        if not _NAMESPACE.fullmatch(namespace):
            raise ConfigError(
                f"--output {shown}: namespace {namespace[:60]!r}: one level of ASCII letters, "
                "digits and '_', not starting with a digit (pyiceberg's SQL catalog)"
            )
        props = dict(parse_qsl(parts.query, keep_blank_values=True))
        props.setdefault("catalog", DEFAULT_CATALOG)
        missing = [k for k in ("uri", "warehouse") if not props.get(k)]
        if missing:
            raise ConfigError(
                f"--output {shown}: give the catalog's {' and '.join(missing)}: {URI_FORM} "
                "(uri: sqlite:////PATH/catalog.db or a PostgreSQL URI; warehouse: file:///PATH)"
            )
        return IcebergOutput(namespace, tuple(sorted(props.items())))

    @property
    def warehouse(self) -> str:
        return dict(self.properties)["warehouse"]

    @property
    def root(self) -> str:
        """The namespace's directory in the warehouse: staging, owner and lease."""
        return f"{self.warehouse.rstrip('/')}/{self.namespace}"


@functools.lru_cache(maxsize=8)
def _catalog(properties: tuple[tuple[str, str], ...]) -> SqlCatalog:
    props = dict(properties)
    return SqlCatalog(props.pop("catalog"), **props)


@dataclass(frozen=True)
class IcebergSink(StagedSink):
    """Pickles as its URI, job and outputs; the catalog is opened per process."""

    uri: str
    job: str = "sessionize"
    outputs: Outputs = field(default_factory=session_outputs)
    root: str = field(init=False)  # the namespace's directory (StagedSink stages under it)
    capabilities = Capabilities(replaces_by_key=True, keeps_current=True, upserts_revisions=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", self.output.root)

    @classmethod
    def check_place(cls, uri: str) -> None:
        IcebergOutput.parse(uri)

    @property
    def output(self) -> IcebergOutput:
        return IcebergOutput.parse(self.uri)

    def check(self) -> None:
        """At start: the catalog answers and holds the namespace (created if missing)."""
        with self._errors("opening the catalog of"):
            self._catalog().create_namespace_if_not_exists(self.output.namespace)

    def nothing_to_maintain(self) -> str | None:
        # A publish drops its staged files and a restart re-stages an open batch: what is
        # left to do is the tables' own upkeep, which Iceberg's tools do with its catalog.
        return (
            f"--output {redact_uri(self.uri)}: sessionize maintain does not compact or "
            f"vacuum Iceberg tables; maintain {self.output.namespace}.* with Iceberg's own "
            "tools (expire snapshots, rewrite data files: pyiceberg's "
            "table.maintenance.expire_snapshots(), Spark's expire_snapshots and "
            "rewrite_data_files procedures)"
        )

    def committed(self, name: str) -> ds.Dataset | None:
        table = self._table(name)
        return None if table is None else ds.dataset(table.scan().to_arrow())

    # -- the Sink protocol -----------------------------------------------------------------
    def publish(self, batch_id: int) -> None:
        """One Iceberg commit per table (see the module's docstring), then drop staging."""
        with self._errors(f"publishing batch {batch_id} to"):
            self._publish_tables(batch_id)

    def invalidate_from(self, batch_id: int) -> list[int]:
        """One delete commit per table that has batches >= batch_id, setting the job's
        batch back to batch_id - 1; the outputs replaced by key are emptied to be rebuilt."""
        kept = [s.name for s in self.outputs.replaced if s.name not in self.outputs.rebuilt]
        if kept:
            raise ConfigError(
                f"output(s) {', '.join(kept)} are replaced by key and cannot be set back "
                f"to batch {batch_id - 1}; write the job to a new output instead"
            )
        retired: set[int] = set()
        with self._errors(f"removing batches from {batch_id} of"):
            retired |= iceberg_revised.undo(self, batch_id)  # before: its side rows are undone
            for spec in self.outputs.appended:
                found = self._batch_ids(spec.name, batch_id)
                table = self._table(spec.name)
                if found and table is not None:
                    props = self._summary(batch_id - 1, {"sessionize.retired_from": str(batch_id)})
                    with _quiet(), table.transaction() as tx:
                        tx.delete(_from_batch(batch_id), props)
                    retired |= set(found)
            for name in self.outputs.rebuilt:
                table = self._table(name)
                if table is not None:
                    with _quiet(), table.transaction() as tx:
                        tx.delete(AlwaysTrue(), self._summary(-1, {"sessionize.cleared": "true"}))
        return sorted(retired)

    def replaced_as_of(self, name: str) -> int | None:
        table = self._table(name)
        done = None if table is None else self._done(table)
        return None if done is None or done < 0 else done

    def rows_from(self, name: str, batch_id: int) -> int:
        table = self._table(name)
        if table is None or (name in self.outputs and self.outputs.spec(name).replaced):
            return 0  # replaced by key: emptied and rebuilt, not removed by batch
        folded = revised_rows.revising(self.outputs) and name == revised_rows.SESSIONS
        written = revised_rows.REVISED_BATCH if folded else "batch_id"  # a revision's too
        at = GreaterThanOrEqual(written, batch_id)  # type: ignore[call-arg, arg-type]
        return table.scan(row_filter=at, selected_fields=(written,)).to_arrow().num_rows

    def published(self, name: str) -> list[int]:
        if name in self.outputs and self.outputs.spec(name).replaced:
            return []
        return self._batch_ids(name, 0)

    # -- commits ---------------------------------------------------------------------------
    def _append_table(
        self, spec: OutputSpec, batch_id: int, rows: pa.Table, *, replay: bool
    ) -> None:
        """The batch's rows of an appended output: one transaction (delete, append)."""
        if revised_rows.revising(self.outputs) and spec.name in revised_rows.FOLDED:
            if spec.name == revised_rows.SESSIONS:  # the four folded into two tables
                iceberg_revised.publish(self, batch_id, replay=replay)
            return
        table = self._created(spec)
        if not replay and _at_least(self._done(table), batch_id):
            return  # this batch's commit is in the table already and nothing new was staged
        with _quiet(), table.transaction() as tx:
            tx.delete(_equal("batch_id", batch_id), self._summary(batch_id))
            tx.append(self._conformed(table, rows), self._summary(batch_id))

    def _replace_table(
        self, spec: OutputSpec, batch_id: int, keys: pa.Table, rows: pa.Table, *, replay: bool
    ) -> None:
        """Replace the rows of the touched `keys` by `rows`, in one transaction."""
        table = self._created(spec)
        if not replay and _at_least(self._done(table), batch_id):
            return  # committed already, and nothing new was staged
        with _quiet(), table.transaction() as tx:
            if keys.num_rows:
                tx.delete(_key_filter(keys, spec.key), self._summary(batch_id))
            tx.append(self._conformed(table, rows), self._summary(batch_id))

    def _commit(
        self,
        table: Table,
        delete: BooleanExpression | None,
        rows: pa.Table | None,
        summary: dict[str, str],
    ) -> None:
        """One transaction on `table`: the rows matching `delete` deleted, `rows` appended."""
        with _quiet(), table.transaction() as tx:
            if delete is not None:
                tx.delete(delete, summary)
            if rows is not None:
                tx.append(self._conformed(table, rows), summary)

    def _summary(self, batch_id: int, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {JOB: self.job, BATCH: str(batch_id), **(extra or {})}

    def _done(self, table: Table) -> int | None:
        """The batch of the job's latest commit to `table` (its snapshot summary)."""
        snapshot = table.current_snapshot()
        for _ in range(_LOOKBACK):
            if snapshot is None:
                return None
            props = snapshot.summary.additional_properties if snapshot.summary else {}
            if props.get(JOB) == self.job and BATCH in props:
                return int(props[BATCH])
            parent = snapshot.parent_snapshot_id
            snapshot = None if parent is None else table.snapshot_by_id(parent)
        return None

    def _batch_ids(self, name: str, first: int) -> list[int]:
        table = self._table(name)
        if table is None or "batch_id" not in table.schema().column_names:
            return []
        scan = table.scan(row_filter=_from_batch(first), selected_fields=("batch_id",))
        return sorted(pc.unique(scan.to_arrow()["batch_id"]).to_pylist())

    @staticmethod
    def _conformed(table: Table, rows: pa.Table) -> pa.Table:
        """`rows` in the table's column order and Arrow types (as pyiceberg writes them)."""
        schema = table.schema().as_arrow()
        return rows.select(schema.names).cast(schema)

    # -- the catalog -----------------------------------------------------------------------
    def _catalog(self) -> SqlCatalog:
        return _catalog(self.output.properties)

    def _table(self, name: str) -> Table | None:
        """Table NAMESPACE.`name` (None: not there yet)."""
        try:
            return self._catalog().load_table((self.output.namespace, name))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def _created(self, create: OutputSpec) -> Table:
        """Table NAMESPACE.NAME of output `create`; created from its columns (plus
        `batch_id` for an appended output) and partitions when missing."""
        name = create.name
        table = self._table(name)
        if table is not None:
            return table
        schema = create.schema
        if schema is None:
            raise ConfigError(f"output {name}: its columns are not known to this command")
        if not create.replaced:
            schema = schema.append(pa.field("batch_id", pa.int64(), nullable=False))
        return self._created_as(name, schema, create.partition_by)

    def _created_as(self, name: str, schema: pa.Schema, partition_by: tuple[str, ...]) -> Table:
        """Table NAMESPACE.`name` with `schema`, partitioned by `partition_by` (a table of
        another process that created it meanwhile is taken as it is)."""
        catalog, identifier = self._catalog(), (self.output.namespace, name)
        catalog.create_namespace_if_not_exists(self.output.namespace)
        try:
            tx = catalog.create_table_transaction(identifier, schema=schema)
            if partition_by:
                with tx.update_spec() as spec:
                    for column in partition_by:
                        spec.add_identity(column)
            return tx.commit_transaction()
        except TableAlreadyExistsError:  # another process created it meanwhile
            return catalog.load_table(identifier)

    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        """Catalog and file failures as one SinkError line (staged rows stay for a retry)."""
        where = f"Iceberg namespace {self.output.namespace} ({redact_uri(self.uri)})"
        return _iceberg_errors(f"{what} {where}")


@contextmanager
def _iceberg_errors(what: str) -> Iterator[None]:
    try:
        with sink_errors(what):
            yield
    except (ConfigError, SinkError):
        raise
    except Exception as exc:  # the catalog's database (SQLAlchemy) and pyiceberg's own
        if not _is_catalog_error(exc):
            raise
        detail = redact_uri(" ".join(str(exc).split()))[:300]
        raise SinkError(
            f"{what} failed: {detail}; is the catalog reachable? The batch is published "
            "again when the job is restarted"
        ) from exc


def _is_catalog_error(exc: Exception) -> bool:
    kinds = ("sqlalchemy.exc.SQLAlchemyError", "pyiceberg.exceptions.CommitFailedException",
             "pyiceberg.exceptions.ValidationError")  # fmt: skip
    names = {f"{c.__module__}.{c.__name__}" for c in type(exc).__mro__}
    return any(k in names for k in kinds)


def _at_least(done: int | None, batch_id: int) -> bool:
    return done is not None and done >= batch_id


# pyiceberg 0.12's predicates take (term, literal) positionally; their pydantic base hides
# that __init__ from type checkers, hence the ignores.
def _equal(column: str, value: object) -> BooleanExpression:
    return EqualTo(column, value)  # type: ignore[call-arg, arg-type]


def _from_batch(batch_id: int) -> BooleanExpression:
    return GreaterThanOrEqual("batch_id", batch_id)  # type: ignore[call-arg, arg-type]


def _key_filter(keys: pa.Table, key: tuple[str, ...]) -> BooleanExpression:
    """The rows of the touched keys, as an Iceberg row filter."""
    if len(key) == 1:
        return In(key[0], keys[key[0]].to_pylist())  # type: ignore[call-arg, arg-type]
    rows = zip(*(keys[c].to_pylist() for c in key), strict=True)
    terms = [_all([_equal(c, v) for c, v in zip(key, row, strict=True)]) for row in rows]
    return functools.reduce(Or, terms)


def _all(terms: list[BooleanExpression]) -> BooleanExpression:
    return functools.reduce(And, terms)


@contextmanager
def _quiet() -> Iterator[None]:
    """pyiceberg warns when a delete matches no row (a batch's first commit): expected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield
