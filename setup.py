"""The optional C extension, the one part of the build pyproject.toml cannot declare without
setuptools warning that its `ext-modules` table is experimental. Everything else is in
pyproject.toml."""

from setuptools import Extension, setup

setup(
    # The compiled match-count function. Optional: without a C compiler and the SQLite headers
    # the build skips it and indexer/matchcount.py registers the same rule in Python (identical
    # results, slower on very common terms; `recall index stats` says which one runs).
    ext_modules=[Extension("indexer._matchcount", ["indexer/_matchcount.c"], optional=True)],
    # Always compile it: a build/ dir an earlier `pip install .` left behind would otherwise hand
    # the next build its old .so whenever that file looks newer than the source.
    options={"build_ext": {"force": True}},
)
