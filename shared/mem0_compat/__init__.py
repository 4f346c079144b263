"""mem0 compatibility: mem0's shapes over tiermem's memories, and importing a mem0 store."""
