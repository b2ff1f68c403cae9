"""Session fixtures for the vault service used by integration tests."""
