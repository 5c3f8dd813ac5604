"""The decision report: Markdown, one self-contained HTML file, and PNG plots (matplotlib imported lazily)."""
