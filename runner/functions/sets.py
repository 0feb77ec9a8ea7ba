"""`FunctionSet`: an ordered, named collection of function specs with a version per function.

A set is what a model is offered as tools and what runs in one namespace in the sandbox
(functions may call each other). Every change (add, replace, remove) bumps that
function's version (past any version of it the log has for the set's name, so a version
number never means two codes) and is written to the log database first, with who made it (a person
or an optimizer run) and a unified diff of the code; if that write fails the change is
not made. Loading or constructing a set records nothing: it changes nothing.

File format (canonical, what `save` writes):
    {"name": "learned", "functions": [{"name": ..., "description": ..., "parameters": {...},
      "packages": [...], "code": "...", "version": 3}, ...]}
`load` also accepts a bare list of specs in any shape `FunctionSpec` accepts (the
AgentOptimizer's file), where every function starts at version 1.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import FunctionExistsError, FunctionNotFoundError, FunctionSpecError, NotFoundError
from ..jsonlimits import JsonBounds, JsonBoundsError, loads
from ..logs.functions import Action, Author, FunctionVersionLog, FunctionVersionRecord, code_diff
from ..logs.store import LogStore
from .spec import FunctionSpec
from .tool import Tool

LogTarget = LogStore | Path | str | bool | None
# A whole set file: many specs, each with its code (each spec is bounded again on its own).
SET_FILE_BOUNDS = JsonBounds(max_chars=64_000_000, max_depth=66, max_items=1_000_000)
FunctionLike = FunctionSpec | Tool[Any, Any] | Mapping[str, Any]


def as_spec(function: FunctionLike) -> FunctionSpec:
    """A FunctionSpec from a spec, a `@tool` function or a dict in any accepted shape."""
    if isinstance(function, FunctionSpec):
        return function
    if isinstance(function, Tool):
        return function.spec
    if isinstance(function, Mapping):
        return FunctionSpec.from_dict(dict(function))
    raise FunctionSpecError(f"cannot make a function spec from {type(function).__name__}",
                            fix="pass a FunctionSpec, a @tool function or a dict")


class FunctionSet:
    """Ordered, named function specs, each with a version; changes are logged.

    `log_store` says where changes are recorded: True (the default) for the runner's log
    database, a LogStore or a database path, or False for nowhere (e.g. throwaway sets).
    """

    def __init__(self, name: str, functions: Iterable[FunctionLike] = (), *,
                 log_store: LogTarget = True, versions: Mapping[str, int] | None = None) -> None:
        if not isinstance(name, str) or not name.strip():
            raise FunctionSpecError("a function set needs a non-empty name",
                                    fix="e.g. FunctionSet('math_tools')")
        self._name = name.strip()
        self._log_target = log_store
        self._log: FunctionVersionLog | None = None
        self._lock = threading.RLock()
        self._specs: dict[str, FunctionSpec] = {}
        self._versions: dict[str, int] = {}
        self._last_version: dict[str, int] = {}  # survives removal, so versions never repeat
        for function in functions:
            spec = as_spec(function)
            if spec.name in self._specs:
                raise FunctionExistsError(f"function {spec.name!r} appears twice in set {self._name!r}",
                                          fix="give each function of a set its own name")
            version = (versions or {}).get(spec.name, 1)
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise FunctionSpecError(f"function {spec.name!r} has version {version!r}",
                                        fix="versions are whole numbers from 1")
            self._specs[spec.name] = spec
            self._versions[spec.name] = self._last_version[spec.name] = version

    # -- reading -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def names(self) -> list[str]:
        return list(self._specs)

    @property
    def specs(self) -> list[FunctionSpec]:
        return list(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[FunctionSpec]:
        return iter(self.specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __getitem__(self, name: str) -> FunctionSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise self._not_found(name) from None

    def get(self, name: str) -> FunctionSpec | None:
        return self._specs.get(name)

    def version(self, name: str) -> int:
        if name not in self._versions:
            raise self._not_found(name)
        return self._versions[name]

    @property
    def packages(self) -> list[str]:
        """The requirements of every function, once each, in order of first appearance."""
        return list(dict.fromkeys(p for spec in self._specs.values() for p in spec.packages))

    def _not_found(self, name: str) -> FunctionNotFoundError:
        available = ", ".join(self._specs) or "none"
        return FunctionNotFoundError(f"set {self._name!r} has no function {name!r}",
                                     fix=f"use one of its functions: {available}")

    def __repr__(self) -> str:
        return f"FunctionSet({self._name!r}, {', '.join(self._specs) or 'empty'})"

    # -- changing ------------------------------------------------------------------------

    def add(self, function: FunctionLike, *, by: Author | str | None = None, note: str = "") -> int:
        """Add a new function; returns its version. Raises if the name is taken."""
        spec = as_spec(function)
        with self._lock:
            if spec.name in self._specs:
                raise FunctionExistsError(
                    f"set {self._name!r} already has a function {spec.name!r}",
                    fix="use replace() to change it, or put() to add or replace")
            return self._change("add", spec.name, spec, by, note)

    def replace(self, function: FunctionLike, *, by: Author | str | None = None,
                note: str = "") -> int:
        """Replace a function of the same name; returns the new version (unchanged if the
        spec is identical: nothing is recorded then)."""
        spec = as_spec(function)
        with self._lock:
            if spec.name not in self._specs:
                raise self._not_found(spec.name)
            if self._specs[spec.name] == spec:
                return self._versions[spec.name]
            return self._change("replace", spec.name, spec, by, note)

    def put(self, function: FunctionLike, *, by: Author | str | None = None, note: str = "") -> int:
        """Add the function, or replace the one with its name."""
        spec = as_spec(function)
        with self._lock:
            if spec.name in self._specs:
                return self.replace(spec, by=by, note=note)
            return self.add(spec, by=by, note=note)

    def remove(self, name: str, *, by: Author | str | None = None, note: str = "") -> None:
        with self._lock:
            if name not in self._specs:
                raise self._not_found(name)
            self._change("remove", name, None, by, note)

    def _change(self, action: Action, name: str, spec: FunctionSpec | None,
                by: Author | str | None, note: str) -> int:
        before = self._specs.get(name)
        before_version = self._versions.get(name)
        log = self._version_log()
        if action == "remove":
            version = before_version
        else:
            # Versions never repeat within a set's name in the log, even across instances
            # (a set rebuilt from its file after a restart, a second training of the same set).
            logged = log.latest(self._name, name) if log is not None else None
            version = max(self._last_version.get(name, 0), logged.version if logged else 0) + 1
        assert version is not None
        if log is not None:  # first the log: a change that cannot be recorded is not made
            diff = code_diff(before.code if before else "", spec.code if spec else "",
                             function=name, before_version=before_version,
                             after_version=None if spec is None else version)
            log.record(set_name=self._name, function=name, version=version, action=action,
                       author=Author.of(by), spec=spec.to_dict() if spec else None, diff=diff,
                       note=note)
        if spec is None:
            del self._specs[name]
            del self._versions[name]
        else:
            self._specs[name] = spec
            self._versions[name] = self._last_version[name] = version
        return version

    def _version_log(self) -> FunctionVersionLog | None:
        if self._log is None and self._log_target not in (False, None):
            if self._log_target is True:
                from ..paths import log_db_path

                self._log = FunctionVersionLog(log_db_path())
            else:
                assert not isinstance(self._log_target, bool)
                self._log = FunctionVersionLog(self._log_target)
        return self._log

    def history(self, name: str | None = None) -> list[FunctionVersionRecord]:
        """The recorded changes of this set (or of one function), oldest first."""
        log = self._version_log()
        if log is None:
            raise NotFoundError(f"set {self._name!r} records no history (log_store=False)",
                                fix="create the set with a log_store to record changes")
        return log.history(self._name, name)

    # -- files ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"name": self._name, "functions": [
            {**spec.to_dict(), "version": self._versions[spec.name]} for spec in self._specs.values()]}

    def to_openai_tools(self) -> list[dict[str, Any]]:
        return [spec.to_openai_tool() for spec in self._specs.values()]

    def save(self, path: Path | str) -> None:
        """Write the canonical JSON file atomically (a crash leaves the old file intact)."""
        target = Path(path)
        text = json.dumps(self.to_dict(), ensure_ascii=False, indent=2) + "\n"
        fd, temporary = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.",
                                         suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    @classmethod
    def from_data(cls, data: Any, *, name: str | None = None, where: str = "",
                  log_store: LogTarget = True) -> FunctionSet:
        """A set from parsed JSON: a list of specs, or {"name": ..., "functions": [...]}."""
        label = where or "function set data"
        if isinstance(data, dict) and "functions" in data:
            items, set_name = data["functions"], data.get("name")
            unknown = sorted(set(data) - {"name", "functions"})
            if unknown:
                raise FunctionSpecError(f"{label} has unknown field(s) {', '.join(unknown)}",
                                        fix="a function set file has only name and functions")
        elif isinstance(data, dict) and "code" in data:
            items, set_name = [data], None  # one spec on its own
        else:
            items, set_name = data, None
        if not isinstance(items, list):
            raise FunctionSpecError(f"{label} must be a list of function specs or an object with "
                                    f"a functions list, got {type(items).__name__}",
                                    fix="see `runner functions show --help` for the file format")
        specs: list[FunctionSpec] = []
        versions: dict[str, int] = {}
        for index, item in enumerate(items):
            position = f"{where} item {index}" if where else f"item {index}"
            if isinstance(item, dict) and "version" in item:
                item = dict(item)
                version = item.pop("version")
                spec = FunctionSpec.from_dict(item, where=position)
                versions[spec.name] = version
            else:
                spec = FunctionSpec.from_dict(item, where=position)
            specs.append(spec)
        set_name = name or (set_name if isinstance(set_name, str) and set_name.strip() else None)
        return cls(set_name or "functions", specs, log_store=log_store, versions=versions)

    @classmethod
    def load(cls, path: Path | str, *, name: str | None = None,
             log_store: LogTarget = True) -> FunctionSet:
        """Read a set file; without a name in the file, the set is named after the file."""
        source = Path(path)
        try:
            text = source.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise NotFoundError(f"no function set file {source}", fix="check the path") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise FunctionSpecError(f"cannot read {source}: {exc}",
                                    fix="a function set file is UTF-8 JSON") from None
        try:
            data = loads(text, SET_FILE_BOUNDS, what=str(source))
        except JsonBoundsError as exc:
            fix = ("a function set file is one JSON list or object" if exc.kind == "syntax" else
                   f"a function set file may have {SET_FILE_BOUNDS.describe()}")
            raise FunctionSpecError(str(exc), fix=fix) from None
        set_name = name
        if set_name is None and not (isinstance(data, dict) and isinstance(data.get("name"), str)
                                     and "functions" in data):
            set_name = source.stem
        return cls.from_data(data, name=set_name, where=str(source), log_store=log_store)
