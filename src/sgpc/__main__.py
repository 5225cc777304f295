"""``python -m sgpc``: the command line of ``sgpc.cli``."""
from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
