"""bakeoff's keras folder: everything it is to bakeoff (bakeoff.frameworks)."""
