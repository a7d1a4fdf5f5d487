"""`make lint`'s size bounds: a module past 800 lines or a function past complexity 15 in a
shipped package is named with its measure; the tree as it stands has none."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("check_bounds", REPO / "scripts/check_bounds.py")
assert _spec is not None and _spec.loader is not None
check_bounds = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_bounds)


def test_a_long_module_and_a_twisty_function_are_named(tmp_path: Path) -> None:
    package = tmp_path / "operator/kinetic_operator"
    package.mkdir(parents=True)
    (package / "long.py").write_text("x = 1\n" * 801)
    branches = "".join(f"    if a == {i}:\n        return {i}\n" for i in range(15))
    (package / "twisty.py").write_text(f"def decide(a):\n{branches}    return -1\n")
    (package / "fine.py").write_text("x = 1\n" * 800)
    assert check_bounds.offenders(tmp_path) == [
        "operator/kinetic_operator/long.py: 801 lines (at most 800)",
        "operator/kinetic_operator/twisty.py:1 decide: complexity 16 (at most 15)",
    ]


def test_the_shipped_packages_keep_their_bounds() -> None:
    assert check_bounds.offenders(REPO) == []
