"""The restricted tier's audit hook: a layer below the policy that keeps no state of its own.

The guards decide what user code may reach. Libraries are large, though, and a library
function can compile a string the user chose (a timing helper's `setup=`, a type hint
that is a string), import a module by name, or `getattr` with a name the user chose.
This hook does not care how something was reached. In a restricted child:

- nothing may start a process, open a socket, load a C library, write or delete a file,
  read a file outside the Python installation, trace, or walk the garbage collector;
- code is compiled and executed only by the sandbox itself (its own compile steps and
  sympy's hardened string paths) and by the import system: `compile`, `exec` and
  `eval` from anywhere else (any library, any depth) are refused. Trusted call sites are
  recognised by the identity of their code objects, which user code cannot forge;
- only modules the policy allows, and a fixed list of standard-library helpers, may be
  imported for the first time; anything else is "not found" for whoever asked.

Every refusal is announced on the child's result channel before the exception is
raised, so the supervisor records it even if the code later takes control of the
process. The hook keeps nothing mutable: whatever it uses is bound in its closure when
it is installed (builtins included), so neither replacing module attributes nor reading
its frames (`f_locals` is a snapshot) can switch it off. Python's audit hooks cannot be
removed once added, and the child is discarded after the run, so the hook never reaches
the warm parent.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from types import CodeType
from typing import Any

from .policy.names import LAZY_IMPORTS
from .protocol import HEADER

DENIED_EVENTS = (
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod",
    "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime", "os.putenv",
    "os.unsetenv", "os.chdir", "os.chroot", "os.setuid", "os.chflags", "os.lchflags",
    "os.setxattr", "os.removexattr", "os.startfile", "os.add_dll_directory",
    "subprocess.", "pty.", "socket.", "ctypes.", "shutil.", "mmap.", "sys.settrace",
    "sys.setprofile", "sys._current_frames", "sys._current_exceptions", "code.__new__",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "signal.", "resource.setrlimit", "resource.prlimit", "fcntl.", "glob.", "sqlite3.",
    "webbrowser.", "urllib.", "http.", "ftplib.", "smtplib.", "poplib.", "imaplib.",
    "nntplib.", "telnetlib.", "sys.addaudithook", "setopencode", "cpython.",
    "pickle.find_class", "shelve.", "dbm.", "tempfile.",
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_readable: tuple[str, ...] | None = None


def _readable_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             "/usr/share/zoneinfo", "/etc/localtime", os.path.dirname(os.path.dirname(__file__))}
    roots.update(path for path in sys.path if path and os.path.isdir(path))
    return _normalised_roots(roots)


def _normalised_roots(roots: Iterable[str]) -> tuple[str, ...]:
    """Directories end with a separator, so that a prefix test matches only below them."""
    return tuple(sorted(os.path.join(os.path.realpath(root), "") if os.path.isdir(root)
                        else os.path.realpath(root) for root in roots))


_sites: tuple[frozenset[int], frozenset[int]] | None = None


def prepare(readable: Iterable[str] | None = None) -> None:
    """Work out the readable roots (the jail's view, when given) and the compile sites
    once, in the worker (after every trusted site is registered), so no child pays for
    it."""
    global _readable, _sites
    _readable = _normalised_roots(readable) if readable is not None else _readable_roots()
    _sites = SITES.frozen()


def readable_roots() -> tuple[str, ...]:
    return _readable or _readable_roots()


def _code_ids(functions: Iterable[Any]) -> frozenset[int]:
    ids = set()
    for function in functions:
        code = getattr(function, "__code__", function)
        if isinstance(code, CodeType):
            ids.add(id(code))
    return frozenset(ids)


class CompileSites:
    """Who may compile and execute code in a child: `trusted` sites (by code object), the
    helpers they may go through on the way (`through`), and the import system."""

    def __init__(self) -> None:
        self._trusted: list[Any] = []
        self._through: list[Any] = []

    def trust(self, *functions: Any) -> None:
        self._trusted.extend(functions)

    def allow_through(self, *functions: Any) -> None:
        self._through.extend(functions)

    def frozen(self) -> tuple[frozenset[int], frozenset[int]]:
        import ast
        import collections

        trusted = [*self._trusted, collections.namedtuple]
        through = [*self._through, ast.parse]
        # The import system executes module code (and compiles sources without a
        # cached .pyc); which modules may be imported at all is decided on "import".
        bootstrap = sys.modules.get("importlib._bootstrap")
        external = sys.modules.get("importlib._bootstrap_external")
        # `_call_with_frames_removed` is a helper anyone could call with `exec`: it is
        # only a way through, and the loaders that call it are the trusted sites.
        if bootstrap is not None:
            through.append(bootstrap._call_with_frames_removed)
            trusted.append(bootstrap.FrozenImporter.exec_module)
        if external is not None:
            trusted.append(external.SourceLoader.source_to_code)
            trusted.append(external._LoaderBasics.exec_module)
        # Keep the objects alive: their ids must stay theirs.
        self._trusted, self._through = trusted, through
        return _code_ids(trusted), _code_ids(through)


SITES = CompileSites()


def install(**settings: Any) -> None:
    """Build the hook and add it (once, in the child, never in the worker's own
    processes). See `build`."""
    sys.addaudithook(build(**settings))


def build(*, report_fd: int, readable: tuple[str, ...], importable: tuple[str, ...],
          importable_prefixes: tuple[str, ...], refused_parts: tuple[str, ...],
          refusal: type[BaseException]) -> Callable[[str, tuple[Any, ...]], None]:
    """The hook, ready to add: built once in the worker (the children's result channel has
    a fixed descriptor), added in each child with `sys.addaudithook`.

    Everything the hook and its helpers use is bound here, builtins included: at the
    time of an event nothing is looked up in a module, a global or the builtins, which
    code that got hold of the real builtins could have replaced. (A test checks that the
    compiled hook loads no globals.)"""
    import ast

    trusted, through = _sites or SITES.frozen()
    parse_code = id(ast.parse.__code__)
    getframe = sys._getframe
    write, pack, quote = os.write, HEADER.pack, json.encoder.encode_basestring
    identity, is_instance, length = id, isinstance, len
    str_type, bytes_type, int_type = str, bytes, int
    not_found = ModuleNotFoundError
    denied_events = DENIED_EVENTS
    readable_roots = tuple(readable)
    exact_imports = frozenset(importable) | frozenset(LAZY_IMPORTS)
    import_prefixes = (*(prefix + "." for prefix in importable_prefixes), "encodings.")
    refused = tuple(refused_parts)
    write_flags = _WRITE_FLAGS
    frames_to_walk = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    harmless = frozenset({"object.__getattr__", "sys._getframe", "builtins.id",
                          "object.__setattr__", "object.__delattr__", "marshal.loads",
                          "os.listdir", "os.scandir", "sys._getframemodulename"})

    def refuse(message: str) -> None:
        body = ('{"kind":"denied","message":' + quote(message) + "}").encode("utf-8")
        try:
            write(report_fd, pack(length(body)) + body)
        finally:
            raise refusal(message)

    def compile_allowed() -> bool:
        frame: Any = getframe(2)  # 0: here, 1: the hook, 2: whoever asked to compile or run
        if frame is not None and identity(frame.f_code) == parse_code:
            return True  # ast.parse only parses: no code object comes out of it
        for _ in frames_to_walk:
            if frame is None:
                return False
            code = identity(frame.f_code)
            if code in trusted:
                return True
            if code not in through:
                return False
            frame = frame.f_back
        return False

    def import_allowed(name: Any) -> bool:
        if not is_instance(name, str_type):
            return False
        if name in exact_imports:
            return True
        if not name.startswith(import_prefixes):
            return False
        for part in refused:  # noqa: SIM110 - `all` would be a builtin looked up at event time
            if part in name:
                return False
        return True

    def normalised(path: str) -> str:
        parts: list[str] = []
        for part in path.split("/"):
            if part == "" or part == ".":
                continue
            if part == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(part)
        return "/" + "/".join(parts)

    def open_problem(args: tuple[Any, ...]) -> str | None:
        """Writing anything, or reading outside the Python installation. Paths are
        normalised with string operations only (Landlock, below, resolves links)."""
        path: Any = args[0] if args else None
        mode: Any = args[1] if length(args) > 1 else None
        flags: Any = args[2] if length(args) > 2 else 0
        writing = False
        if is_instance(mode, str_type):
            for letter in "wax+":
                if letter in mode:
                    writing = True
        if is_instance(flags, int_type) and flags & write_flags:
            writing = True
        if is_instance(path, bytes_type):
            path = path.decode("utf-8", "surrogateescape")
        if not is_instance(path, str_type):
            return "opening a file descriptor for writing is not allowed" if writing else None
        if writing:
            return f"writing files ({path}) is not allowed in the restricted backend"
        if path.startswith("<"):
            # A pseudo-filename ("<code>"): the interpreter looks for the source line of
            # a syntax error there. Reading it finds nothing (Landlock decides anyway).
            return None
        if not normalised(path).startswith(readable_roots):
            return f"reading {path} is not allowed in the restricted backend"
        return None

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in harmless:
            return  # frequent, and raised by the hook's own frame walk
        if event.startswith(denied_events):
            refuse(f"the restricted backend does not allow '{event}' (processes, files, "
                   "sockets, C libraries and the interpreter's internals are off limits)")
        elif event == "compile" or event == "exec" or event == "function.__new__":
            if not compile_allowed():
                refuse("running code from a string (compile, exec, eval) or making functions "
                       "from code objects is not allowed in the restricted backend, whoever "
                       "asks for it")
        elif event == "import":
            name = args[0] if args else None
            if not import_allowed(name):
                raise not_found(f"No module named {name!r} (the restricted backend does "
                                "not allow importing it)")
        elif event == "open":
            problem = open_problem(args)
            if problem:
                refuse(problem)

    return hook
