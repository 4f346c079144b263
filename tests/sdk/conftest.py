"""One real `tiermem serve` (offline extractor, the scripted server as its chat model) for
the SDKs' tests, Python's and TypeScript's, and the anyio backend for the async ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.factories import tiermem_serve
from tests.scripted_llm import ScriptedLLM


@pytest.fixture(name="server", scope="package")
def server_fixture(
    tmp_path_factory: pytest.TempPathFactory, scripted_llm_server: ScriptedLLM
) -> Iterator[str]:
    chat = {"TIERMEM_CHAT__BASE_URL": scripted_llm_server.base_url, "TIERMEM_CHAT__TIMEOUT_S": "10"}
    with tiermem_serve(tmp_path_factory.mktemp("sdk"), chat) as url:
        yield url


@pytest.fixture(name="anyio_backend")
def anyio_backend_fixture() -> str:
    return "asyncio"
