"""bakeoff's tensorflow folder: everything it is to bakeoff (bakeoff.frameworks)."""
