"""Storage and read side: surface-tagged documents → sharded SQLite FTS5 → search / reference."""
