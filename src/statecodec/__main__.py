"""`python -m statecodec`: the `statecodec` command, where the environment's scripts folder is not on PATH."""

from statecodec.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
