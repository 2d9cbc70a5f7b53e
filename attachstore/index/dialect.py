"""What a backend gives the operations (protocol.py): statements in its dialect, its transactions and their
locks; and how a caller's callback fails through a backend unchanged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar

from .rows import SessionRow

P = ParamSpec("P")
T = TypeVar("T")


class Row(Protocol):
    def __getitem__(self, index: int, /) -> Any: ...
    def __iter__(self) -> Iterator[Any]: ...
    def __len__(self) -> int: ...


class Reads(Protocol):
    # SQL is written with `$1`, `$2`, ... placeholders; SQLite reads them as its own `?1`, `?2`, ...
    hold_order: str  # the column that numbers holds in the order they were made: rowid, or seq

    async def fetch(self, sql: str, *args: object) -> Sequence[Row]: ...

    def refs_in(self, column: str, refs: Sequence[str], first: int) -> Iterator[tuple[str, Sequence[object]]]:
        """Conditions on the parameters from `$first` on, each with their values: one for all of `refs`, or
        one for each share of a long list (none for no refs)."""


class Tx(Reads, Protocol):
    exclusive: bool  # no other writer runs meanwhile (SQLite's write lock): no lock needs to be taken

    async def execute(self, sql: str, *args: object) -> None: ...
    async def executemany(self, sql: str, args: Iterable[Sequence[object]]) -> None: ...

    async def lock_refs(self, refs: Iterable[str]) -> None:
        """What the statements after it read includes everything the previous holders committed."""


def locked(tx: Tx, strength: str) -> str:
    return "" if tx.exclusive else f" FOR {strength}"


class CallbackFailed(Exception):
    """Carries a callback's exception past a backend's handling of driver errors (an OSError from a check is
    no lost connection): `Index._write` raises it again unchanged."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


async def call(fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return await fn(*args, **kwargs)
    except Exception as e:
        raise CallbackFailed(e) from e


def guard(check: Callable[[SessionRow], object], session: SessionRow) -> None:
    try:
        check(session)
    except Exception as e:
        raise CallbackFailed(e) from e
