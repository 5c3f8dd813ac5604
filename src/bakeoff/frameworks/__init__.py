"""One folder per framework, everything it is to bakeoff, with the same module names in each (``record.py``,
``engine.py``, ``distributed.py``, ``probes.py``, ``launch.py``, ``deploy.py``, ``runtime.py``); the records are
found here by :mod:`bakeoff.core.frameworks`. Importing this package imports no framework."""
