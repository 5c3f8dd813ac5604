"""A mapping read on use: the module-level tables built from the framework records (frameworks, formats,
launchers), so importing the module that holds one reads no record and imports no framework."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

V = TypeVar("V")


class Discovered(Mapping[str, V]):
    """The mapping ``build`` returns, asked for on every use: ``build`` caches what it must (the records are read
    once, until :func:`bakeoff.core.frameworks.rediscover`), so a table built from others follows them."""

    def __init__(self, name: str, build: Callable[[], Mapping[str, V]]) -> None:
        self._name, self._build = name, build

    def __getitem__(self, key: str) -> V:
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())

    def __repr__(self) -> str:
        return f"{self._name}({', '.join(self)})"
