"""What the tests share: the fake API server, resource and Pod builders, integration helpers.

Importable from every test folder (pytest's ``pythonpath`` holds ``tests``), so that
no test module imports another.
"""
