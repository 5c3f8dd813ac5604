"""Framework-free data for bakeoff workloads: the shipped data sets and loaders for the user's own files.

Importing this package loads nothing; the loaders live in submodules (``bakeoff.data.text``).
"""


class DataError(ValueError):
    """A data file or option that cannot be used; the message names the file, line or column and what was expected."""
