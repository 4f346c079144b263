"""Message spans: which messages a tier entry covers, their union, and the partition check."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SeqRange:
    """Messages first_seq..last_seq (inclusive) of one session (its internal id), with the
    ids at both ends. Stored under the key "session_id" (as_dict, of)."""

    chat_id: str
    first_seq: int
    last_seq: int
    first_message_id: str
    last_message_id: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.chat_id,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "first_message_id": self.first_message_id,
            "last_message_id": self.last_message_id,
        }

    @classmethod
    def of(cls, data: dict[str, Any]) -> SeqRange:
        return cls(
            chat_id=str(data["session_id"]),
            first_seq=int(data["first_seq"]),
            last_seq=int(data["last_seq"]),
            first_message_id=str(data["first_message_id"]),
            last_message_id=str(data["last_message_id"]),
        )


Span = tuple[SeqRange, ...]


def union(spans: Iterable[Span]) -> Span:
    """The span of consecutive entries merged into one.

    Entries are only ever merged with their neighbours, so two ranges of one session that
    follow each other leave no message between them and join into one range.
    """
    out: list[SeqRange] = []
    for span in spans:
        for r in span:
            last = out[-1] if out else None
            if last is not None and last.chat_id == r.chat_id and r.first_seq > last.last_seq:
                out[-1] = SeqRange(
                    last.chat_id,
                    last.first_seq,
                    r.last_seq,
                    last.first_message_id,
                    r.last_message_id,
                )
            else:
                out.append(r)
    return tuple(out)


def own_range(span: Span, chat_id: str) -> SeqRange | None:
    ranges = [r for r in span if r.chat_id == chat_id]
    if not ranges:
        return None
    return SeqRange(
        chat_id,
        ranges[0].first_seq,
        ranges[-1].last_seq,
        ranges[0].first_message_id,
        ranges[-1].last_message_id,
    )


def _intervals(ranges: Iterable[SeqRange]) -> dict[str, list[tuple[int, int]]]:
    """Per session, sorted intervals with touching ones joined ([0,3] + [4,9] → [0,9])."""
    by_session: dict[str, list[tuple[int, int]]] = {}
    for r in ranges:
        by_session.setdefault(r.chat_id, []).append((r.first_seq, r.last_seq))
    for chat_id, items in by_session.items():
        items.sort()
        joined: list[tuple[int, int]] = []
        for first, last in items:
            if joined and first <= joined[-1][1] + 1:
                joined[-1] = (joined[-1][0], max(joined[-1][1], last))
            else:
                joined.append((first, last))
        by_session[chat_id] = joined
    return by_session


def partition_problems(
    spans_in_order: Sequence[Span],
    *,
    session_id: str,
    message_seqs: Sequence[int],
    seeded: Sequence[SeqRange] = (),
) -> list[str]:
    """What breaks "every message is covered by exactly one entry of exactly one tier".

    `spans_in_order` are the spans of every entry, head → bulks → topics → current, each
    tier oldest first; `message_seqs` are the session's messages; `seeded` the parent
    ranges a continued session was seeded with. An empty list means the state is sound.
    """
    problems: list[str] = []
    covered: dict[int, int] = {}
    own_order: list[tuple[int, int]] = []
    inherited: list[SeqRange] = []
    for span in spans_in_order:
        for r in span:
            if r.first_seq > r.last_seq:
                problems.append(f"empty range {r.first_seq}..{r.last_seq}")
            if r.chat_id != session_id:
                inherited.append(r)
                continue
            own_order.append((r.first_seq, r.last_seq))
    seqs = sorted(message_seqs)
    # Each message in exactly one range: sweep the sorted seqs against the ranges.
    for first, last in own_order:
        lo = bisect_left(seqs, first)
        hi = bisect_left(seqs, last + 1)
        for seq in seqs[lo:hi]:
            covered[seq] = covered.get(seq, 0) + 1
    missing = [s for s in seqs if s not in covered]
    twice = sorted(s for s, n in covered.items() if n > 1)
    if missing:
        problems.append(f"messages not covered: {missing[:10]}")
    if twice:
        problems.append(f"messages covered more than once: {twice[:10]}")
    for (_, prev_last), (first, _) in zip(own_order, own_order[1:], strict=False):
        if first <= prev_last:
            problems.append(f"entries out of order at seq {first}")
            break
    # Parents' messages: the seed ranges, each covered once, none lost and none invented.
    seen: dict[str, list[tuple[int, int]]] = {}
    for r in inherited:
        for a, b in seen.get(r.chat_id, []):
            if r.first_seq <= b and a <= r.last_seq:
                problems.append(f"parent range {r.first_seq}..{r.last_seq} covered twice")
        seen.setdefault(r.chat_id, []).append((r.first_seq, r.last_seq))
    if _intervals(inherited) != _intervals(seeded):
        problems.append(
            "the parent ranges covered differ from the ranges the session was seeded with"
        )
    return problems
