"""``python -m bridge.cli``."""

from bridge.cli._app import main

if __name__ == "__main__":
    main()
