"""tracekit.tui: the Textual terminal UI (``tracekit view``). Screens receive frames from analyzers in messages
and never parse raw files."""
