"""Word and phrase lists kept as data files next to the code that reads them.

A list file is UTF-8 text with one entry a line; blank lines and lines starting with `#`
are skipped, and each entry is stripped of surrounding spaces. The files ship inside the
package (see `[tool.setuptools.package-data]` in pyproject.toml) and are read through
importlib.resources, so they load the same from a checkout or an installed wheel.
"""

from __future__ import annotations

from importlib import resources


def read_list(package: str, path: str) -> tuple[str, ...]:
    """The entries of `path` (e.g. "guard_phrases/override_verbs.txt") inside `package`."""
    text = resources.files(package).joinpath(path).read_text(encoding="utf-8")
    entries = (line.strip() for line in text.splitlines())
    return tuple(e for e in entries if e and not e.startswith("#"))
