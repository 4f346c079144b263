"""The pages the API serves, each self-contained (no CDN, no build step: they must work
offline and from a wheel): /ops, and the memory browser at /memory.

They hold no data. Each takes its key from the URL fragment (`#key=...`, never sent to the
server or written to access logs) or a form, keeps it in sessionStorage, and reads the
documented /v1 API with it, so the API's own authorization decides what they show.
"""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).parent / "assets"
HTML = (ASSETS / "ops.html").read_text(encoding="utf-8")
# The memory browser: its shell, and the script and style it loads beside it.
MEMORY_HTML = (ASSETS / "memory.html").read_text(encoding="utf-8")
MEMORY_FILES = {
    name: ((ASSETS / name).read_text(encoding="utf-8"), media_type)
    for name, media_type in (
        ("memory.js", "text/javascript; charset=utf-8"),
        ("memory.css", "text/css; charset=utf-8"),
    )
}
