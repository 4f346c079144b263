"""SQL full-text (SQLite FTS5 bm25, PostgreSQL ts_rank): a user's messages by their words,
where the vector engine cannot answer or does not hold a message yet."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import text
from sqlmodel import Session

from shared.memory.history.words import keyword_terms

log = logging.getLogger(__name__)


def rebuild_keyword_index(session: Session) -> None:
    """Re-derive SQLite's FTS5 index from `messages` (after a VACUUM or a table rebuild that
    renumbered rowids); PostgreSQL's generated column cannot drift, so it needs nothing."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(text("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')"))
        session.commit()


def _fts5_string(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def fts5_match(terms: Sequence[str], *, user_id: str) -> str:
    """An FTS5 MATCH expression from plain words, for one user's messages.

    Each word is a quoted string, so operators (AND, OR, NOT, NEAR), column filters, '*'
    and brackets in user text are only text; ORed, so a message holding some of the words
    still matches (bm25 ranks by how many and how rare). The words are confined to the
    content column, the user's id to the user_id column.
    """
    words = " OR ".join(_fts5_string(t) for t in terms)
    return f"user_id : {_fts5_string(user_id)} AND content : ({words})"


def websearch_text(terms: Sequence[str]) -> str:
    """Input for PostgreSQL's websearch_to_tsquery (which never raises on syntax): quoted
    words joined by `or`, the same any-word semantics as the FTS5 side (its default is
    all-words, which would miss most natural-language questions)."""
    return " or ".join('"' + t.replace('"', " ") + '"' for t in terms)


# bm25 weights: the words' column counts, the user_id column (in MATCH only to narrow the
# search to one user) does not. The join re-checks the owner: the index is derived data.
# `unindexed`: a message the vector engine does not hold yet (see search_history).
_SQLITE_KEYWORD_SQL = """
SELECT m.id, m.indexed_at IS NULL AS unindexed
FROM messages_fts JOIN messages AS m ON m.rowid = messages_fts.rowid
WHERE messages_fts MATCH :match AND m.user_id = :user_id {exclude}
ORDER BY bm25(messages_fts, 1.0, 0.0), m.created_at DESC, m.id
LIMIT :limit
"""
# content_tsv: to_tsvector('english', content), stored and GIN-indexed (migration 0003).
_PG_KEYWORD_SQL = """
SELECT m.id, m.indexed_at IS NULL AS unindexed
FROM messages AS m, websearch_to_tsquery('english', :match) AS q
WHERE m.user_id = :user_id AND m.content_tsv @@ q {exclude}
ORDER BY ts_rank(m.content_tsv, q) DESC, m.created_at DESC, m.id
LIMIT :limit
"""


def keyword_search(
    *,
    session: Session,
    user_id: str,
    query: str,
    limit: int,
    exclude_session_id: str | None = None,
) -> list[str]:
    """Message ids of the user best matching the query's words, best first (SQL full-text)."""
    rows = _keyword_rows(session, user_id, query, limit, exclude_session_id)
    return [mid for mid, _ in rows]


def _keyword_rows(
    session: Session, user_id: str, query: str, limit: int, exclude_session_id: str | None
) -> list[tuple[str, bool]]:
    """(message id, not yet in the vector engine) of keyword_search's hits."""
    terms = keyword_terms(query)
    if not terms or limit <= 0:
        return []
    dialect = session.get_bind().dialect.name
    params: dict[str, object] = {"user_id": user_id, "limit": limit}
    exclude = ""
    if exclude_session_id:
        exclude = "AND m.session_id != :exclude"
        params["exclude"] = exclude_session_id
    if dialect == "sqlite":
        sql, params["match"] = _SQLITE_KEYWORD_SQL, fts5_match(terms, user_id=user_id)
    elif dialect == "postgresql":
        sql, params["match"] = _PG_KEYWORD_SQL, websearch_text(terms)
    else:
        log.warning("no keyword index for %s; history search uses vectors only", dialect)
        return []
    rows = session.execute(text(sql.format(exclude=exclude)), params).all()
    return [(str(r[0]), bool(r[1])) for r in rows]


# Only messages the vector engine does not hold yet, through their partial index: in the
# steady state (the worker keeping up) none, and full-text is not asked at all.
_ANY_UNINDEXED_SQL = """
SELECT 1 FROM messages AS m WHERE m.user_id = :user_id AND m.indexed_at IS NULL {exclude}
LIMIT 1
"""


def unindexed_keyword_ranks(
    *,
    session: Session,
    user_id: str,
    query: str,
    limit: int,
    exclude_session_id: str | None = None,
) -> dict[str, int]:
    """The messages the engine does not hold yet among full-text's best `limit` of all the
    user's messages, with their rank there: where they would stand by their words had the
    worker indexed them."""
    if not keyword_terms(query):
        return {}
    params: dict[str, object] = {"user_id": user_id}
    exclude = ""
    if exclude_session_id:
        exclude, params["exclude"] = "AND m.session_id != :exclude", exclude_session_id
    if session.execute(text(_ANY_UNINDEXED_SQL.format(exclude=exclude)), params).first() is None:
        return {}
    rows = _keyword_rows(session, user_id, query, limit, exclude_session_id)
    return {mid: rank for rank, (mid, unindexed) in enumerate(rows, start=1) if unindexed}
