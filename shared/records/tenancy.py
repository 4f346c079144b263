"""Tenants, API keys (stored hashed) and who reaches what: app, tenant admin, operator."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from shared.config import Settings
from shared.db.models import ApiKey, Tenant
from shared.errors import Conflict, Forbidden, NotFound, Unauthorized
from shared.inputs import RequestModel

Scope = Literal["app", "admin"]  # what a stored key is: stored keys always have a tenant
Role = Literal["app", "tenant_admin", "operator"]

OPERATOR_ONLY = (
    "this endpoint needs the operator's admin key (TIERMEM_AUTH__ADMIN_KEY): it spans every "
    "tenant and the shared workers, beyond a tenant admin key"
)


@dataclass(frozen=True)
class Principal:
    """Who is calling, and so what they reach; every authorization decision is made here.

    - `app` key: its tenant's users, sessions and jobs.
    - `tenant_admin` key (a stored key of scope admin): all that, plus its own tenant's keys,
      replays and ops rows. It never reaches another tenant.
    - `operator` (TIERMEM_AUTH__ADMIN_KEY, from settings only): every tenant, tenant
      creation, the shared workers and queues, /metrics; no user data (that needs an app key).
    """

    role: Role
    tenant_id: str | None  # None only for the operator

    @property
    def scope(self) -> Scope:
        return "app" if self.role == "app" else "admin"

    @property
    def visible_tenant(self) -> str | None:
        """The tenant whose objects (jobs, replays, runs) this caller may see; None: all."""
        return None if self.role == "operator" else self.tenant_id

    def user_tenant(self) -> str:
        """The tenant whose users this caller reaches: an app or tenant admin key's own; the
        operator key reaches no user data."""
        if self.tenant_id is None:
            raise Forbidden(
                "user data is reached with an app key of the user's tenant, not the admin key; "
                "create one with POST /v1/admin/tenants or `tiermem tenants key NAME`"
            )
        return self.tenant_id

    def require_admin(self) -> None:
        if self.role == "app":
            raise Forbidden(
                "this endpoint needs an admin key: a tenant admin key (`tiermem tenants key "
                "NAME --admin`) or the operator key",
                details={"scope": self.scope},
            )

    def require_operator(self) -> None:
        if self.role != "operator":
            raise Forbidden(OPERATOR_ONLY, details={"scope": self.scope})

    def reach_tenant(self, tenant_id: str | None) -> str | None:
        """The tenant an admin action on `tenant_id` (None: every tenant) may cover: the
        operator's as asked; a tenant admin's is always its own, and naming another is 403."""
        self.require_admin()
        if self.role == "operator":
            return tenant_id
        if tenant_id is not None and tenant_id != self.tenant_id:
            raise Forbidden(
                "a tenant admin key reaches only its own tenant",
                details={"tenant_id": tenant_id, "own_tenant_id": self.tenant_id},
            )
        return self.tenant_id


class TenantIn(RequestModel):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


class KeyIn(RequestModel):
    name: str = Field(default="", max_length=100)
    scope: Literal["app", "admin"] = "app"


class TenantPublic(BaseModel):
    id: str
    name: str


class KeyCreated(BaseModel):
    id: str
    tenant_id: str | None
    scope: str
    key: str = Field(description="shown once; only its hash is stored")


class TenantCreated(BaseModel):
    tenant: TenantPublic
    app_key: KeyCreated


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
        return Principal(role="operator", tenant_id=None)
    row = session.exec(select(ApiKey).where(ApiKey.key_hash == hash_key(key))).first()
    # A stored key without a tenant (none is made any more) would otherwise be an operator.
    if row is None or row.revoked_at is not None or row.tenant_id is None:
        raise Unauthorized("unknown or revoked API key")
    role: Role = "tenant_admin" if row.scope == "admin" else "app"
    return Principal(role=role, tenant_id=row.tenant_id)


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
    tenant_id: str,
    scope: Scope = "app",
    name: str = "",
    key: str | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key; the plaintext is returned once and never again."""
    if session.get(Tenant, tenant_id) is None:
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
