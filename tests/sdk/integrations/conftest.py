"""The adapters' tests run no tracing: the Agents SDK would send its traces to OpenAI's
servers whenever OPENAI_API_KEY is set."""

from __future__ import annotations

import contextlib

with contextlib.suppress(ImportError):
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
