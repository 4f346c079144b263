"""Settings refuse what cannot work, saying what to do instead."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.config import Settings


def test_the_removed_local_engine_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None, qdrant={"engine": "local"})
    [error] = refused.value.errors()
    assert error["loc"] == ("qdrant",)
    assert "TIERMEM_QDRANT__ENGINE=local is no longer supported" in error["msg"]
    assert "`tiermem reindex`" in error["msg"] and "TIERMEM_QDRANT__URL" in error["msg"]


def test_engine_edge_is_what_there_is_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERMEM_DATA_DIR", "/srv/tm")
    without = Settings(_env_file=None)
    monkeypatch.setenv("TIERMEM_QDRANT__ENGINE", "edge")
    settings = Settings(_env_file=None)
    assert settings == without and settings.qdrant_path == "/srv/tm/vectors"
