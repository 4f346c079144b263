"""Collection names from a keyed hash of (tenant, user) and deterministic point ids."""

from __future__ import annotations

import hashlib
import hmac
import uuid

from shared.errors import InvalidInput

_SEP = "\x1f"  # ASCII unit separator: never part of a real id, so joined parts cannot collide
# Fixed forever: changing it changes every point id and duplicates facts on the next write.
_POINT_NAMESPACE = uuid.UUID("6f1c2a9e-4b7d-5e3a-9c1f-2d8e7a4b6c05")


def _check_part(name: str, value: str, *, allow_empty: bool = False) -> None:
    if not value and not allow_empty:
        raise InvalidInput(f"{name} must not be empty", details={"field": name})
    if _SEP in value:
        # Would make ("a\x1fb", "c") and ("a", "b\x1fc") hash alike.
        raise InvalidInput(
            f"{name} must not contain the \\x1f control character", details={"field": name}
        )


def collection_name(*, secret_key: str, tenant_id: str, user_id: str, prefix: str = "tm_") -> str:
    """prefix + 32 hex chars of HMAC-SHA256(secret_key, tenant \\x1f user).

    Keyed so that a name seen in Qdrant (logs, dashboards, a leaked listing) reveals
    nothing about the user and cannot be recomputed from a guessed id without the key.
    """
    if not secret_key:
        raise InvalidInput("secret_key must not be empty")
    _check_part("tenant_id", tenant_id)
    _check_part("user_id", user_id)
    digest = hmac.new(
        secret_key.encode(), f"{tenant_id}{_SEP}{user_id}".encode(), hashlib.sha256
    ).hexdigest()
    return f"{prefix}{digest[:32]}"


def point_id(*parts: str) -> str:
    """A UUID (version 5) determined by the parts, so a retried write replaces, never duplicates."""
    if not parts:
        raise InvalidInput("point_id needs at least one part")
    for i, part in enumerate(parts):
        # An empty part is still unambiguous: it keeps its separator in the joined string.
        _check_part(f"part {i}", part, allow_empty=True)
    return str(uuid.uuid5(_POINT_NAMESPACE, _SEP.join(parts)))
