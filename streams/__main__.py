"""`python -m streams` → the recall CLI."""

from streams.faces.cli.main import main

main()
