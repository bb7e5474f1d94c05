"""The core stays pure: projections imports no runtime, storage or transport module."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = ["faust", "aiokafka", "sqlite3", "click", "rich", "indexer", "streams", "mode",
           "venusian"]


def test_projections_imports_without_runtime_modules() -> None:
    code = (
        "import sys\n"
        f"blocked = {BLOCKED!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in blocked:\n"
        "            raise ImportError('blocked: ' + name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        "import projections, projections.records, projections.logformat, projections.trace\n"
        "import pkgutil\n"
        "for m in pkgutil.iter_modules(projections.__path__):\n"
        "    __import__('projections.' + m.name)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
