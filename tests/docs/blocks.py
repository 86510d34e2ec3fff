"""The code blocks of the documentation pages, and the rule for comparing what they print.

A fenced block in `bash`, `sh`, `console` or `python` runs in the test suite
(tests/docs/test_examples.py), in page order, in one fresh directory per page, so later
blocks see the files of earlier ones. A block that must not run is preceded by
`<!-- no-test: REASON -->` (the reason names what covers it instead, e.g. a test). Blocks in
other languages (`text`, `json`, none) are not run.

What a block must print:
- a `console` block: the lines after each `$ COMMAND` (continued with a trailing `\\`) are
  that command's standard output;
- a `text` block right after a runnable block (nothing but blank lines between) is that
  block's standard output.

What varies, and is normalized on both sides before comparing: durations (`21.0s`, `0.1s`),
process ids (`pid 4242`), and the page's directory (written as a relative path). A line
`...` matches any number of lines. Everything else must match exactly, line by line
(trailing white space ignored).

Local services stand in for the hosts of the examples: `kafka://localhost:9092/TOPIC`
becomes the test broker with a topic unique to the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
RUNNABLE = {"bash", "sh", "console", "python"}
_FENCE = re.compile(r"^```(\S*)\s*$")
_NO_TEST = re.compile(r"^<!--\s*no-test:\s*(.+?)\s*-->\s*$")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    no_test: str | None = None  # the reason, when marked
    expected: str | None = None  # the output a following `text` block shows

    @property
    def runs(self) -> bool:
        return self.lang in RUNNABLE and self.no_test is None

    def commands(self) -> list[tuple[str, str | None]]:
        """(command, expected output) pairs: one for a script, one per `$` of a console."""
        if self.lang != "console":
            return [(self.code, self.expected)]
        pairs: list[tuple[str, list[str]]] = []
        lines = self.code.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                raise ValueError(f"{self.page}:{self.line}: console line without `$ `")
            cmd = [lines[i][2:]]
            while cmd[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            out = []
            while i + 1 < len(lines) and not lines[i + 1].startswith("$ "):
                i += 1
                out.append(lines[i])
            pairs.append(("\n".join(cmd), out))
            i += 1
        return [(c, "\n".join(o) if o else None) for c, o in pairs]


def page_blocks(path: Path, root: Path = DOCS) -> list[Block]:
    """Every fenced block of one page, in order, with its marks and expected output."""
    rel = str(path.relative_to(root))
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    last_runnable: Block | None = None
    between_blank = True
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                between_blank = False
            i += 1
            continue
        start, lang = i, m.group(1)
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        prev = _previous_nonblank(lines, start)
        mark = _NO_TEST.match(prev) if prev is not None else None
        block = Block(rel, start + 1, lang, "\n".join(body), mark.group(1) if mark else None)
        if lang == "text" and last_runnable is not None and between_blank:
            last_runnable.expected = block.code
        blocks.append(block)
        last_runnable = block if block.runs else None
        between_blank = True
    return blocks


def _previous_nonblank(lines: list[str], i: int) -> str | None:
    for j in range(i - 1, -1, -1):
        if lines[j].strip():
            return lines[j]
    return None


def all_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def normalize(text: str, workdir: str | None = None) -> list[str]:
    """The lines of `text` with what varies made equal (see the module's docstring)."""
    if workdir:
        text = text.replace(workdir.rstrip("/") + "/", "").replace(workdir, ".")
    text = re.sub(r"\b\d+(\.\d+)?s\b", "<seconds>", text)
    text = re.sub(r"\bpid \d+", "pid <pid>", text)
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line-by-line equality where an expected `...` line stands for any lines."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0] == head and matches(rest, actual[1:])
