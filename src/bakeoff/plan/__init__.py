"""Parent side, no framework imported: what will run (suites, overrides, order, the dry-run preview)."""
