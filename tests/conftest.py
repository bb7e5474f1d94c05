"""Shared fixtures for every test tier (factories live in tests/support, on pytest's pythonpath)."""
