"""Face for people and scripts: the `recall` command."""
