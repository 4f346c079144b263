"""An OpenAI-compatible server as the LLM client and the chat model both reach it.

One place builds the openai client from the settings, and one place reads what openai (or
httpx, mid-stream) raised: a `Failure` saying what happened, which the caller turns into its
own error (TransientError/PermanentError for the workers, 502/504 for a waiting person)
with the advice an `Endpoint` words for its settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import httpx
import openai

from shared.config import LLMSettings, Settings
from shared.errors import ChatNotConfigured, PermanentError


@dataclass(frozen=True)
class Endpoint:
    """Where a server is, the key it takes, how long to wait, and how messages name it."""

    base_url: str
    api_key: str
    timeout_s: float
    who: str  # how messages name the server: "LLM", "the chat model"
    env: str  # the prefix of the settings that point at it: "TIERMEM_LLM__"

    @classmethod
    def llm(cls, settings: LLMSettings) -> Endpoint:
        """The auxiliary model extraction and summaries call."""
        if not settings.base_url:
            raise PermanentError(
                "no LLM endpoint configured: set TIERMEM_LLM__BASE_URL "
                "(or use the offline extractor)"
            )
        return cls(settings.base_url, settings.api_key, settings.timeout_s, "LLM", "TIERMEM_LLM__")

    @classmethod
    def chat(cls, settings: Settings) -> Endpoint:
        """The model that answers users; unset, its server and key are the LLM's."""
        chat, llm = settings.chat, settings.llm
        base_url = chat.base_url or llm.base_url
        if not base_url:
            raise ChatNotConfigured(
                "no chat model configured: set TIERMEM_CHAT__BASE_URL (an OpenAI-compatible "
                "endpoint, usually ending in /v1) or TIERMEM_LLM__BASE_URL, which it falls back to"
            )
        if chat.api_key:
            api_key = chat.api_key
        elif base_url == llm.base_url:
            api_key = llm.api_key
        else:
            # Never send the extraction provider's key to a different host.
            api_key = "not-needed"
        return cls(base_url, api_key, chat.timeout_s, "the chat model", "TIERMEM_CHAT__")

    def client(self) -> openai.OpenAI:
        """One per process: the httpx pool inside is thread-safe.

        The openai client's own retries are off: the Celery task retries the LLM's
        TransientError with backoff (retrying in both places would multiply the waits), and
        the chat API answers 502/504 at once so that its caller decides.
        """
        return openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=0
        )

    def advice(self, status: int, model: str) -> str:
        """What a person does about an HTTP error no retry will fix."""
        where = self.base_url
        if status == 401:
            return f"{self.who} rejected the API key (401) at {where}: check {self.env}API_KEY"
        if status == 403:
            return (
                f"{self.who} refused access (403) at {where}: check that {self.env}API_KEY "
                f"may use model {model!r}"
            )
        return f"{self.who} answered HTTP {status} at {where}"

    def not_an_api(self, problem: object) -> str:
        # Usually a base_url pointing at a web page or proxy rather than the API root.
        return (
            f"{self.who} endpoint at {self.base_url} did not answer like an OpenAI-compatible "
            f"API ({problem}): check {self.env}BASE_URL (usually ends in /v1)"
        )


@dataclass(frozen=True)
class Failure:
    """What went wrong, read from an exception of openai or httpx.

    timeout: no answer in time; unreachable: no connection (`said` is the cause); status: an
    HTTP error (`said` is the server's own message); broke_off: an error event inside a
    stream (`said` is its message); not_an_api: an answer that is no OpenAI-compatible reply.
    """

    kind: Literal["timeout", "unreachable", "status", "broke_off", "not_an_api"]
    status: int = 0
    said: str = ""


def read_failure(exc: Exception) -> Failure:
    if isinstance(exc, openai.APIResponseValidationError):  # a 2xx that is not the reply
        return Failure("not_an_api")
    # APITimeoutError subclasses APIConnectionError, so it goes first. The httpx errors come
    # from a stream's body, which openai does not wrap.
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        return Failure("timeout")
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return Failure("unreachable", said=str(exc.__cause__ or exc))
    if isinstance(exc, openai.APIStatusError):
        return Failure("status", exc.status_code, upstream_error_text(exc))
    if isinstance(exc, openai.APIError) and exc.body is not None:
        return Failure("broke_off", said=exc.message[:300])
    return Failure("not_an_api")


def upstream_error_text(exc: openai.APIStatusError) -> str:
    """The provider's own error message, shortened: it usually says what to fix."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])[:300]
    return str(exc.message)[:300]
