"""The operator's pure decisions: what to create, delete, record and report, from what was seen.

Nothing in this package talks to the API server or storage, reads a clock or draws a random
value: the handlers (`kinetic_operator.handlers`) observe, pass the facts and the time in, and
carry the answer out. An import-linter contract in ``pyproject.toml`` keeps it so.
"""
