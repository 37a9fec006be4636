"""The vendored suite runs only in its own subprocess (tests/twin/test_python_client_e2e.py)."""

collect_ignore = ["kubernetes"]
