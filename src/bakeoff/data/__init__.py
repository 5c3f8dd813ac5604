"""Framework-free data for bakeoff workloads: the shipped data sets and loaders for the user's own files.

Importing this package loads nothing; the loaders live in submodules (``bakeoff.data.text``).
"""


class DataError(ValueError):
    """A data file or option that cannot be used; the message names the file, line or column and what was expected."""


def parse_flag(name: str, value: str) -> bool:
    """A true/false data option (``skip_bad_rows=true``): true, yes, 1, false, no or 0; else a :class:`DataError`."""
    flags = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    if value.strip().lower() not in flags:
        raise DataError(f"{name} must be true or false, got {value!r}")
    return flags[value.strip().lower()]
