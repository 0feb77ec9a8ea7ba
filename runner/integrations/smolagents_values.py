"""Values and images crossing from a smolagents step in the sandbox to the agent on the host.

smolagents' remote executors carry a final answer as its "safe" serialization: "safe:"
and JSON in which the types JSON lacks are objects tagged `__type__` (tuple, set,
frozenset, bytes, complex, datetime, date, time, timedelta, Decimal, Path, PIL.Image,
ndarray, dataclass, dict_with_complex_keys). The sandbox side here (`SANDBOX_SOURCE`,
defined in each session) writes that format; a value it has no tag for becomes its
`str()`. The answer rides on the `FinalAnswerException` that ends the step; one longer
than an error message may be (the sandbox keeps 64 KB of those) is written to
ANSWER_FILE in the run's directory and comes back with the run's files.

The host side (`decode_answer`, `open_image`) reads what a run wrote, so it reads it as
hostile: the JSON within bounds (runner.jsonlimits), arrays only of numeric types of at
most 16 bytes an item (a dtype such as 'U999999999' would ask for gigabytes), images only
in the raster formats runner serves as pictures (never EPS, which PIL renders with
Ghostscript, nor any other of PIL's decoders), of at most MAX_IMAGE_PIXELS pixels, decoded
here in full so a truncated or malformed file fails now and not in the agent's code.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import io
import pathlib
from collections.abc import Iterable
from typing import Any

from ..files import RASTER_IMAGES
from ..jsonlimits import JsonBounds, JsonBoundsError, loads
from ..terminal import sanitize_for_terminal
from ..types import ExecutionResult, OutputFile
from .work_dir import PRIVATE_DIR, private

__all__ = ["ANSWER_FILE", "MAX_IMAGE_PIXELS", "SAFE_PREFIX", "SANDBOX_SOURCE",
           "decode_answer", "images_of", "open_image"]

SAFE_PREFIX = "safe:"
FILE_PREFIX = "file:"
ANSWER_FILE = f"{PRIVATE_DIR}/final-answer.json"
LAST_VALUE_FILE = f"{PRIVATE_DIR}/last-value.json"  # a step's last expression, for its output
LAST_VALUE = "_runner_last_value"  # the session's function a step's last expression is given
INLINE_ANSWER_CHARS = 60_000  # under the sandbox's 64 KB of an error message
MAX_IMAGE_PIXELS = 40_000_000  # 160 MB as RGBA; a figure is a few hundred thousand
ANSWER_BOUNDS = JsonBounds(max_chars=48 * 1024 * 1024, max_depth=100, max_items=2_000_000,
                           max_int_digits=4_000)
_PIL_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF",
                "image/webp": "WEBP", "image/bmp": "BMP"}
_ARRAY_KINDS = frozenset("biufc")  # bool, int, unsigned, float, complex

SANDBOX_SOURCE = f'''\
def _runner_safe(value):
    """`value` in smolagents' safe serialization; str() for a type it has no tag for."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list):
        return [_runner_safe(item) for item in value]
    if isinstance(value, tuple):
        return {{"__type__": "tuple", "data": [_runner_safe(item) for item in value]}}
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {{key: _runner_safe(item) for key, item in value.items()}}
        return {{"__type__": "dict_with_complex_keys",
                 "data": [[_runner_safe(key), _runner_safe(item)] for key, item in value.items()]}}
    if isinstance(value, (set, frozenset)):
        kind = "set" if isinstance(value, set) else "frozenset"
        return {{"__type__": kind, "data": [_runner_safe(item) for item in value]}}
    if isinstance(value, complex):
        return {{"__type__": "complex", "real": value.real, "imag": value.imag}}
    import datetime
    if isinstance(value, datetime.datetime):
        return {{"__type__": "datetime", "data": value.isoformat()}}
    if isinstance(value, datetime.date):
        return {{"__type__": "date", "data": value.isoformat()}}
    if isinstance(value, datetime.time):
        return {{"__type__": "time", "data": value.isoformat()}}
    if isinstance(value, datetime.timedelta):
        return {{"__type__": "timedelta", "total_seconds": value.total_seconds()}}
    import decimal
    if isinstance(value, decimal.Decimal):
        return {{"__type__": "Decimal", "data": str(value)}}
    try:
        import base64
        import io
        import pathlib
    except ImportError:  # the restricted tier offers none of them
        return str(value)
    if isinstance(value, bytes):
        return {{"__type__": "bytes", "data": base64.b64encode(value).decode()}}
    if isinstance(value, pathlib.PurePath):
        return {{"__type__": "Path", "data": str(value)}}
    try:
        import PIL.Image
        if isinstance(value, PIL.Image.Image):
            buffer = io.BytesIO()
            value.save(buffer, format="PNG")
            return {{"__type__": "PIL.Image", "data": base64.b64encode(buffer.getvalue()).decode()}}
    except ImportError:
        pass
    try:
        import numpy
        if isinstance(value, numpy.ndarray):
            return {{"__type__": "ndarray", "data": value.tolist(), "dtype": str(value.dtype)}}
        if isinstance(value, numpy.generic):
            return value.item()
    except ImportError:
        pass
    return str(value)


def _runner_answer_text(answer):
    """The answer as the exception carries it: inline, or in {ANSWER_FILE} when long."""
    text = "{SAFE_PREFIX}" + _runner_json.dumps(_runner_safe(answer))
    if len(text) <= {INLINE_ANSWER_CHARS}:
        return text
    try:
        import os
        os.makedirs("{PRIVATE_DIR}", exist_ok=True)
        with open("{ANSWER_FILE}", "w", encoding="utf-8") as out:
            out.write(text)
    except Exception:  # no files here (the restricted tier): the text, cut by the sandbox
        return text
    return "{FILE_PREFIX}{ANSWER_FILE}"


