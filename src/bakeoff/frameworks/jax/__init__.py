"""bakeoff's jax folder: everything it is to bakeoff (bakeoff.frameworks)."""
