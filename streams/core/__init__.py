"""Shared base of the streams layers: settings, the error root, the local store, atomic files, locks."""
