"""The package's shape that docs/design.md promises: small files, and each class name
standing for one class (a reader who finds a name in a trace finds one definition)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import sessionize

PACKAGE = Path(sessionize.__file__).parent
MAX_LINES = 500


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_is_under_500_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) >= MAX_LINES
    }
    assert long == {}


def test_each_class_name_is_defined_once():
    where: dict[str, list[str]] = defaultdict(list)
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(p.relative_to(PACKAGE)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
