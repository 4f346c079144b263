"""Ids stored before the id rule was a full match (e.g. "abc\\n"): found and renamed to ids
the API can reach, so their owner can read, export and erase what is stored under them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, col, select

from shared.db.models import ChatSession, Message, User
from shared.inputs import ID_CHARS, ID_FIRST_CHARS, ID_MAX_LENGTH, is_identifier

_NOT_ALLOWED = re.compile(f"[^{ID_CHARS}]+")
_NOT_FIRST = re.compile(f"^[^{ID_FIRST_CHARS}]+")


@dataclass(frozen=True, kw_only=True)
class IdRepair:
    kind: str  # user | session | message
    row_id: str
    scope: str  # the tenant (users, sessions) or the session (messages) the id is unique in
    old: str
    new: str


def reachable_form(value: str) -> str:
    """The nearest id the rule allows: outer whitespace gone, other characters as '_'."""
    cleaned = _NOT_ALLOWED.sub("_", value.strip())
    cleaned = _NOT_FIRST.sub("", cleaned)
    return (cleaned or "id")[:ID_MAX_LENGTH]


def _free(wanted: str, taken: set[str]) -> str:
    candidate, n = wanted, 1
    while candidate in taken:
        suffix = f"-{n}"
        candidate = wanted[: ID_MAX_LENGTH - len(suffix)] + suffix
        n += 1
    taken.add(candidate)
    return candidate


# Each table with a client-given id, and the column its id is unique within.
_TABLES: dict[str, tuple[Any, Any]] = {
    "user": (User, User.tenant_id),
    "session": (ChatSession, ChatSession.tenant_id),
    "message": (Message, Message.session_id),
}


def find_unreachable_ids(session: Session) -> list[IdRepair]:
    """Every stored user, session and message id the id rule refuses, with the id it would be
    renamed to (unique where the old one was: per tenant, or per session for messages)."""
    repairs: list[IdRepair] = []
    for kind, (model, scope_column) in _TABLES.items():
        # Python's rule, not SQL's: the databases' regex dialects differ, and reading the ids
        # once is cheap beside what a repair is for.
        stored = session.exec(
            select(model.id, model.external_id, scope_column).where(
                col(model.external_id).is_not(None)
            )
        ).all()
        taken: dict[str, set[str]] = {}
        for _, old, scope in stored:
            taken.setdefault(scope, set()).add(old)
        for row_id, old, scope in stored:
            if not is_identifier(old):
                new = _free(reachable_form(old), taken[scope])
                repairs.append(IdRepair(kind=kind, row_id=row_id, scope=scope, old=old, new=new))
    return repairs


def apply_repairs(session: Session, repairs: list[IdRepair]) -> None:
    """Rename in one transaction (committed): all of them, or none."""
    for repair in repairs:
        model = _TABLES[repair.kind][0]
        session.execute(
            update(model)
            .where(col(model.id) == repair.row_id, col(model.external_id) == repair.old)
            .values(external_id=repair.new)
        )
    session.commit()
