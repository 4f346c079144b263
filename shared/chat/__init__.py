"""Memory-augmented chat: the chat model client, one chat turn, and the OpenAI-compatible shapes."""
