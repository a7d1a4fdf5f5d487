"""`make lint`'s size bounds on the shipped packages: no module above 800 lines, no function
above cyclomatic complexity 15 (radon's measure).

Why bounds at all: a module past a screenful of screens, or a function with more paths than a
reader can hold, is where the next defect hides; splitting by the steps the code already names
keeps each piece readable. Prints each offender with what to do, and exits 1 if there is one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from radon.complexity import cc_visit

PACKAGES = ("client/kinetic", "operator/kinetic_operator", "devcluster/kinetic_dev")
MAX_LINES = 800
MAX_COMPLEXITY = 15


def offenders(root: Path) -> list[str]:
    """One line per module or function past its bound."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "build" in path.relative_to(root).parts:
                continue
            text = path.read_text(encoding="utf-8")
            lines = text.count("\n")
            where = path.relative_to(root)
            if lines > MAX_LINES:
                found.append(f"{where}: {lines} lines (at most {MAX_LINES})")
            for block in cc_visit(text):
                if block.complexity > MAX_COMPLEXITY:
                    found.append(
                        f"{where}:{block.lineno} {block.fullname}: complexity "
                        f"{block.complexity} (at most {MAX_COMPLEXITY})"
                    )
    return found


def main() -> int:
    found = offenders(Path(__file__).resolve().parent.parent)
    for line in found:
        print(line)
    if found:
        print("Split these by the steps they already name (a module into modules named after")
        print("what they hold, a function into the helpers its comments already describe).")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
