"""Analyzers (registered by name, stateless, reading the store) — they arrive with issue 5."""
