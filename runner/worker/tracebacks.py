"""Tracebacks trimmed to the user's own code.

Frames from the worker and from libraries are dropped, so a traceback shows only
lines the user (or the model) wrote, and never a path on the host. Stdlib only.
"""

from __future__ import annotations

import linecache
import traceback

USER_FILENAME = "<code>"


def register_source(source: str, filename: str = USER_FILENAME) -> None:
    """Make the user's lines available to the traceback formatter."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def _trim(te: traceback.TracebackException, user_files: frozenset[str], seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = [frame for frame in te.stack if frame.filename in user_files]
    te.stack = traceback.StackSummary.from_list(frames)
    for linked in (te.__cause__, te.__context__):
        if linked is not None:
            _trim(linked, user_files, seen)


def describe_exception(exc: BaseException, user_files: frozenset[str] = frozenset({USER_FILENAME})
                       ) -> dict[str, str]:
    """{type, message, traceback} for an exception raised while running user code."""
    # lookup_lines=False: only the user's frames (kept below) ever have their lines read,
    # from the sources registered above; library files are never opened.
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, capture_locals=False,
                                      lookup_lines=False)
    _trim(te, user_files, set())
    text = "".join(te.format())
    message = str(exc) if not isinstance(exc, SyntaxError) else (exc.msg or str(exc))
    if isinstance(exc, SyntaxError) and exc.lineno:
        message = f"{message} (line {exc.lineno})"
    return {"type": type(exc).__name__, "message": message, "traceback": text}
