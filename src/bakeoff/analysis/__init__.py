"""Turning trial results into summaries, comparisons and a decision (no framework imported)."""
