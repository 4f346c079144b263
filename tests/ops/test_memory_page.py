"""The memory browser (/memory) in a real headless Chromium against a real `tiermem serve`
(its worker extracting through the scripted LLM): Ana moved from Leeds to Bristol, changed
jobs and lost her dog, and the page shows what tiermem believes now, each old value ended
with the message that ended it, and a search; another tenant's key sees nothing of her."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests import factories as f
from tests.factories import ADMIN_KEY, APP_KEY, tiermem_serve, wait_for
from tests.ops.devtools import open_page
from tests.ops.test_ops_page import chromium
from tests.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.slow
APP = {"Authorization": f"Bearer {APP_KEY}"}
BO_SAYS = "I keep bees on the roof of the flat."
# The first retry button's row: its class, its words, and whether the button is disabled.
RETRY_ROW = """(() => {
  const row = document.querySelector("[data-retry]").closest("tr");
  return [row.className, row.innerText, row.querySelector("button").disabled];
})()"""
REPLAY_DONE = (
    "(t => t.includes(' done: ') && t)(document.querySelector('#replay-result').innerText)"
)
SCREENSHOTS = {"memory-browser.png": "1280,2300", "memory-browser-narrow.png": "390,2600"}


@pytest.fixture(name="server", scope="module")
def server_fixture(
    tmp_path_factory: pytest.TempPathFactory, scripted_llm_server: ScriptedLLM
) -> Iterator[str]:
    """`tiermem serve` holding Ana's changing life, stored and extracted turn by turn."""
    env = {"TIERMEM_LLM__BASE_URL": scripted_llm_server.base_url, "TIERMEM_LLM__TIMEOUT_S": "10"}
    with tiermem_serve(tmp_path_factory.mktemp("memory-page"), env) as url:
        for session_id, body in f.script_changing_life(scripted_llm_server):
            r = httpx.post(f"{url}/v1/sessions/{session_id}/turns", json=body, headers=APP)
            assert r.status_code == 202, r.text
            job = r.json()["job_id"]

            def finished(job_id: str = job) -> str | None:
                status = job_status(url, job_id)
                return status if status not in ("pending", "running", "retrying") else None

            assert wait_for(finished, timeout=60, what=f"job {job}") == "done"
        # Bo's one turn fails: the model answers with no JSON, and again when asked to repair
        # it (that request quotes the reply, not the turn: the misbehaviour names no text).
        scripted_llm_server.misbehave("malformed", times=2)
        r = httpx.post(f"{url}/v1/sessions/bo-1/turns", json=f.turn("bo", BO_SAYS), headers=APP)
        assert r.status_code == 202, r.text
        bo_job = r.json()["job_id"]

        def bo_finished() -> str | None:
            status = job_status(url, bo_job)
            return status if status not in ("pending", "running", "retrying") else None

        assert wait_for(bo_finished, timeout=60, what="bo's run") == "failed"
        yield url


def job_status(url: str, job_id: str) -> str:
    status: str = httpx.get(f"{url}/v1/jobs/{job_id}", headers=APP).json()["status"]
    return status


def part(dom: str, attribute: str, value: str, tag: str) -> str:
    """The first element `tag` carrying attribute="value", with what it holds."""
    match = re.search(rf'<{tag}[^>]*{attribute}="{re.escape(value)}".*?</{tag}>', dom, re.S)
    assert match, f"no <{tag} {attribute}={value!r}> on the page"
    return match.group(0)


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&amp;", "&").strip()


