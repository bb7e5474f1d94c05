"""`python -m streams` → the recall CLI (its entry point: the fast read path, else the full CLI)."""

from streams.faces.cli.entry import main

main()
