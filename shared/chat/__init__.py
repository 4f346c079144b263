"""Memory-augmented chat: the chat model client, a chat turn's request and response, and the
OpenAI Chat Completions shapes (the turn itself is shared/flows/chat_turn.py)."""
