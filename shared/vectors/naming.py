"""Keyed hashes of tenants and users (collection names, user keys) and deterministic point ids."""

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


def _keyed(secret_key: str, *parts: str) -> str:
    """32 hex chars of HMAC-SHA256(secret_key, parts joined by \\x1f).

    Keyed so that a name or key seen in Qdrant (logs, dashboards, a leaked listing) reveals
    nothing about the tenant or user and cannot be recomputed from a guessed id without it.
    """
    if not secret_key:
        raise InvalidInput("secret_key must not be empty")
    joined = _SEP.join(parts)
    return hmac.new(secret_key.encode(), joined.encode(), hashlib.sha256).hexdigest()[:32]


def user_key(*, secret_key: str, tenant_id: str, user_id: str) -> str:
    _check_part("tenant_id", tenant_id)
    _check_part("user_id", user_id)
    return _keyed(secret_key, tenant_id, user_id)


def collection_name(*, secret_key: str, tenant_id: str, user_id: str, prefix: str = "tm_") -> str:
    """The per_user layout's collection: prefix + the user's keyed hash."""
    return prefix + user_key(secret_key=secret_key, tenant_id=tenant_id, user_id=user_id)


def tenant_collection_name(*, secret_key: str, tenant_id: str, prefix: str = "tm_") -> str:
    """The partitioned layout's collection: prefix + "t" + the tenant's keyed hash (its
    second part empty, which no user id can be: never equal to a user's key)."""
    _check_part("tenant_id", tenant_id)
    return f"{prefix}t{_keyed(secret_key, tenant_id, '')}"


def point_id(*parts: str) -> str:
    """A UUID (version 5) determined by the parts, so a retried write replaces, never duplicates."""
    if not parts:
        raise InvalidInput("point_id needs at least one part")
    for i, part in enumerate(parts):
        # An empty part is still unambiguous: it keeps its separator in the joined string.
        _check_part(f"part {i}", part, allow_empty=True)
    return str(uuid.uuid5(_POINT_NAMESPACE, _SEP.join(parts)))
