"""The README's Python examples of the framework adapters (its "Frameworks" section) run as
written against a real `tiermem serve`, the scripted OpenAI-compatible server standing in for
the agent's model."""

from __future__ import annotations

import gc
import re
from typing import Any

import httpx
import pytest

from tests import processes
from tests.scripted_llm import ScriptedLLM

pytest.importorskip("agents", reason="openai-agents is not installed: pip install .[openai-agents]")
pytest.importorskip("langgraph", reason="langgraph is not installed: pip install .[langgraph]")
httpx2: Any = pytest.importorskip("httpx2")  # the openai package's own httpx

README_URL, MODEL_URL = "http://127.0.0.1:8000", "http://127.0.0.1:11434/v1"


def framework_blocks() -> list[str]:
    readme = (processes.REPO / "README.md").read_text()
    section = readme.split("\n## Frameworks\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, re.M | re.S)


def open_async_http_clients() -> list[Any]:
    """httpx's and httpx2's (the openai package's) async clients not closed yet."""
    kinds = (httpx.AsyncClient, httpx2.AsyncClient)
    return [c for c in gc.get_objects() if isinstance(c, kinds) and not c.is_closed]


@pytest.mark.parametrize("n", range(2), ids=["openai-agents", "langgraph"])
def test_the_readme_example_runs(
    n: int, server: str, scripted_llm: ScriptedLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = framework_blocks()
    assert len(blocks) == 2, "the README's Frameworks section has one Python example a framework"
    scripted_llm.script("jazz bars", "Try the Hot Clube, Lisbon's oldest jazz club.")
    code = blocks[n].replace(README_URL, server).replace(MODEL_URL, scripted_llm.base_url)
    before = {id(c) for c in open_async_http_clients()}
    exec(compile(code, f"README.md (Frameworks, example {n + 1})", "exec"), {})
    # An async client left open is collected later, inside another test's event loop, where
    # its close fails with "Event loop is closed": the example closes what it opens.
    assert [c for c in open_async_http_clients() if id(c) not in before] == []
    printed = capsys.readouterr().out
    if n == 0:
        assert "Hot Clube" in printed and "'role': 'assistant'" in printed, printed
    else:
        assert "{'content': 'I love jazz.'}" in printed and "music" in printed, printed
        assert "content='I moved to Lisbon.'" in printed, printed
