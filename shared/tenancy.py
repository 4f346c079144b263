"""Tenants and API keys: stored hashed; an app key reaches one tenant, admin reaches ops."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from shared.config import Settings
from shared.db.models import ApiKey, Tenant
from shared.errors import Conflict, Forbidden, NotFound, Unauthorized

Scope = Literal["app", "admin"]


@dataclass(frozen=True)
class Principal:
    scope: Scope
    tenant_id: str | None  # None for the configured admin key

    def require_admin(self) -> None:
        if self.scope != "admin":
            raise Forbidden("this endpoint needs an admin key", details={"scope": self.scope})


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyCache:
    """Valid keys seen recently, by hash: the ingest path's key lookup costs no SQL read.

    Only successes are kept, so a key created in another process works at once; a revoked
    one keeps working for up to `ttl_s` in a process that has it cached.
    """

    MAX_ENTRIES = 10_000

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, key_hash: str) -> Principal | None:
        hit = self._entries.get(key_hash)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key_hash: str, principal: Principal) -> None:
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()  # rare; a full table is cheaper to rebuild than to age
        self._entries[key_hash] = (time.monotonic() + self.ttl_s, principal)


def missing_key() -> Unauthorized:
    return Unauthorized("missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")


def authenticate(*, session: Session, settings: Settings, key: str | None) -> Principal:
    if not key:
        raise missing_key()
    admin_key = settings.admin_key
    if admin_key and hmac.compare_digest(key.encode(), admin_key.encode()):
        return Principal(scope="admin", tenant_id=None)
    row = session.exec(select(ApiKey).where(ApiKey.key_hash == hash_key(key))).first()
    if row is None or row.revoked_at is not None:
        raise Unauthorized("unknown or revoked API key")
    return Principal(scope="admin" if row.scope == "admin" else "app", tenant_id=row.tenant_id)


def get_tenant_by_name(*, session: Session, name: str) -> Tenant | None:
    return session.exec(select(Tenant).where(Tenant.name == name)).first()


def create_tenant(*, session: Session, name: str) -> Tenant:
    tenant = Tenant(name=name)
    session.add(tenant)
    try:
        session.commit()
    except IntegrityError as exc:
        session.rollback()
        raise Conflict(f"tenant {name!r} already exists") from exc
    session.refresh(tenant)
    return tenant


def create_api_key(
    *,
    session: Session,
    tenant_id: str | None,
    scope: Scope = "app",
    name: str = "",
    key: str | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key; the plaintext is returned once and never again."""
    if scope == "app" and tenant_id is None:
        raise NotFound("an app key needs a tenant")
    if tenant_id is not None and session.get(Tenant, tenant_id) is None:
        raise NotFound(f"tenant {tenant_id} not found")
    plaintext = key or f"tm_{secrets.token_urlsafe(32)}"
    row = ApiKey(
        key_hash=hash_key(plaintext),
        prefix=plaintext[:8],
        tenant_id=tenant_id,
        scope=scope,
        name=name,
    )
    session.add(row)
    session.commit()
    session.refresh(row)
    return row, plaintext


def ensure_dev_tenant(*, session: Session, settings: Settings) -> None:
    """Development only: make the README's `dev-app-key` work on a fresh database."""
    dev_key = settings.dev_app_key
    if not dev_key:
        return
    tenant = get_tenant_by_name(session=session, name=settings.auth.dev_tenant)
    if tenant is None:
        try:
            tenant = create_tenant(session=session, name=settings.auth.dev_tenant)
        except Conflict:  # another process created it first
            tenant = get_tenant_by_name(session=session, name=settings.auth.dev_tenant)
            assert tenant is not None
    exists = session.exec(select(ApiKey).where(ApiKey.key_hash == hash_key(dev_key))).first()
    if exists is None:
        try:
            create_api_key(session=session, tenant_id=tenant.id, name="dev", key=dev_key)
        except IntegrityError:
            session.rollback()
