"""Shared test configuration. Service fixtures live in tests/plugins/, one module per service."""

pytest_plugins = ["tests.plugins.aws", "tests.plugins.gcp", "tests.plugins.redis", "tests.plugins.vault"]
