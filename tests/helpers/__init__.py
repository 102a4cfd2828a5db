"""Plain helpers shared by the test files (no fixtures: those live in tests/conftest.py)."""
