"""One module per token format's vectors; `statecodec.vectors` is the public entry point."""
