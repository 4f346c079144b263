"""The /ops page in a real headless Chromium: it loads with the admin key from the URL
fragment, shows the same numbers as the API, and draws its plots (screenshot kept)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import processes
from tests.e2e.test_processes import (  # the fixtures are shared with the e2e tests
    Stack,
    script_distinct_facts,
    stack_env_fixture,  # noqa: F401
    stack_fixture,  # noqa: F401
    turn_text,
)
from tests.factories import ADMIN_KEY
from tests.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.slow
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium(url: str, tmp: Path, *args: str) -> str:
    assert CHROMIUM, "Debian's chromium package is needed (.ci/run installs it)"
    result = processes.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp / 'profile'}",
            "--virtual-time-budget=8000",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def element(dom: str, tag: str, element_id: str) -> str:
    match = re.search(rf'<{tag} id="{re.escape(element_id)}".*?</{tag}>', dom, re.S)
    assert match, f"#{element_id} is not on the page"
    return match.group(0)


def timeline(*series: dict[str, Any]) -> list[str]:
    """The minutes of these series, oldest first, as the plots label them: HH:MM, UTC."""
    at = sorted({p["at"] for s in series for p in s["points"]})
    return [a[11:16] for a in at]


def cell(dom: str, element_id: str) -> str:
    match = re.search(rf'id="{re.escape(element_id)}"[^>]*>([^<]*)<', dom)
    assert match, f"#{element_id} is not on the page"
    return match.group(1)


def test_ops_page_shows_the_api_numbers(
    stack: Stack, scripted_llm: ScriptedLLM, tmp_path: Path
) -> None:
    script_distinct_facts(scripted_llm, 4)
    stack.start_api()
    stack.start_worker()
    done = [
        stack.post_turn("s1", {"user_id": "ana", "user_message": turn_text(i)}) for i in range(4)
    ]
    stack.wait_all_done(done)
    r = httpx.post(f"{stack.url}/v1/ops/queues/compress/pause", headers=ADMIN)
    assert r.status_code == 200
    snap = httpx.get(f"{stack.url}/v1/ops/queues", headers=ADMIN).json()
    extract = next(q for q in snap["queues"] if q["name"] == "extract")
    before = httpx.get(f"{stack.url}/v1/ops/timeseries", headers=ADMIN).json()

    url = f"{stack.url}/ops#key={ADMIN_KEY}"
    dom = chromium(url, tmp_path, "--dump-dom")
    # the page read its series in between: the hour may have moved on by a minute
    shown = timeline(before, httpx.get(f"{stack.url}/v1/ops/timeseries", headers=ADMIN).json())
    assert 'data-loaded="true"' in dom, dom[:2000]
    assert cell(dom, "q-extract-depth") == str(extract["depth"]) == "0"
    assert cell(dom, "q-extract-pending") == str(extract["pending"]) == "0"
    assert cell(dom, "q-extract-per-minute-15") == f"{extract['windows'][2]['per_minute']:g}"
    assert cell(dom, "q-compress-paused") == "paused" and cell(dom, "q-extract-paused") == ""
    assert cell(dom, "t-default-pending") == "0"
    # the plots are drawn from /v1/ops/timeseries: a path per series
    for field in ("depth", "finished", "duration_ms_p50", "duration_ms_p95", "failed"):
        assert f'data-series="{field}"' in dom
    # each plot has a time axis, in UTC, and a legend naming its lines
    for chart, legend in [
        ("chart-depth", ["waiting"]),
        ("chart-finished", ["finished"]),
        ("chart-latency", ["p50", "p95"]),
        ("chart-failed", ["failed"]),
    ]:
        svg = element(dom, "svg", chart)
        ticks = re.findall(r"<text[^>]*data-tick[^>]*>([^<]*)</text>", svg)
        assert len(ticks) >= 4 and set(ticks) <= set(shown), (chart, ticks)
        places = [shown.index(t) for t in ticks]
        assert places == sorted(places), (chart, ticks)  # oldest on the left
        assert re.search(r"<text[^>]*>UTC</text>", svg), chart
        assert re.findall(r"<text[^>]*data-legend[^>]*>([^<]*)</text>", svg) == legend
    # a table with no rows says so instead of showing a bare header
    assert "nothing yet" in element(dom, "table", "failed")
    assert "nothing yet" in element(dom, "table", "fallbacks")
    assert "nothing yet" in element(dom, "table", "webhooks")  # read from /v1/ops/webhooks
    assert "nothing yet" not in element(dom, "table", "queues")

    shot = tmp_path / "ops.png"
    chromium(url, tmp_path, f"--screenshot={shot}", "--window-size=1280,1500")
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one

    without_key = chromium(f"{stack.url}/ops", tmp_path, "--dump-dom")
    assert 'id="login"' in without_key and 'data-loaded="true"' not in without_key
