"""``python -m tidelog``: the same as the ``tidelog`` console script."""

from tidelog.cli.main import main

if __name__ == "__main__":
    main()
