"""Cleaning an output of what interrupted runs leave behind, with no driver running.

What is left where (every sink stages under `ROOT/_staging`, see staging.py):
  * `ROOT/_trash/`: old batch directories of local Parquet outputs that a crash left on
    their way out (a publish moves a replaced batch there, then deletes it);
  * `ROOT/_staging/NAME/batch_id=N/` of a batch already published and not open (a staged
    attempt whose clean-up was cut short): a restarted job clears a batch's staging before
    it stages it again, so no one reads these; an open attempt's staging is left to the
    restart, which re-executes that batch;
  * Parquet on S3: files under `ROOT/NAME/batch_id=N/` that no commit file names (copies of
    a publish attempt that did not commit).
  * local Parquet: an interrupted compaction (sinks/compaction.py `finish`): batch
    directories its manifest covers, compacted files and manifests no generation names;
    and views (sinks/views.py): a new one of the committed batches is switched in, the
    others (an old one a crash kept, a half-built one) deleted.
Delta tables are compacted and vacuumed by `sinks.delta.compact_and_vacuum`.
"""

from __future__ import annotations

import pyarrow.fs as pafs

from sessionize.base_schema import PAGE_VIEW_REVISIONS, SESSION_REVISIONS
from sessionize.fs import delete_dir, listing, without_options
from sessionize.schema import OUTPUTS
from sessionize.sinks import compaction, staging
from sessionize.sinks.base import StagedSink, sink_errors
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.parquet_s3 import ManifestParquetSink

# Every output a session job may have written, the revision outputs of `--revise-within`
# included (maintain opens the output without knowing the job's options).
_NAMES = (*OUTPUTS, SESSION_REVISIONS, PAGE_VIEW_REVISIONS)


def clean_leftovers(sink: StagedSink) -> dict[str, int]:
    """Remove the leftovers above; returns how many of each kind went."""
    fs, base = sink._fs()
    done = {"trash": 0, "staged_batches": 0, "uncommitted_files": 0, "compaction_files": 0}
    with sink_errors(f"cleaning {without_options(sink.root)}"):
        trash = f"{base}/{staging.TRASH}"
        done["trash"] = len(listing(fs, trash))
        delete_dir(fs, trash)
        published = {b for name in _NAMES for b in sink.published(name)}
        last = max(published, default=-1)
        open_ = {_batch(i) for i in listing(fs, f"{base}/{staging.STAGING}/_open")}
        stale = set()
        for name in _NAMES:
            for info in listing(fs, f"{base}/{staging.STAGING}/{name}"):
                batch = _batch(info)
                if batch is not None and batch <= last and batch not in open_:
                    delete_dir(fs, info.path)
                    stale.add(batch)
        done["staged_batches"] = len(stale)
        if isinstance(sink, ManifestParquetSink):
            done["uncommitted_files"] = _drop_uncommitted(sink, fs, base)
        if isinstance(sink, ParquetSink):
            for name in sink.outputs.names:
                finished = compaction.finish(fs, base, name)
                done["compaction_files"] += sum(finished.values())
                compaction.refresh_view(fs, base, name)
    return done


def _drop_uncommitted(sink: ManifestParquetSink, fs: pafs.FileSystem, base: str) -> int:
    dropped = 0
    for name in _NAMES:
        keep = {f[len(f"{base}/{name}/") :] for f in sink.committed_files(name)}
        for info in listing(fs, f"{base}/{name}", recursive=True):
            rel = info.path[len(f"{base}/{name}/") :]
            if info.type == pafs.FileType.File and rel.startswith("batch_id=") and rel not in keep:
                fs.delete_file(info.path)
                dropped += 1
    return dropped


def _batch(info: pafs.FileInfo) -> int | None:
    name = info.base_name
    return int(name.split("=", 1)[1]) if name.startswith("batch_id=") else None
