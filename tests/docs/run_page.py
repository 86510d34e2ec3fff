"""Run one page's code blocks in order, in one process and one directory (its argv[1]).

    python tests/docs/run_page.py WORKDIR < steps.json > results.json

Input: a JSON list of steps `{"lang": "bash"|"python", "code": ...}`. Shell steps run with
bash (`-e -o pipefail`) in WORKDIR; Python steps are executed in one namespace shared by
the page's blocks (so a SparkSession started by one serves the next), with this process in
WORKDIR, so Spark's relative paths resolve there too. Stops at the first failing step.
Output: one `{"rc", "stdout", "stderr"}` per step run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import traceback


def main() -> None:
    os.chdir(sys.argv[1])
    steps = json.load(sys.stdin)
    namespace: dict = {"__name__": "__docs__"}
    results = []
    for step in steps:
        if step["lang"] == "python":
            out, err = io.StringIO(), io.StringIO()
            rc = 0
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    exec(compile(step["code"], "<docs>", "exec"), namespace)
                except BaseException:  # noqa: BLE001 - reported to the test, which fails
                    traceback.print_exc(file=err)
                    rc = 1
            results.append({"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()})
        else:
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", step["code"]],
                capture_output=True,
                text=True,
            )
            results.append({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr})
        if results[-1]["rc"] != 0:
            break
    sys.stdout.flush()
    # The results go last, after a marker: Spark may print to this process's stdout.
    print("\n@@results@@\n" + json.dumps(results))


if __name__ == "__main__":
    main()
