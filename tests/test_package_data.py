"""Every data file under shared/ ships in the wheel: pyproject's package-data names it.

The code reads them through importlib.resources (the word lists in guard_phrases/ and
lexicon_words/, the ops page, the tokenizer), so a file left out of package-data works
from a checkout and fails only once installed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_data_file_under_shared_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = {
        path
        for package, patterns in config["tool"]["setuptools"]["package-data"].items()
        for pattern in patterns
        for path in ROOT.joinpath(*package.split(".")).glob(pattern)
    }
    data = {
        path
        for path in (ROOT / "shared").rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    }
    assert sorted(str(p.relative_to(ROOT)) for p in data - shipped) == []
