"""The block codec's zstd: a short read process loads zstandard's C backend without the package's
own import (which pulls in `platform`), and gets the very module the package exports."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str, **env: str) -> str:
    import os

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, check=True, env={**os.environ, **env}).stdout.strip()


def test_a_block_round_trip_loads_the_c_backend_without_platform() -> None:
    out = _run("""
        import sys
        from projections import codec
        codec.for_short_process()  # as `recall search` runs (no orjson, nothing it pulls in)
        from indexer import blocks
        zstd = blocks._zstd()
        data = zstd.ZstdCompressor().compress(b"x" * 100)
        print(zstd.__name__, "platform" in sys.modules, "zstandard" in sys.modules,
              zstd.ZstdDecompressor().decompress(data) == b"x" * 100)
        import zstandard
        print(zstandard.ZstdDecompressor is zstd.ZstdDecompressor)
    """)
    assert out.split("\n") == ["zstandard.backend_c False False True", "True"]


def test_an_import_policy_other_than_the_default_is_the_packages_to_apply() -> None:
    out = _run("""
        from indexer import blocks
        print(blocks._zstd().__name__, blocks._zstd().backend)
    """, PYTHON_ZSTANDARD_IMPORT_POLICY="cext")
    assert out == "zstandard cext"
