"""bakeoff's torch folder: everything it is to bakeoff (bakeoff.frameworks)."""
