"""Ingest layer: sources, format detection, importers, and the one edge from files to records."""
