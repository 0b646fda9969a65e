"""Allows `python -m inhabit ...` (same as the `inhabit` console script)."""

from inhabit.cli import main

if __name__ == "__main__":
    main()
