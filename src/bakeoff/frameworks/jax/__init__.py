"""JAX to bakeoff: its record, engine (jax.jit, op by op), mesh and jax.distributed strategies, probes, launcher,
deployment adapter and runtime. Importing this package imports no framework; its modules import JAX where they
need it."""
