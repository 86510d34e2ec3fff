"""Named pause points, so crash tests can kill -9 a real process at an exact step.

`SESSIONIZE_PAUSE_AT=after-publish:3` makes the process print `PAUSED after-publish 3`
and sleep when it reaches that point in batch 3; the test then kills it. Unset (always, in
production) it costs one dictionary lookup per batch.
"""

from __future__ import annotations

import os
import sys
import time

POINTS = ("after-state-commit", "before-publish", "after-publish", "after-record")


def pause_point(name: str, version: int) -> None:
    wanted = os.environ.get("SESSIONIZE_PAUSE_AT")
    if wanted and wanted == f"{name}:{version}":
        sys.stdout.write(f"PAUSED {name} {version}\n")
        sys.stdout.flush()
        time.sleep(600)
