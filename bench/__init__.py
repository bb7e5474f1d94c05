"""Benchmarks (`make bench`): each module measures one stage against a baseline in the same run."""
