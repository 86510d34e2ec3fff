"""Every runnable code block of the documentation runs and prints what its page shows.

The rules (which blocks run, what their output must be, what varies) are in
tests/docs/blocks.py. One process per page runs its blocks in order (tests/docs/run_page.py),
so a page's Python blocks share one SparkSession.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.docs.blocks import (
    RUNNABLE,
    Block,
    all_pages,
    matches,
    normalize,
    page_blocks,
)
from tests.helpers import cli_env
from tests.sources.conftest import _service_env

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_page.py")
PAGES = [p for p in all_pages() if any(b.runs for b in page_blocks(p))]


def test_every_block_runs_or_says_why_not():
    """A runnable block is either run or marked `<!-- no-test: REASON -->`, never skipped
    silently; and the getting-started page, the newcomer's path, is run whole."""
    for page in all_pages():
        for block in page_blocks(page):
            if block.lang in RUNNABLE and block.no_test is not None:
                assert len(block.no_test) > 10, f"{block.page}:{block.line}: say why not"
                # The tests a reason names as covering the block exist.
                for named in re.findall(r"tests/[\w/.]+", block.no_test):
                    assert (REPO / named.rstrip(".")).exists(), f"{block.page}:{block.line}"
    started = page_blocks(next(p for p in all_pages() if p.name == "getting-started.md"))
    runnable = [b for b in started if b.lang in RUNNABLE]
    assert sum(b.runs for b in runnable) == len(runnable) - 1  # only the install is not run


def _substitute(code: str, kafka: str | None, run_id: str) -> str:
    if "kafka://localhost:9092/" in code:
        assert kafka, "a page uses Kafka: the test broker is needed"
        code = code.replace("kafka://localhost:9092/", f"kafka://{kafka}/docs-{run_id}-")
    return code


def _steps(blocks: list[Block], kafka: str | None, run_id: str) -> list[dict]:
    steps = []
    for block in blocks:
        for command, expected in block.commands():
            lang = "python" if block.lang == "python" else "bash"
            code = _substitute(command, kafka, run_id)
            steps.append(
                {
                    "lang": lang,
                    "code": code,
                    "expected": expected,
                    "where": f"{block.page}:{block.line}",
                }
            )
    return steps


@pytest.mark.services
# About two minutes on a quiet machine (Getting started: the demo, two streams, one Python
# job); the suite's 600 s guard against hangs is too tight for it on a loaded one.
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_page_examples(page: Path, tmp_path: Path):
    blocks = [b for b in page_blocks(page) if b.runs]
    uses_kafka = any("kafka://localhost:9092/" in b.code for b in blocks)
    kafka = (
        _service_env("kafka")["SESSIONIZE_TEST_KAFKA"].removeprefix("kafka://")
        if uses_kafka
        else None
    )
    steps = _steps(blocks, kafka, uuid.uuid4().hex[:8])
    env = cli_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path)],
        input=json.dumps([{"lang": s["lang"], "code": s["code"]} for s in steps]),
        capture_output=True,
        text=True,
        env=env,
    )
    assert "@@results@@" in done.stdout, done.stderr[-3000:]
    results = json.loads(done.stdout.split("@@results@@", 1)[1])
    for step, result in zip(steps, results, strict=False):
        where = step["where"]
        assert result["rc"] == 0, f"{where} failed:\n{step['code']}\n{result['stderr'][-3000:]}"
        if step["expected"] is not None:
            want = normalize(step["expected"], str(tmp_path))
            got = normalize(result["stdout"], str(tmp_path))
            assert matches(want, got), f"{where} printed:\n" + "\n".join(got)
    assert len(results) == len(steps)
