"""Embedded runtime: the local store, index generations and the single-writer pipeline on one machine."""
