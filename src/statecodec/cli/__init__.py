"""The `statecodec` command line; see `statecodec --help`."""
