"""`tiermem import-mem0` over a store mem0ai's own `Memory` wrote (mem0ai 2.2.1: `add(...,
infer=False)` into its embedded Qdrant folder, embeddings from the scripted
OpenAI-compatible server, since mem0's default huggingface embedder cannot download here),
and over a `get_all`-shaped export: typed facts with provenance, and a rerun adds nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from shared.config import Settings
from shared.db.models import Fact
from shared.runtime import Runtime
from tests import processes
from tests.factories import tiermem_env
from tests.scripted_llm import ScriptedLLM

pytest.importorskip("mem0", reason="mem0ai is the `mem0` extra: pip install -e '.[mem0]'")

MEMORIES = ["Name is Alex", "Lives in Berlin", "Likes pizza", "Had a long week at work"]


def mem0_store(folder: Path, llm: ScriptedLLM) -> None:
    from mem0 import Memory

    openai = {"api_key": "not-needed", "openai_base_url": llm.base_url}
    memory = Memory.from_config(
        {
            "vector_store": {
                "provider": "qdrant",
                "config": {"path": str(folder), "collection_name": "mem0",
                           "embedding_model_dims": 384, "on_disk": True},
            },
            "embedder": {"provider": "openai", "config": {**openai, "embedding_dims": 384}},
            "llm": {"provider": "openai", "config": openai},
            "history_db_path": str(folder.parent / "history.db"),
        }
    )  # fmt: skip
    for text in MEMORIES:
        memory.add([{"role": "user", "content": text}], user_id="alex", infer=False)
    memory.add([{"role": "user", "content": "Lives in Lisbon"}], user_id="alex", infer=False)
    memory.vector_store.client.close()  # the folder's lock: one client at a time


def import_mem0(tmp: Path, *args: str) -> str:
    env = tiermem_env({"TIERMEM_DATA_DIR": str(tmp / "data")})
    done = processes.run(
        [str(Path(sys.executable).with_name("tiermem")), "import-mem0", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return " ".join((done.stdout + done.stderr).split())  # the console writes to stderr


def facts_of(tmp: Path) -> list[Fact]:
    runtime = Runtime(Settings(data_dir=tmp / "data"))
    try:
        with Session(runtime.engine) as session:
            return list(session.exec(select(Fact).order_by(col(Fact.first_seen_at))).all())
    finally:
        runtime.close()


def test_a_mem0_qdrant_folder_comes_in_typed_and_twice_adds_nothing(
    tmp_path: Path, scripted_llm_server: ScriptedLLM, mem0_home: Path
) -> None:
    mem0_store(tmp_path / "qdrant", scripted_llm_server)

    first = import_mem0(tmp_path, str(tmp_path / "qdrant"))
    assert "5 mem0 memories: 5 facts added" in first, first
    facts = {f.content: f for f in facts_of(tmp_path)}
    assert facts["The user's name is Alex."].slot == "identity/name"
    assert facts["The user likes pizza."].type == "preference"
    # Nothing the rules know: a `fact` without a slot, holding mem0's text as it was.
    assert facts["Had a long week at work"].type == "fact"
    assert facts["Had a long week at work"].slot is None
    # Typed, a later value supersedes, as from a chat: Lisbon replaced Berlin.
    berlin, lisbon = facts["The user lives in Berlin."], facts["The user lives in Lisbon."]
    assert berlin.valid_to is not None and berlin.superseded_by == lisbon.id
    for fact in facts.values():
        assert fact.extractor == "mem0-import"
        assert fact.source_message_ids == [f"mem0:{fact.details['mem0']['id']}"]
        assert fact.details["mem0"]["hash"]

    second = import_mem0(tmp_path, str(tmp_path / "qdrant"))
    assert "0 facts added" in second and "5 already imported" in second, second
    assert len(facts_of(tmp_path)) == 5


def test_an_export_comes_in_for_its_users_and_a_rerun_adds_nothing(
    tmp_path: Path, mem0_home: Path
) -> None:
    export: dict[str, Any] = {
        "count": 2,
        "next": None,
        "previous": None,
        "results": [
            {"id": "2f0e7c1e-55d4-4b6a-9a53-3d3b0f7f9a11", "memory": "Is a vegetarian",
             "user_id": "sam", "metadata": {"source": "onboarding"},
             "created_at": "2025-03-01T10:00:00-08:00"},
            {"id": "b9d1f1a4-7a0e-4f6e-8d5c-1f1e0c2a7b22", "memory": "Wants to learn Spanish",
             "user_id": "kim", "created_at": "2025-03-02T10:00:00Z"},
        ],
    }  # fmt: skip
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    assert "2 facts added" in import_mem0(tmp_path, str(path))
    assert "0 facts added" in import_mem0(tmp_path, str(path))
    facts = facts_of(tmp_path)
    assert [(f.type, f.slot) for f in facts] == [
        ("fact", "fact/diet"),
        ("goal", "goal/learn_spanish"),
    ]
    assert facts[0].details["mem0"]["metadata"] == {"source": "onboarding"}
