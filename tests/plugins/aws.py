"""Session fixtures for the aws service used by integration tests."""
