"""The TypeScript client (sdk/typescript) against a real `tiermem serve`: its generated types
match the OpenAPI document the server serves, its `node --test` suite passes (the scripted
server as the chat model), and on Bun and Deno too, its Vercel AI SDK middleware (`tiermem/ai`)
works with the real `ai` package, and the packed npm package stores a turn, waits for its job
and finds the memory. Skipped only where `node` is not installed."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from tests import processes
from tests.factories import ADMIN_KEY, APP_KEY
from tests.scripted_llm import ScriptedLLM

SDK = processes.REPO / "sdk" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")
# What the scripted chat model answers a message naming CHAT_MATCH: longer than one of its
# 16-character pieces, so the stream test sees several deltas.
CHAT_MATCH, CHAT_REPLY = "typescript client", "Hello from the scripted model, in several pieces."

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def run(
    args: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> str:
    """`args` to the end, its output; fails the test on a non-zero exit. Its whole process
    group is stopped afterwards (npm and node --test start children of their own)."""
    process = processes.spawn(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{' '.join(args)} took over {timeout:g}s:\n{output}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, f"{' '.join(args)} exited {process.returncode}:\n{output}"
    return str(output)


def npm(*args: str, cwd: Path = SDK) -> str:
    assert NPM is not None, "node is installed without npm"
    return run([NPM, *args, "--no-audit", "--no-fund"], cwd=cwd)


def node_env(server: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "TIERMEM_URL": server,
        "TIERMEM_APP_KEY": APP_KEY,
        "TIERMEM_ADMIN_KEY": ADMIN_KEY,
        **extra,
    }


@pytest.fixture(name="built", scope="module")
def built_fixture() -> Path:
    """sdk/typescript installed from its lock file and compiled to dist/."""
    npm("ci")
    npm("run", "build")
    return SDK


def test_generated_types_match_the_served_openapi_document(
    built: Path, server: str, tmp_path: Path
) -> None:
    document = tmp_path / "openapi.json"
    document.write_bytes(httpx.get(f"{server}/openapi.json", timeout=10).content)
    npm("run", "gen", "--", str(document), str(tmp_path / "schema.ts"))
    fresh = (tmp_path / "schema.ts").read_text()
    checked_in = (built / "src" / "schema.ts").read_text()
    if fresh != checked_in:
        diff = difflib.unified_diff(
            checked_in.splitlines(), fresh.splitlines(), "src/schema.ts", "served", lineterm=""
        )
        pytest.fail(
            "sdk/typescript/src/schema.ts differs from the served OpenAPI document; regenerate "
            "it (README: TypeScript SDK):\n" + "\n".join(list(diff)[:80])
        )


def test_node_suite_passes_against_tiermem_serve(
    built: Path, server: str, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script(CHAT_MATCH, CHAT_REPLY)
    files = sorted(str(p.relative_to(built)) for p in (built / "test").glob("*.test.js"))
    env = node_env(server, TIERMEM_TEST_CHAT_MATCH=CHAT_MATCH, TIERMEM_TEST_CHAT_REPLY=CHAT_REPLY)
    assert NODE is not None
    output = run([NODE, "--test", "--test-reporter=tap", *files], cwd=built, env=env)
    summary = tap_summary(output)
    assert summary.get("fail") == "0" and summary.get("skipped") == "0", output[-3000:]
    assert int(summary["pass"]) >= 20, output[-3000:]


def test_vercel_ai_middleware_with_the_ai_package(built: Path, server: str) -> None:
    """test/integrations: generateText and streamText of the pinned `ai` devDependency, its
    MockLanguageModelV3 as the model, through tiermemMiddleware (Node only: the Bun and Deno
    runs are of the client)."""
    files = sorted(
        str(p.relative_to(built)) for p in (built / "test" / "integrations").glob("*.test.js")
    )
    assert NODE is not None and files
    output = run([NODE, "--test", "--test-reporter=tap", *files], cwd=built, env=node_env(server))
    summary = tap_summary(output)
    assert summary.get("fail") == "0" and summary.get("skipped") == "0", output[-3000:]
    assert int(summary["pass"]) >= 4, output[-3000:]


def tap_summary(output: str) -> dict[str, str]:
    """node --test's closing counts (`# pass 4`, `# fail 0`, …)."""
    return dict(
        line[2:].split(" ", 1)
        for line in output.splitlines()
        if line.startswith("# ") and " " in line[2:]
    )


@pytest.fixture(name="runtimes", scope="module")
def runtimes_fixture() -> Path:
    """Bun and Deno at the versions sdk/typescript/test/runtimes pins (their npm packages
    ship the binaries)."""
    folder = SDK / "test" / "runtimes"
    npm("ci", cwd=folder)
    return folder / "node_modules" / ".bin"


