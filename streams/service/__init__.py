"""Service layer: what both runtimes answer alike (operations by name, references, recall-owned sessions)."""
