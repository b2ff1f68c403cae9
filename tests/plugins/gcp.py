"""Session fixtures for the gcp service used by integration tests."""
