"""Use cases, one module each, composing the domain packages below them (docs/architecture.md)."""
