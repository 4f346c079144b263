"""Context assembly: what a chat backend puts in front of its model before each message."""
