"""When to send a request again: 429, 503 and failed connections, with exponential backoff,
full jitter and the server's Retry-After; never another 4xx."""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

log = logging.getLogger(__name__)
RETRY_STATUSES = frozenset({429, 503})
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
# The request surely never reached the server: safe to send again whatever the method.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """`max_attempts` counts the first one (1 = never retry). The n-th retry waits a random
    time up to `backoff_s` × 2ⁿ⁻¹ (at most `max_backoff_s`), and never less than the
    answer's Retry-After; a Retry-After above `max_retry_after_s` is not waited for: the
    error is raised with its `retry_after` for the caller to decide."""

    max_attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    random: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def delay(
        self, attempt: int, outcome: httpx.Response | httpx.TransportError, method: str
    ) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None: this outcome stands."""
        if isinstance(outcome, httpx.TransportError):
            delay, why = self.after_error(attempt, outcome, method), type(outcome).__name__
        else:
            delay, why = self.after_response(attempt, outcome), str(outcome.status_code)
        if delay is not None:
            log.info(
                "retrying %s %s in %.2fs (%s)",
                method,
                outcome.request.url.path,
                delay,
                why,
                extra={"attempt": attempt, "delay_s": delay},
            )
        return delay

    def backoff(self, attempt: int) -> float:
        return self.random() * min(self.max_backoff_s, self.backoff_s * 2.0 ** (attempt - 1))

    def after_response(self, attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before sending again, or None: the answer stands."""
        if response.status_code not in RETRY_STATUSES or attempt >= self.max_attempts:
            return None
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is None:
            return self.backoff(attempt)
        if retry_after > self.max_retry_after_s:
            return None
        return max(retry_after, self.backoff(attempt))

    def after_error(self, attempt: int, error: httpx.TransportError, method: str) -> float | None:
        """A connection that failed before sending is always retried; one cut after the
        request went out only for a method that may be sent twice."""
        if attempt >= self.max_attempts:
            return None
        if isinstance(error, NOT_SENT) or method.upper() in IDEMPOTENT:
            return self.backoff(attempt)
        return None


NO_RETRIES = RetryPolicy(max_attempts=1)


def parse_retry_after(value: str | None, *, now: dt.datetime | None = None) -> float | None:
    """Retry-After as delta-seconds or an HTTP date (RFC 9110 §10.2.3); None if absent or
    unreadable. A date in the past is 0."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - (now or dt.datetime.now(dt.UTC))).total_seconds())
