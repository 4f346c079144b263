"""Adapters for agent frameworks, each a thin module over the SDK and each importing its
framework only inside itself: `openai_agents` (pip install tiermem[openai-agents]) and
`langgraph` (pip install tiermem[langgraph]). The TypeScript SDK has the Vercel AI SDK's
(`tiermem/ai`)."""
