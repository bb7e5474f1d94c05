"""Test support: the planted secrets and look-alike corpus, which the bench shares (the bench
never imports tests, so they live in bench/secretcorpus.py)."""

from bench.secretcorpus import (
    Planted,
    code_corpus,
    planted_secrets,
    secret_fragments,
    secret_sessions,
    write_sessions,
)

__all__ = ["Planted", "code_corpus", "planted_secrets", "secret_fragments", "secret_sessions",
           "write_sessions"]
