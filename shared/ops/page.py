"""The /ops page: one self-contained HTML file (no CDN: ops pages must work offline).

It holds no data. It takes the admin key from the URL fragment (`/ops#key=...`, never
sent to the server or written to access logs) or a form, keeps it in sessionStorage, and
reads /v1/ops/queues, /v1/ops/workers and /v1/ops/timeseries every few seconds.
"""

from __future__ import annotations

from pathlib import Path

HTML = (Path(__file__).parent / "assets" / "ops.html").read_text(encoding="utf-8")