@pytest.mark.parametrize("runtime", ["bun", "deno"])
def test_bun_and_deno_pass_the_same_suite(
    built: Path,
    server: str,
    scripted_llm: ScriptedLLM,
    runtimes: Path,
    tmp_path: Path,
    runtime: str,
) -> None:
    """The client uses only what every platform has (fetch, AbortController, streams): the
    Node suite, unchanged, passes on Bun's and Deno's own test runners too."""
    scripted_llm.script(CHAT_MATCH, CHAT_REPLY)
    files = sorted(f"./{p.relative_to(built)}" for p in (built / "test").glob("*.test.js"))
    env = node_env(
        server,
        TIERMEM_TEST_CHAT_MATCH=CHAT_MATCH,
        TIERMEM_TEST_CHAT_REPLY=CHAT_REPLY,
        DENO_DIR=str(tmp_path / "deno"),
        DENO_NO_UPDATE_CHECK="1",
        NO_COLOR="1",
    )
    if runtime == "bun":
        output = run([str(runtimes / "bun"), "test", *files], cwd=built, env=env)
        assert re.search(r"^ 0 fail$", output, re.M) and "(skip)" not in output, output
        assert int(re.findall(r"^ (\d+) pass$", output, re.M)[-1]) >= 20, output
    else:
        output = run(
            [str(runtimes / "deno"), "test", "-A", "--no-check", *files], cwd=built, env=env
        )
        assert re.search(r"^ok \| \d+ passed \(\d+ steps\) \| 0 failed", output, re.M), output
        assert " ignored (" not in output and "FAILED" not in output, output
        assert sum(int(n) for n in re.findall(r"passed \((\d+) steps\)", output)) >= 20, output


def test_packed_package_stores_a_turn_waits_for_its_job_and_finds_the_memory(
    built: Path, server: str, tmp_path: Path
) -> None:
    name = npm("pack", "--pack-destination", str(tmp_path), "--silent").strip().splitlines()[-1]
    tarball = tmp_path / name
    with tarfile.open(tarball) as packed:
        shipped = set(packed.getnames())
    assert {"package/dist/index.js", "package/dist/index.d.ts", "package/README.md"} <= shipped
    assert "package/dist/integrations/vercel-ai.js" in shipped
    assert not any(n.startswith(("package/src/", "package/test/")) for n in shipped), shipped

    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(
        json.dumps({"name": "check", "private": True, "type": "module"})
    )
    npm("install", "--prefer-offline", str(tarball), cwd=app)
    assert json.loads((app / "package.json").read_text())["dependencies"]["tiermem"]
    shutil.copy(built / "examples" / "quickstart.mjs", app / "quickstart.mjs")
    assert NODE is not None
    output = run([NODE, "quickstart.mjs"], cwd=app, env=node_env(server), timeout=90)
    assert "job done" in output, output
    assert "Berlin" in output.split("job done", 1)[1], output
    assert "404 not_found" in output, output

    # The READMEs' TypeScript, type-checked against the installed package's own types; the
    # tiermem/ai example also against the `ai` package at the version the SDK is tested with
    # (whose own declarations need @types/node: they are not checked, its API is).
    dev = json.loads((built / "package.json").read_text())["devDependencies"]
    npm("install", "--prefer-offline", f"ai@{dev['ai']}", f"zod@{dev['zod']}", cwd=app)
    plain, with_ai = [], []
    for n, block in enumerate(readme_blocks("ts")):
        (app / f"readme_{n}.mts").write_text(block)
        (with_ai if 'from "ai"' in block else plain).append(f"readme_{n}.mts")
    assert plain and with_ai, "the READMEs show the client and tiermem/ai"
    tsc = [str(built / "node_modules" / ".bin" / "tsc"), "--noEmit", "--strict"]
    options = ["--target", "ES2022", "--module", "NodeNext", "--lib", "ES2022,DOM"]
    run([*tsc, *options, *plain], cwd=app)
    run([*tsc, *options, "--skipLibCheck", *with_ai], cwd=app)


def readme_blocks(language: str) -> list[str]:
    """The fenced `language` blocks of the root README and the SDK's."""
    blocks = []
    for readme in (processes.REPO / "README.md", SDK / "README.md"):
        blocks += re.findall(rf"^```{language}\n(.*?)^```$", readme.read_text(), re.M | re.S)
    assert len(blocks) >= 2, "no TypeScript example in the READMEs"
    return blocks
