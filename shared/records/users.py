"""A tenant's users by the id their client gives: found, or created on first use."""

from __future__ import annotations

from sqlmodel import Session, select

from shared.db.models import User
from shared.errors import NotFound
from shared.records.ingest import get_or_create_user


def user_for(*, session: Session, tenant_id: str, user_external_id: str) -> User:
    """The tenant's user by their id, created (not committed) when new."""
    user_id = get_or_create_user(session, tenant_id, user_external_id)
    user = session.get(User, user_id)
    assert user is not None
    return user


def find_user(*, session: Session, tenant_id: str, user_external_id: str) -> User:
    user = session.exec(
        select(User).where(User.tenant_id == tenant_id, User.external_id == user_external_id)
    ).first()
    if user is None:
        raise NotFound(
            f"user {user_external_id!r} not found", details={"user_id": user_external_id}
        )
    return user
