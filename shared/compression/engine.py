"""The 50/30/20 loop, pure: a tier state in, the new tier state and the run's numbers out.

No database here: the caller hands in the state (head, bulks, topics, current — current
being the session's newest messages verbatim) and an `on_step` hook that persists each
step (and may raise StaleState to stop). Termination: every step either removes at least
one entry from the tier it works on without adding to it, or re-compresses the single
bulk to fewer tokens; a summary is always shorter than its input, and the loop is capped
at `max_iterations` besides.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from shared.compression.budget import (
    SPLIT_TIERS,
    SUMMARY_LABEL,
    SUMMARY_ROLE,
    Budget,
    SplitTier,
    Tier,
    head_allowance,
    label_overhead,
    line_cost,
)
from shared.compression.offline import truncate_tokens
from shared.compression.spans import union
from shared.compression.summary import (
    Level,
    Summarizer,
    SummaryItem,
    SummaryOutput,
    SummaryRequest,
)
from shared.compression.tiers import (
    CompressionResult,
    Entry,
    RunStats,
    StaleState,
    Step,
    StepKind,
    TierState,
    budget_for,
    new_entry_id,
    over_budget,
)
from shared.config import CompressionSettings
from shared.tokens import count_tokens

log = logging.getLogger(__name__)

# A chunk of current messages is grown to at least this many summary floors of text, so
# a summarizer call is never spent on a line or two.
_MIN_CHUNK_FLOORS = 4


def compress(
    state: TierState,
    *,
    config: CompressionSettings,
    summarizer: Summarizer,
    fallback: Summarizer,
    focus: str | None = None,
    force: bool = False,
    on_step: Callable[[Step], None] | None = None,
    run_id: str | None = None,
) -> CompressionResult:
    """Run the loop on `state` until every tier fits its share of the target.

    Below the trigger (and not `force`) nothing happens. `fallback` must be the offline
    extractive summarizer (or another that always keeps to max_tokens).
    """
    compression = _CompressionRun(config, summarizer, fallback, focus, on_step, run_id)
    return compression.run(state, force=force)


class _CompressionRun:
    """One run of the loop: its settings, summarizers, numbers and the state committed last."""

    def __init__(
        self,
        cfg: CompressionSettings,
        summarizer: Summarizer,
        fallback: Summarizer,
        focus: str | None,
        on_step: Callable[[Step], None] | None,
        run_id: str | None,
    ) -> None:
        self.cfg = cfg
        self.summarizer = summarizer
        self.fallback = fallback
        self.focus = focus
        self.on_step = on_step
        self.run_id = run_id
        self.stats = RunStats()
        self.overhead = label_overhead(SUMMARY_LABEL)
        self.committed: TierState | None = None

    def run(self, state: TierState, *, force: bool) -> CompressionResult:
        started = time.perf_counter()
        budget = budget_for(state, self.cfg)
        stats = self.stats
        stats.tokens_before = state.history_cost(budget.reserve)
        stats.trigger = budget.trigger
        if not force and not self.cfg.enabled:
            stats.status = "disabled"
        elif not force and stats.tokens_before <= budget.trigger:
            stats.status = "below_trigger"
        else:
            self.committed = state
            try:
                state = self._loop(state)
            except StaleState as exc:
                state = self.committed or state  # what the last persisted step left
                stats.status = "stale"
                stats.detail = str(exc) or "another run changed the tiers first"
        budget = budget_for(state, self.cfg)
        stats.target = budget.target
        stats.tokens_after = state.history_cost(budget.reserve)
        stats.total_ms = (time.perf_counter() - started) * 1000
        stats.engine_ms = max(0.0, stats.total_ms - stats.summarizer_ms)
        return CompressionResult(state=state, stats=stats, budget=budget)

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self, state: TierState) -> TierState:
        stats = self.stats
        if not state.head_decided:
            state = self._decide_head(state)
        while True:
            budget = budget_for(state, self.cfg)
            over = over_budget(state, budget)
            if not over:
                stats.status = "done"
                return state
            if "bulks" in over and plan_bulks(state, budget, self.cfg) is None:
                # Everything above flows down into bulks, so nothing else can help.
                stats.status = "cannot_fit"
                stats.detail = (
                    f"the oldest history cannot get shorter than {state.cost('bulks')} tokens "
                    f"(min_summary_tokens={self.cfg.min_summary_tokens}) and the bulks tier "
                    f"has {budget.bulks}: raise context_limit_tokens or bulks_share"
                )
                return state
            if stats.iterations >= self.cfg.max_iterations:
                stats.status = "partial"
                stats.detail = f"stopped after max_iterations={self.cfg.max_iterations}"
                return state
            tier = max(over, key=lambda t: (_ratio(state.cost(t), budget.of(t)), -_rank(t)))
            if tier == "current":
                state = self._from_current(state, budget)
            elif tier == "topics":
                state = self._from_topics(state, budget)
            else:
                state = self._within_bulks(state, budget)
            stats.iterations += 1

    # -- pinned head -------------------------------------------------------------------------

    def _decide_head(self, state: TierState) -> TierState:
        """Pin the first exchange (messages through the first assistant reply after the
        first user message) once, if it is the session's start and short enough."""
        pin: tuple[Entry, ...] = ()
        if self.cfg.pin_head and not state.bulks and not state.topics:
            end = _first_exchange_end(state.current)
            if end is None:
                return state  # no reply yet: decide on a later run
            candidate = state.current[: end + 1]
            if sum(e.cost for e in candidate) <= head_allowance(self.cfg):
                pin = candidate
        after = dataclasses.replace(
            state, head=pin, current=state.current[len(pin) :], head_decided=True
        )
        record = {"kind": "pin_head", "messages": len(pin), "tokens": sum(e.cost for e in pin)}
        return self._commit("pin_head", "current", "head", pin, pin, state, after, record)

    # -- steps -------------------------------------------------------------------------------

    def _from_current(self, state: TierState, budget: Budget) -> TierState:
        """The oldest current messages become one topic block (or move down verbatim when
        there is too little text to summarize)."""
        msgs = state.current
        need = state.cost("current") - budget.current
        floor = self.cfg.min_summary_tokens
        taken_cost = taken_tokens = n = 0
        while n < len(msgs):
            nxt = msgs[n]
            if n and taken_tokens + nxt.tokens > self.cfg.chunk_max_tokens:
                break
            enough = taken_cost >= need and taken_tokens >= _MIN_CHUNK_FLOORS * floor
            # finish the exchange: a user message goes with the reply right after it
            finishing = n > 0 and msgs[n - 1].role == "user" and nxt.role == "assistant"
            if enough and not finishing:
                break
            taken_cost += nxt.cost
            taken_tokens += nxt.tokens
            n += 1
        chunk = msgs[:n]
        rest = dataclasses.replace(state, current=msgs[n:])
        return self._down(rest, state, chunk, "current", "topics", "topic", self.cfg.topic_ratio)

    def _from_topics(self, state: TierState, budget: Budget) -> TierState:
        """The oldest topic blocks are merged into one bulk."""
        topics = state.topics
        need = state.cost("topics") - budget.topics
        taken_cost = taken_tokens = n = 0
        while n < len(topics) and (n == 0 or taken_cost < need):
            if n and taken_tokens + topics[n].tokens > self.cfg.chunk_max_tokens:
                break
            taken_cost += topics[n].cost
            taken_tokens += topics[n].tokens
            n += 1
        chunk = topics[:n]
        rest = dataclasses.replace(state, topics=topics[n:])
        return self._down(rest, state, chunk, "topics", "bulks", "bulk", self.cfg.bulk_ratio)

    def _down(
        self,
        rest: TierState,
        before: TierState,
        chunk: tuple[Entry, ...],
        source: Tier,
        dest: Literal["topics", "bulks"],
        level: Level,
        ratio: float,
    ) -> TierState:
        tokens = sum(e.tokens for e in chunk)
        input_cost = sum(e.cost for e in chunk)
        max_tokens = self._max_tokens(tokens, input_cost, ratio)
        existing = rest.entries(dest)
        position = existing[-1].position + 1 if existing else 0
        if tokens <= self.cfg.min_summary_tokens or max_tokens < 1:
            # Too little text for a summary to be shorter: move it down as it is.
            # A current message becomes a row of its own; entries of the tiers keep theirs.
            moved = tuple(
                dataclasses.replace(
                    e, id=new_entry_id() if source == "current" else e.id, position=position + i
                )
                for i, e in enumerate(chunk)
            )
            after = _with_tier(rest, dest, existing + moved)
            record = {
                "kind": "move",
                "source": source,
                "dest": dest,
                "entries": len(chunk),
                "tokens_in": input_cost,
                "tokens_out": input_cost,
            }
            return self._commit("move", source, dest, chunk, moved, before, after, record)
        entry, record = self._summarize(chunk, level, max_tokens, input_cost, position)
        after = _with_tier(rest, dest, (*existing, entry))
        record.update(source=source, dest=dest)
        return self._commit("summarize", source, dest, chunk, (entry,), before, after, record)

    def _within_bulks(self, state: TierState, budget: Budget) -> TierState:
        """The oldest bulks are re-compressed together into one; a single bulk alone."""
        plan = plan_bulks(state, budget, self.cfg)
        assert plan is not None  # the audit reports cannot_fit before asking for this
        chunk, max_tokens = plan
        bulks = state.bulks
        input_cost = sum(e.cost for e in chunk)
        entry, record = self._summarize(chunk, "bulk", max_tokens, input_cost, chunk[0].position)
        after = dataclasses.replace(state, bulks=(entry, *bulks[len(chunk) :]))
        record.update(source="bulks", dest="bulks")
        return self._commit("summarize", "bulks", "bulks", chunk, (entry,), state, after, record)

    # -- sizes -------------------------------------------------------------------------------

    def _max_tokens(self, tokens: int, input_cost: int, ratio: float) -> int:
        return max_summary_tokens(tokens, input_cost, ratio, self.cfg)

    # -- one summarizer call, with the fallback ----------------------------------------------

    def _summarize(
        self,
        chunk: tuple[Entry, ...],
        level: Level,
        max_tokens: int,
        input_cost: int,
        position: int,
    ) -> tuple[Entry, dict[str, Any]]:
        stats = self.stats
        items = tuple(
            SummaryItem(
                label=e.label if e.kind == "message" else "Summary", text=e.text, kind=e.kind
            )
            for e in chunk
        )
        request = SummaryRequest(level=level, items=items, max_tokens=max_tokens, focus=self.focus)
        record: dict[str, Any] = {
            "kind": "summarize",
            "level": level,
            "entries": len(chunk),
            "tokens_in": input_cost,
            "max_tokens": max_tokens,
        }
        output, text, problem = self._call(self.summarizer, request, input_cost)
        if problem is not None:
            stats.fallbacks += 1
            record["fallback"] = problem[:300]
            log.info(
                "summary rejected, using the offline summarizer",
                extra={"problem": problem[:300], "level": level, "run_id": self.run_id},
            )
            limit = max_tokens
            for _ in range(3):
                output, text, still = self._call(
                    self.fallback, dataclasses.replace(request, max_tokens=limit), input_cost
                )
                if still is None or limit <= 1:
                    break
                limit -= 1  # BPE at the label boundary: ask for one token less
            if still is not None:
                # A fallback that does not keep to max_tokens: cut its text to fit.
                text = truncate_tokens(text, max(1, limit - 1))
        tokens = count_tokens(text)
        entry = Entry(
            id=new_entry_id(),
            kind="summary",
            role=SUMMARY_ROLE,
            speaker=None,
            label=SUMMARY_LABEL,
            text=text,
            tokens=tokens,
            cost=line_cost(SUMMARY_LABEL, text),
            level=max(2, max(e.level for e in chunk) + 1) if level == "bulk" else 1,
            spans=union(e.spans for e in chunk),
            position=position,
            message_count=sum(e.message_count for e in chunk),
            span_end_at=chunk[-1].span_end_at,
            summarizer=output.summarizer,
            model=output.model,
            created_by_run=self.run_id,
        )
        record.update(tokens_out=entry.cost, summarizer=output.summarizer)
        stats.summarizer_input_tokens += sum(e.tokens for e in chunk)
        stats.summarizer_output_tokens += tokens
        return entry, record

    def _call(
        self, summarizer: Summarizer, request: SummaryRequest, input_cost: int
    ) -> tuple[SummaryOutput, str, str | None]:
        stats = self.stats
        started = time.perf_counter()
        try:
            output = summarizer.summarize(request)
        except Exception as exc:  # a broken summarizer costs one step its LLM, not the run
            output = SummaryOutput(
                text="", summarizer=summarizer.name, error=f"{type(exc).__name__}: {exc}"
            )
        finally:
            stats.summarizer_ms += (time.perf_counter() - started) * 1000
        stats.llm_calls += output.llm_calls
        stats.prompt_tokens += output.prompt_tokens
        stats.completion_tokens += output.completion_tokens
        text = output.text.strip() if isinstance(output.text, str) else ""
        return output, text, _problem(output, text, request.max_tokens, input_cost)

    # -- persisting --------------------------------------------------------------------------

    def _commit(
        self,
        kind: StepKind,
        source: Tier,
        dest: Tier,
        removed: tuple[Entry, ...],
        added: tuple[Entry, ...],
        before: TierState,
        after: TierState,
        record: dict[str, Any],
    ) -> TierState:
        step = Step(
            index=len(self.stats.steps),
            kind=kind,
            source=source,
            dest=dest,
            removed=removed,
            added=added,
            before=before,
            after=after,
            record=record,
        )
        if self.on_step is not None:
            started = time.perf_counter()
            try:
                self.on_step(step)
            finally:
                self.stats.persist_ms += (time.perf_counter() - started) * 1000
        self.stats.steps.append(record)
        self.committed = after
        return after


