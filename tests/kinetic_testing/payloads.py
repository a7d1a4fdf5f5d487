"""Objects whose unpickling leaves a trace, for the runner's tests of what it unpickles."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class TouchOnUnpickle:
    """Unpickling this creates a marker file: proof of whether bytes were unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Path.touch, (self.marker,))
