"""A process that stages and publishes one batch: `python -m tests.sinks.publish_proc KIND ROOT
BATCH TAG`. Crash tests stop it at a pause point (SESSIONIZE_PAUSE_AT) and kill it."""

from __future__ import annotations

import sys

from tests.sinks.conftest import make_sink
from tests.sinks.rows import stage

if __name__ == "__main__":
    kind, root, batch, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    sink = make_sink(kind, root)
    sink.clear_staging(batch)
    stage(sink, batch, tag)
    sink.publish(batch)
