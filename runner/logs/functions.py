"""The history of function sets in the log database: who changed which function, and how.

One row per change (add, replace, remove) in the `function_versions` table (migration 2):
the set and function names, the version after the change, the author (a person, or an
optimizer run), the whole spec and a unified diff of the code. Rows are only ever added.

`FunctionVersionLog` takes a `LogStore` (or the path of its database) and uses short
connections of its own on that file, so it needs nothing from the store but its path and
its migrations; WAL mode lets these connections and the store's write side by side.
"""

from __future__ import annotations

import difflib
import getpass
import os
import sqlite3
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .rows import from_json, named_marks, readable, to_iso, to_json, unreadable
from .side_table import SideTable

Action = Literal["add", "replace", "remove"]

_COLUMNS = ("id", "changed_at", "set_name", "function", "version", "action", "author_kind",
            "author", "note", "spec_json", "code_diff")


class Author(BaseModel):
    """Who made a change: a person (by name) or an optimizer run (by its id)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["person", "optimizer"]
    name: str

    @classmethod
    def person(cls, name: str | None = None) -> Author:
        """A person; by default the user running this process."""
        return cls(kind="person", name=name or _current_user())

    @classmethod
    def optimizer(cls, run_id: str) -> Author:
        return cls(kind="optimizer", name=run_id)

    @classmethod
    def of(cls, value: Author | str | None) -> Author:
        """An Author as given, a person named by a string, or the current user for None."""
        if isinstance(value, Author):
            return value
        return cls.person(value)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


def _current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (containers): the uid is still a fact
        return f"uid {os.getuid()}"


class FunctionVersionRecord(BaseModel):
    """One change of one function in one set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    changed_at: datetime
    set_name: str
    function: str
    version: int
    action: Action
    author: Author
    note: str = ""
    spec: dict[str, Any] | None = None
    code_diff: str = ""


def code_diff(before: str, after: str, *, function: str, before_version: int | None,
              after_version: int | None) -> str:
    """A unified diff of two versions of a function's code ('' when they are equal)."""
    old = f"{function} v{before_version}" if before_version else "/dev/null"
    new = f"{function} v{after_version}" if after_version else "/dev/null"
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=old, tofile=new)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)


class FunctionVersionLog(SideTable):
    """Reads and writes function-version rows in the log database of a LogStore."""

    what = "the function history"

    def record(self, *, set_name: str, function: str, version: int, action: Action,
               author: Author, spec: dict[str, Any] | None, diff: str, note: str = ""
               ) -> FunctionVersionRecord:
        """Append one change; raises LogStoreError if it cannot be written (nothing is lost
        silently: the caller applies the change only after this returns)."""
        changed_at = datetime.now(timezone.utc)
        row = {"changed_at": to_iso(changed_at), "set_name": set_name,
               "function": function, "version": version, "action": action,
               "author_kind": author.kind, "author": author.name, "note": note,
               "spec_json": to_json(spec) if spec is not None else None,
               "code_diff": diff}
        names = list(row)
        sql = (f"INSERT INTO function_versions ({', '.join(names)}) "
               f"VALUES ({named_marks(names)})")
        row_id = self._run(lambda conn: conn.execute(sql, row).lastrowid, "write to")
        assert row_id is not None  # an INSERT always has a row id
        return FunctionVersionRecord(id=row_id, changed_at=changed_at, set_name=set_name,
                                     function=function, version=version, action=action,
                                     author=author, note=note, spec=spec, code_diff=diff)

    def history(self, set_name: str | None = None, function: str | None = None, *,
                limit: int | None = None) -> list[FunctionVersionRecord]:
        """Changes matching the filters, oldest first (the last `limit` ones if given)."""
        clauses: list[str] = []
        params: list[Any] = []
        if set_name is not None:
            clauses.append("set_name = ?")
            params.append(set_name)
        if function is not None:
            clauses.append("function = ?")
            params.append(function)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT {', '.join(_COLUMNS)} FROM function_versions{where} ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._run(lambda conn: conn.execute(sql, params).fetchall(), "read")
        return readable(reversed(rows), _record)

    def latest(self, set_name: str, function: str) -> FunctionVersionRecord | None:
        records = self.history(set_name, function, limit=1)
        return records[0] if records else None


def insert_version(conn: sqlite3.Connection, record: FunctionVersionRecord) -> tuple[int, bool]:
    """Write a change as it was recorded elsewhere (an import): (its id in this log, whether
    it was new). A change is the same one when its set, function, version and time are."""
    key = (record.set_name, record.function, record.version, to_iso(record.changed_at))
    found = conn.execute("SELECT id FROM function_versions WHERE set_name = ? AND function = ? "
                         "AND version = ? AND changed_at = ?", key).fetchone()
    if found is not None:
        return int(found[0]), False
    row = {"changed_at": key[3], "set_name": record.set_name, "function": record.function,
           "version": record.version, "action": record.action,
           "author_kind": record.author.kind, "author": record.author.name, "note": record.note,
           "spec_json": to_json(record.spec) if record.spec is not None else None,
           "code_diff": record.code_diff}
    names = list(row)
    cursor = conn.execute(f"INSERT INTO function_versions ({', '.join(names)}) "
                          f"VALUES ({named_marks(names)})", row)
    assert cursor.lastrowid is not None  # an INSERT always has a row id
    return int(cursor.lastrowid), True


def version_key(conn: sqlite3.Connection, version_id: int) -> dict[str, Any] | None:
    """What names a change across logs (an export): its set, function, version and time."""
    row = conn.execute("SELECT set_name, function, version, changed_at FROM function_versions "
                       "WHERE id = ?", (version_id,)).fetchone()
    if row is None:
        return None
    return {"set_name": row[0], "function": row[1], "version": row[2],
            "changed_at": datetime.fromisoformat(row[3]).isoformat()}


def _record(row: tuple[Any, ...]) -> FunctionVersionRecord:
    r = dict(zip(_COLUMNS, row, strict=True))
    try:
        return FunctionVersionRecord(
            id=r["id"], changed_at=datetime.fromisoformat(r["changed_at"]), set_name=r["set_name"],
            function=r["function"], version=r["version"], action=r["action"],
            author=Author(kind=r["author_kind"], name=r["author"]), note=r["note"],
            spec=from_json(r["spec_json"]),
            code_diff=r["code_diff"])

    except (ValueError, TypeError) as exc:  # bad JSON or time: damaged
        raise unreadable(f"function version {r['id']} ({r['set_name']}.{r['function']})", exc) from exc