def _want(tokens: int, ratio: float, cfg: CompressionSettings) -> int:
    return min(cfg.max_summary_tokens, max(cfg.min_summary_tokens, math.floor(tokens * ratio)))


def max_summary_tokens(tokens: int, input_cost: int, ratio: float, cfg: CompressionSettings) -> int:
    """How long a summary of `tokens` tokens (whose lines cost `input_cost`) may be: its
    ratio of the input within the floor and cap, and its line must cost less than the
    lines it replaces (one token of slack for BPE joining label and text differently)."""
    return min(_want(tokens, ratio, cfg), input_cost - label_overhead(SUMMARY_LABEL) - 2)


def plan_bulks(
    state: TierState, budget: Budget, cfg: CompressionSettings
) -> tuple[tuple[Entry, ...], int] | None:
    """The oldest bulks to re-compress together and the summary's max length, or None when
    the bulks cannot get any shorter: the session's minimum content."""
    bulks = state.bulks
    if not bulks:
        return None
    ratio = cfg.bulk_ratio
    overhead = label_overhead(SUMMARY_LABEL)
    if len(bulks) == 1:
        only = bulks[0]
        if only.tokens <= cfg.min_summary_tokens:
            return None
        room = budget.bulks - overhead - 1  # aim straight at the budget when it is larger
        want = max(cfg.min_summary_tokens, min(math.floor(only.tokens * ratio), room))
        limit = min(want, cfg.max_summary_tokens, only.tokens - 1, only.cost - overhead - 2)
        return ((only,), limit) if limit >= 1 else None
    need = state.cost("bulks") - budget.bulks
    taken_cost = taken_tokens = n = 0
    while n < len(bulks):
        saved = taken_cost - overhead - _want(taken_tokens, ratio, cfg)
        if n >= 2 and saved >= need:
            break
        if n >= 2 and taken_tokens + bulks[n].tokens > cfg.chunk_max_tokens:
            break
        taken_cost += bulks[n].cost
        taken_tokens += bulks[n].tokens
        n += 1
    # Tiny verbatim entries: take more until a summary can be shorter than them.
    while n < len(bulks) and max_summary_tokens(taken_tokens, taken_cost, ratio, cfg) < 1:
        taken_cost += bulks[n].cost
        taken_tokens += bulks[n].tokens
        n += 1
    limit = max_summary_tokens(taken_tokens, taken_cost, ratio, cfg)
    return (bulks[:n], limit) if limit >= 1 else None


def _problem(output: SummaryOutput, text: str, max_tokens: int, input_cost: int) -> str | None:
    if output.error:
        return output.error
    if not text:
        return "the summary is empty"
    tokens = count_tokens(text)
    if tokens > max_tokens:
        return f"the summary has {tokens} tokens; at most {max_tokens} were asked for"
    if line_cost(SUMMARY_LABEL, text) >= input_cost:
        return "the summary is not shorter than its input"
    return None


def _with_tier(
    state: TierState, tier: Literal["topics", "bulks"], entries: tuple[Entry, ...]
) -> TierState:
    if tier == "topics":
        return dataclasses.replace(state, topics=entries)
    return dataclasses.replace(state, bulks=entries)


def _first_exchange_end(messages: Sequence[Entry]) -> int | None:
    seen_user = False
    for i, e in enumerate(messages):
        if e.role == "user":
            seen_user = True
        elif e.role == "assistant" and seen_user:
            return i
    return None


def _ratio(cost: int, budget: int) -> float:
    return cost / budget if budget > 0 else math.inf


def _rank(tier: SplitTier) -> int:
    return SPLIT_TIERS.index(tier)
