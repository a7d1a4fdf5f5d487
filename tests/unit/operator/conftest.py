"""Fixtures of the operator's unit tests: its settings, storage under ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

import pytest
from kinetic_operator.settings import OperatorSettings
from kinetic_testing import bodies


@pytest.fixture
def job_settings(tmp_path: Path) -> OperatorSettings:
    """What the KineticJob reconcile tests run with."""
    return bodies.job_settings(tmp_path)


@pytest.fixture
def batch_settings(tmp_path: Path) -> OperatorSettings:
    """What the KineticBatch reconcile tests run with: every status write at once."""
    return bodies.batch_settings(tmp_path)
