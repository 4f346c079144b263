"""A real `tiermem serve` for mem0's own client, and mem0ai made quiet and offline."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import tiermem_serve

# mem0ai writes ~/.mem0 at import and sends telemetry (PostHog) unless told otherwise
# (mem0/memory/setup.py, mem0/memory/telemetry.py); both are read once, at its import, so
# they are set before any test module imports it.
MEM0_HOME = Path(tempfile.mkdtemp(prefix="mem0-home-"))
os.environ["MEM0_DIR"] = str(MEM0_HOME)
os.environ["MEM0_TELEMETRY"] = "False"


@pytest.fixture(name="mem0_home", scope="session")
def mem0_home_fixture() -> Path:
    return MEM0_HOME


@pytest.fixture(name="serve", scope="module")
def serve_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`tiermem serve` (offline extractor, embedded Qdrant Edge), its base URL."""
    with tiermem_serve(tmp_path_factory.mktemp("mem0-serve"), {}) as url:
        yield url
