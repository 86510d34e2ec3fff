"""`sessionize report`: one self-contained HTML page of plots over a job's outputs and its
progress log (data.py and progress.py read, charts.py draws, page.py assembles)."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

from sessionize.errors import ConfigError, SinkError
from sessionize.fs import is_dir
from sessionize.sinks.registry import open_sink


@dataclass(frozen=True)
class ReportResult:
    path: str
    bytes: int
    seconds: float
    sessions: int
    progress_missing: str | None
    bots_left_out: int = 0  # bots' sessions not in the session charts


def build_report(
    output: str,
    to: str,
    *,
    checkpoint: str | None = None,
    progress_log: str | None = None,
    with_bots: bool = False,
) -> ReportResult:
    """Read OUTPUT (and the progress log), write the HTML report to `to`. Sessions of bots
    (`is_bot`) are left out of the session charts and counted, unless `with_bots`."""
    from sessionize.report.data import load_outputs
    from sessionize.report.page import build_page, now
    from sessionize.report.progress import default_path, read_progress
    from sessionize.report.traffic import load_traffic

    t0 = time.perf_counter()
    sink = open_sink(output)
    if not sink.capabilities.keeps_records and not is_dir(output):
        raise ConfigError(f"--output {output} is not a directory: give a job's output directory")
    data = load_outputs(output, with_bots=with_bots)
    if not data.found:
        raise ConfigError(sink.no_outputs())
    progress = read_progress(progress_log or default_path(output, checkpoint))
    traffic = load_traffic(output)
    html = build_page(data, progress, generated=now(), traffic=traffic).encode()
    tmp = f"{to}.tmp"  # renamed into place: a reader never sees half a page
    try:
        os.makedirs(os.path.dirname(os.path.abspath(to)), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(html)
        os.replace(tmp, to)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise SinkError(
            f"cannot write the report to {to}: {exc.strerror or exc}; give --to a file path"
        ) from exc
    return ReportResult(
        path=os.path.abspath(to),
        bytes=len(html),
        seconds=time.perf_counter() - t0,
        sessions=data.sessions,
        progress_missing=progress.missing,
        bots_left_out=data.bots_left_out,
    )
