"""The optional C extension, the one part of the build pyproject.toml cannot declare without
setuptools warning that its `ext-modules` table is experimental. Everything else is in
pyproject.toml."""

import shutil
import tempfile

from setuptools import Extension, setup

# Build in a directory of this run's own, removed afterwards: a build/ dir left in the checkout
# would litter it and could hand a later build its stale objects.
build_base = tempfile.mkdtemp(prefix="recall-build-")
try:
    setup(
        # The compiled match-count function. Optional: without a C compiler and the SQLite
        # headers the build skips it and indexer/matchcount.py registers the same rule in Python
        # (identical results, slower on very common terms; `recall index stats` says which runs).
        ext_modules=[Extension("indexer._matchcount", ["indexer/_matchcount.c"], optional=True)],
        # Always compile it, whatever timestamps an earlier build left.
        options={"build": {"build_base": build_base}, "build_ext": {"force": True}},
    )
finally:
    shutil.rmtree(build_base, ignore_errors=True)
