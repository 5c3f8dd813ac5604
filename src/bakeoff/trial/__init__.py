"""Child side: one trial, one process (``python -m bakeoff.trial``), and the parity probes."""
