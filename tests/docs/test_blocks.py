"""The docs test's own rules: which blocks run, what output belongs to which, what varies."""

from __future__ import annotations

from tests.docs.blocks import matches, normalize, page_blocks

PAGE = """# A page

<!-- no-test: needs a cluster; tests/cluster covers it -->
```bash
sessionize stream --master spark://somewhere:7077
```

```bash
echo one
```

```text
one
```

Some words.

```text
not the output of anything
```

```console
$ echo a \\
    b
a b
$ true
```

```python
print(1)
```
"""


def test_blocks_marks_and_outputs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    blocks = page_blocks(page, tmp_path)
    assert [(b.lang, b.runs) for b in blocks] == [
        ("bash", False), ("bash", True), ("text", False), ("text", False), ("console", True),
        ("python", True),
    ]  # fmt: skip
    assert blocks[0].no_test == "needs a cluster; tests/cluster covers it"
    assert blocks[1].expected == "one"  # the text block right after it
    assert blocks[5].expected is None  # a text block after other words belongs to nothing
    assert blocks[4].commands() == [("echo a \\\n    b", "a b"), ("true", None)]


def test_what_varies_and_what_does_not():
    shown = "batch 0: 6 events in, watermark 2026-11-01T09:21:40Z, 21.0s\ndriver pid 4242"
    printed = "batch 0: 6 events in, watermark 2026-11-01T09:21:40Z, 45.5s\ndriver pid 17"
    assert matches(normalize(shown), normalize(printed))
    # Counts and event times are not what varies: a wrong one fails.
    assert not matches(normalize(shown), normalize(printed.replace("6 events", "7 events")))
    assert not matches(normalize(shown), normalize(printed.replace("09:21:40", "09:41:40")))
    assert matches(normalize("/tmp/x/out/a.parquet", "/tmp/x"), ["out/a.parquet"])


def test_an_ellipsis_line_matches_any_lines():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b", "c"])
    assert not matches(["a", "b"], ["a", "b", "c"])
