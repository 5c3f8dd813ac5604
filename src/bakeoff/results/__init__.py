"""What was measured, kept: the store, the catalog, comparisons, CI decisions, kept model directories."""
