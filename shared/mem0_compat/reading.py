"""Reading a mem0 store: its embedded Qdrant folder, or a JSON export of its memories.

mem0's `Memory` keeps each memory as a Qdrant point whose payload holds the text in `data`,
its md5 in `hash`, `created_at`/`updated_at`, the entity ids (`user_id`, `agent_id`,
`run_id`) and the caller's metadata at the top level (mem0/memory/main.py,
`_create_memory`). An export is what `MemoryClient.get_all` or `Memory.get_all` answers:
`{"results": [{"id", "memory", "user_id", "metadata", "created_at", …}]}`, or a bare list.
qdrant-client (a tiermem dependency) reads the folder; mem0ai is not needed.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shared.errors import InvalidInput, Unavailable
from shared.mem0_compat.memories import ENTITY_KEYS, owner_of
from shared.mem0_compat.writing import Mem0Record

# Payload keys that are mem0's own bookkeeping, not the caller's metadata.
_OWN_KEYS = {
    *ENTITY_KEYS,
    *("data", "memory", "hash", "created_at", "updated_at", "text_lemmatized"),
    *("actor_id", "role", "id", "score", "metadata", "categories"),
}


def read_store(
    source: Path, *, collection: str = "mem0", user_id: str | None = None
) -> list[Mem0Record]:
    """Every memory in `source` (a folder: mem0's embedded Qdrant; a file: an export)."""
    if source.is_dir():
        items = list(_qdrant_payloads(source, collection))
    else:
        items = list(_export_items(source))
    return [_record(item, user_id) for item in items]


def _qdrant_payloads(folder: Path, collection: str) -> Iterator[dict[str, Any]]:
    from qdrant_client import QdrantClient

    try:
        client = QdrantClient(path=str(folder))
    except RuntimeError as exc:  # the folder lock: mem0 (or another reader) has it open
        raise Unavailable(f"{folder} is open in another process: {exc}") from exc
    try:
        if not client.collection_exists(collection):
            names = [c.name for c in client.get_collections().collections]
            raise InvalidInput(
                f"no collection {collection!r} in {folder}; it has {names}: pass --collection"
            )
        offset: Any = None
        while True:
            points, offset = client.scroll(
                collection, limit=256, offset=offset, with_payload=True, with_vectors=False
            )
            for point in points:
                yield {**(point.payload or {}), "id": str(point.id)}
            if offset is None:
                return
    finally:
        client.close()


def _export_items(path: Path) -> Iterator[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path}: not a mem0 export (JSON) nor a Qdrant folder: {exc}") from exc
    items = data.get("results", data.get("memories")) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InvalidInput(f"{path}: expected a list of memories, or {{'results': [...]}}")
    yield from (i for i in items if isinstance(i, dict))


def _record(item: dict[str, Any], user_id: str | None) -> Mem0Record:
    text = item.get("memory") or item.get("data")
    if not isinstance(text, str) or not text.strip() or not item.get("id"):
        raise InvalidInput(f"memory without an id or text: {str(item)[:200]}")
    metadata = {k: v for k, v in item.items() if k not in _OWN_KEYS}
    if isinstance(item.get("metadata"), dict):
        metadata.update(item["metadata"])
    return Mem0Record(
        id=str(item["id"]),
        memory=text,
        user_id=user_id or owner_of(item),
        created_at=_when(item.get("created_at")),
        hash=item.get("hash"),
        metadata=metadata,
    )


def _when(value: Any) -> dt.datetime:
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
        except ValueError:
            pass
    return dt.datetime.now(dt.UTC)
