"""The bench scripts (`bench/*.py`) loaded for unit tests of their pure parts, as they run:
with bench/ on the path (they `import benchlib`), each under a name of its own
(``bench_run``: a bare ``run`` could be anything)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str) -> ModuleType:
    """``bench/<name>.py``; benchlib under its own name, since the scripts import it so."""
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    if name == "benchlib":
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module
