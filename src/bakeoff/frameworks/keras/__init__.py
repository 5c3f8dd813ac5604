"""Keras 3 to bakeoff: its rows, one per backend, and its engine (Keras' own train_on_batch); it distributes,
probes and multiplies through its backends' folders. Importing this package imports no framework."""