class Controls(HTMLParser):
    """Form controls without a label (neither inside a <label> nor named by one's `for`),
    and buttons without words: what a screen reader would announce as nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.named: set[str] = set()
        self.controls: list[tuple[str, str | None, bool]] = []  # tag, id, inside a label
        self.button: list[str] | None = None
        self.mute_buttons = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "label":
            self.depth += 1
            if a.get("for"):
                self.named.add(str(a["for"]))
        elif tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append((tag, a.get("id"), self.depth > 0 or "aria-label" in a))
        elif tag == "button":
            self.button = [a.get("aria-label") or ""]

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self.depth -= 1
        elif tag == "button" and self.button is not None:
            self.mute_buttons += not "".join(self.button).strip()
            self.button = None

    def handle_data(self, data: str) -> None:
        if self.button is not None:
            self.button.append(data)

    def unlabelled(self) -> list[str]:
        return [f"{t}#{i}" for t, i, inside in self.controls if not inside and i not in self.named]


def test_the_page_answers_what_tiermem_believes_about_her_job_since_when_and_why(
    server: str, tmp_path: Path
) -> None:
    url = f"{server}/memory#key={APP_KEY}&user=ana&q={quote('Where do I live?')}"
    dom = chromium(url, tmp_path, "--dump-dom")
    assert 'data-loaded="true"' in dom, dom[-3000:]

    # What it believes now, per slot
    assert text(part(dom, "data-current", "identity/location", "strong")) == "Bristol"
    assert text(part(dom, "data-current", "identity/employer", "strong")) == "SAP"
    assert text(part(dom, "data-current", "fact/pet:rex", "strong")) == "ended"

    # The job: SAP since 10 March, Siemens before it, changed by the message that said so
    employer = text(part(dom, "data-slot", "identity/employer", "article"))
    assert "Now: SAP since 10 March 2026" in employer and "Siemens → SAP" in employer
    assert "superseded Siemens 12 January 2026 – 10 March 2026" in employer
    assert "changed on 10 March 2026 by I started a new job at SAP this week." in employer

    location = text(part(dom, "data-slot", "identity/location", "article"))
    assert "Leeds → Bristol" in location
    assert "changed on 3 March 2026 by Big news: we moved to Bristol! (session move)" in location
    assert "said 5 January 2026, 09:00 UTC: I live in Leeds, up north." in location

    pet = part(dom, "data-slot", "fact/pet:rex", "article")
    assert 'data-state="ended"' in pet and 'data-state="ending"' in pet
    assert "ended on 17 March 2026 by Sadly Rex passed away on Sunday." in text(pet)

    # Facts grouped by type, their sources one click away
    identity = text(part(dom, "data-type", "identity", "div"))
    assert "Ana works at SAP." in identity and "Sources (" in identity and "llm" in identity

    # Search as the model would see it: memories with their score, the history, the context
    memories = text(part(dom, "id", "memory-hits", "div"))
    assert memories.startswith("Ana lives in Bristol. score 0.")
    assert "words: rank" in text(part(dom, "id", "history-hits", "div"))
    assert "Ana lives in Bristol." in text(part(dom, "id", "context", "div"))

    # The sessions' tiers and the runs
    assert 'data-tier="current"' in dom, part(dom, "id", "sessions", "section")[:3000]
    runs = text(part(dom, "id", "run-table", "div"))
    assert "Sadly Rex passed away on Sunday." in runs and "done" in runs

    # Every control is labelled, every button says what it does; the users are buttons
    controls = Controls()
    controls.feed(dom)
    assert controls.unlabelled() == [] and controls.mute_buttons == 0
    assert re.search(r'<button[^>]*data-user="ana"[^>]*aria-current="true"', dom)
    assert 'class="skip" href="#main"' in dom

    # The README's pictures (docs/images/) are these, copied by hand when the page changes.
    shots = tmp_path / "shots"
    shots.mkdir()
    for name, size in SCREENSHOTS.items():
        chromium(url, tmp_path, f"--screenshot={shots / name}", f"--window-size={size}")
        assert (shots / name).stat().st_size > 30_000  # a rendered page, not a blank one


def test_another_tenants_key_sees_nothing_of_her(server: str, tmp_path: Path) -> None:
    created = httpx.post(
        f"{server}/v1/admin/tenants",
        json={"name": "globex"},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert created.status_code == 201, created.text
    other = created.json()["app_key"]["key"]
    dom = chromium(f"{server}/memory#key={other}&user=ana", tmp_path, "--dump-dom")
    assert "user ana not found with this key" in dom
    assert "no user matches" in dom
    for said in ("Bristol", "Leeds", "Siemens", "Rex"):
        assert said not in dom


def test_without_a_key_the_page_asks_for_one(server: str, tmp_path: Path) -> None:
    dom = chromium(f"{server}/memory", tmp_path, "--dump-dom")
    login = part(dom, "id", "login", "form")
    assert "hidden" not in login.split(">")[0] and 'for="key"' in login
    assert 'data-loaded="true"' not in dom


def test_a_keyboard_alone_finds_a_user_and_reads_their_sources(server: str, tmp_path: Path) -> None:
    async def use() -> None:
        async with open_page(tmp_path) as page:
            await page.goto(f"{server}/memory#key={APP_KEY}")
            await page.wait("!!document.querySelector('[data-user=ana]')")
            order = []
            for _ in range(12):
                await page.press("Tab")
                order.append(await page.focused())
                if order[-1].startswith("button[data-user=ana]"):
                    break
            assert order[0] == "a Skip to the user", order
            assert any(o.startswith("input#find-q") for o in order), order
            assert order[-1].startswith("button[data-user=ana]"), order
            await page.press("Enter")
            await page.wait("document.body.dataset.loaded === 'true'")
            assert (await page.focused()).startswith("main#main")
            await page.press("Tab")  # on to the first of the sections
            assert await page.focused() == "a Beliefs over time"
            # a fact's sources open from the keyboard
            await page.js("document.querySelector('[data-type=identity] summary').focus()")
            await page.press("Enter")
            sources = await page.js(
                "document.querySelector('[data-type=identity] details[open] ul').innerText"
            )
            assert "session move" in sources

    asyncio.run(use())


def test_a_tenant_admin_retries_a_failed_run_replays_exports_and_deletes(
    server: str, tmp_path: Path
) -> None:
    operator = {"Authorization": f"Bearer {ADMIN_KEY}"}
    tenants = httpx.get(f"{server}/v1/admin/tenants", headers=operator).json()
    default = next(t["id"] for t in tenants if t["name"] == "default")
    minted = httpx.post(
        f"{server}/v1/admin/tenants/{default}/keys", json={"scope": "admin"}, headers=operator
    )
    assert minted.status_code == 201, minted.text
    admin = minted.json()["key"]

    async def use() -> None:
        async with open_page(tmp_path) as page:
            await page.goto(f"{server}/memory#key={admin}&user=bo")
            await page.wait("document.body.dataset.loaded === 'true'")
            row = await page.js(RETRY_ROW)
            assert row[0] == "bad" and "failed" in row[1] and row[2] is False, row
            await page.js("document.querySelector('[data-retry]').focus()")
            await page.press("Enter")
            await page.wait("document.getElementById('status').textContent.includes('sent back')")

            # A dry-run replay of Ana's sessions shows its diff
            await page.goto(f"{server}/memory#user=ana")
            await page.wait("document.body.dataset.loaded === 'true'")
            await page.js("document.getElementById('replay').click()")
            diff = await page.wait(REPLAY_DONE, timeout=120)
            assert "6 of 6 turns, 0 failed" in diff and "would be added" in diff, diff
            await page.js("document.getElementById('export').click()")
            exported = await page.wait("document.getElementById('manage-result').innerText")
            assert exported.startswith("exported 12 messages"), exported

            # Deleting Bo asks for his id: a wrong one deletes nothing
            await page.goto(f"{server}/memory#user=bo")
            await page.wait("document.body.dataset.loaded === 'true'")
            for typed in ("b", "bo"):
                await page.js("document.getElementById('delete').click()")
                assert await page.js("document.getElementById('confirm-delete').open")
                await page.js("document.getElementById('confirm-id').focus()")
                await page.type(typed)
                await page.js("document.getElementById('confirm-go').click()")
                if typed == "b":
                    await asyncio.sleep(1)
                    still = httpx.get(f"{server}/v1/users/bo/sessions", headers=APP)
                    assert still.status_code == 200
            deleted = await page.wait("document.getElementById('manage-result').innerText")
            assert deleted.startswith("deleted: "), deleted
        assert httpx.get(f"{server}/v1/users/bo/sessions", headers=APP).status_code == 404

    asyncio.run(use())
