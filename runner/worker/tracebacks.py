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


def _trim(first: traceback.TracebackException, user_files: frozenset[str]) -> None:
    """Keep only user frames, in the whole chain (iteratively: chains can be very long)."""
    pending, seen = [first], set()
    while pending:
        te = pending.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list(
            [frame for frame in te.stack if frame.filename in user_files])
        pending.extend(linked for linked in (te.__cause__, te.__context__) if linked is not None)


def safe_str(value: object) -> str:
    """str() of something user code made, which may raise or misbehave in __str__."""
    try:
        text = str(value)
        return text if type(text) is str else "<str() returned a non-string>"
    except BaseException:
        return f"<str() of {type(value).__name__} failed>"


def describe_exception(exc: BaseException, user_files: frozenset[str] = frozenset({USER_FILENAME})
                       ) -> dict[str, str]:
    """{type, message, traceback} for an exception raised while running user code."""
    # lookup_lines=False: only the user's frames (kept below) ever have their lines read,
    # from the sources registered above; library files are never opened.
    try:
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__,
                                          capture_locals=False, lookup_lines=False)
        _trim(te, user_files)
        text = "".join(te.format())
    except BaseException:  # an exception whose __str__ raises, a pathological chain, ...
        text = f"{type(exc).__name__}: {safe_str(exc)}\n"
    message = safe_str(exc) if not isinstance(exc, SyntaxError) else (exc.msg or safe_str(exc))
    if isinstance(exc, SyntaxError) and exc.lineno:
        message = f"{message} (line {exc.lineno})"
    return {"type": type(exc).__name__, "message": message, "traceback": text}
