"""``bakeoff``: the command line, one module per command group; each command parses and calls the library."""
