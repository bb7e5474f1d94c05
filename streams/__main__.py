"""`python -m streams` → the recall CLI."""

from streams.cli import main

main()
