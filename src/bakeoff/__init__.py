"""bakeoff: which deep-learning framework should this project use, with the evidence.

Importing this package imports no framework; see :mod:`bakeoff.core.registry`.
"""

__version__ = "0.1.0"