def {LAST_VALUE}(value):
    """The step's last expression: kept for the step's output (None is no output)."""
    if value is not None:
        try:
            import os
            os.makedirs("{PRIVATE_DIR}", exist_ok=True)
            with open("{LAST_VALUE_FILE}", "w", encoding="utf-8") as out:
                out.write("{SAFE_PREFIX}" + _runner_json.dumps(_runner_safe(value)))
        except Exception:  # no files here (the restricted tier): no output, as before
            pass
    return value
'''


def last_value(result: ExecutionResult) -> Any:
    """The value of the step's last expression (None when it had none, or could not say
    it: the restricted tier has no files), as smolagents' remote executors return it."""
    if not any(made.name == LAST_VALUE_FILE for made in result.files):
        return None
    return decode_answer(FILE_PREFIX + LAST_VALUE_FILE, result)


def decode_answer(message: str, result: ExecutionResult) -> Any:
    """The final answer a step's FinalAnswerException carried (`message`), as the agent
    gets it from smolagents' own remote executors; its text (made printable) when it is
    not in their format or does not pass the bounds above."""
    text = message
    if message.startswith(FILE_PREFIX):
        wanted = message[len(FILE_PREFIX):]
        found = next((made for made in result.files if made.name == wanted and made.kept), None)
        if found is None:
            return ("(the final answer was too large to come back: it passed the limit of "
                    f"{result.limits.max_returned_files_mb} MB of files per run)")
        text = found.data.decode("utf-8", errors="replace")
    if not text.startswith(SAFE_PREFIX):
        return sanitize_for_terminal(text)
    try:
        value = loads(text[len(SAFE_PREFIX):], ANSWER_BOUNDS, what="the final answer")
        return _decoded(value)
    except (JsonBoundsError, ValueError, TypeError, OverflowError, ArithmeticError,
            binascii.Error):  # cut by the sandbox, or not what the sandbox side writes
        return sanitize_for_terminal(text[len(SAFE_PREFIX):])


def _decoded(value: Any) -> Any:
    """The value for one node of the safe serialization (depth bounded by `loads`)."""
    if isinstance(value, list):
        return [_decoded(item) for item in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("__type__")
    if kind is None:
        return {key: _decoded(item) for key, item in value.items()}
    data = value.get("data")
    if kind == "tuple":
        return tuple(_decoded(item) for item in _list(data))
    if kind == "set":
        return {_hashable(_decoded(item)) for item in _list(data)}
    if kind == "frozenset":
        return frozenset(_hashable(_decoded(item)) for item in _list(data))
    if kind == "dict_with_complex_keys":
        return {_hashable(_decoded(pair[0])): _decoded(pair[1]) for pair in _list(data)
                if isinstance(pair, list) and len(pair) == 2}
    if kind == "bytes":
        return base64.b64decode(_str(data), validate=True)
    if kind == "complex":
        return complex(float(value["real"]), float(value["imag"]))
    if kind == "datetime":
        return datetime.datetime.fromisoformat(_str(data))
    if kind == "date":
        return datetime.date.fromisoformat(_str(data))
    if kind == "time":
        return datetime.time.fromisoformat(_str(data))
    if kind == "timedelta":
        return datetime.timedelta(seconds=float(value["total_seconds"]))
    if kind == "Decimal":
        return decimal.Decimal(_str(data))
    if kind == "Path":
        return pathlib.PurePosixPath(_str(data))  # a name in the sandbox, not a host file
    if kind == "PIL.Image":
        image = open_image(base64.b64decode(_str(data), validate=True))
        return image if image is not None else value
    if kind == "ndarray":
        return _array(data, value.get("dtype"))
    if kind == "dataclass":
        fields = data if isinstance(data, dict) else {}
        return {"__dataclass__": str(value.get("class_name")), "__module__": str(value.get("module")),
                **{key: _decoded(item) for key, item in fields.items()}}
    return {key: _decoded(item) for key, item in value.items()}


def _list(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise TypeError("not a list")
    return data


def _str(data: Any) -> str:
    if not isinstance(data, str):
        raise TypeError("not a string")
    return data


def _hashable(value: Any) -> Any:
    """A decoded member of a set or key of a dict: lists and dicts become tuples."""
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, _hashable(item)) for key, item in value.items())
    if isinstance(value, set):
        return frozenset(value)
    return value


def _array(data: Any, dtype: Any) -> Any:
    import numpy

    kind = numpy.dtype(_str(dtype))  # TypeError for a name numpy does not know
    if kind.kind not in _ARRAY_KINDS or kind.itemsize > 16:
        raise TypeError(f"an array of {kind} is not taken from the sandbox")
    return numpy.array(data, dtype=kind)


def open_image(data: bytes) -> Any:
    """A PIL image of `data` when it is a raster image runner shows as a picture, of at
    most MAX_IMAGE_PIXELS pixels, decoded whole; else None."""
    from ..files import media_type

    kind = media_type(data)
    if kind not in RASTER_IMAGES or kind not in _PIL_FORMATS:
        return None
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data), formats=[_PIL_FORMATS[kind]])
        width, height = image.size
        if width * height > MAX_IMAGE_PIXELS:
            image.close()
            return None
        image.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return image


def images_of(files: Iterable[OutputFile]) -> list[Any]:
    """PIL images of the raster images among `files` (the executor's own left out)."""
    opened = (open_image(made.data) for made in files
              if made.kept and made.media_type in RASTER_IMAGES and not private(made))
    return [image for image in opened if image is not None]
