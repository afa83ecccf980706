"""``python -m tracekit`` runs the CLI."""

from tracekit.cli import main

if __name__ == "__main__":
    main()
