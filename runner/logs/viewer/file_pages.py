"""An execution's files, served to the browser: every one hostile.

A file a run made is whatever its code wrote: an SVG or HTML page that runs script, a
"picture" that is HTML, a name built to break a header. So:

- only raster images (PNG, JPEG, GIF, WebP, BMP: runner.files.RASTER_IMAGES, by the type
  sniffed from the bytes when the run ended) are served for the page to show, as what
  they are; everything else (SVG and HTML included) is served as
  `application/octet-stream` with `Content-Disposition: attachment`, so the browser saves
  it and never renders it in the viewer's origin;
- every file response carries a Content-Security-Policy of its own, `sandbox` included:
  even a file opened directly runs no script and reaches nothing;
- the download's name is the file's last part, as plain ASCII in `filename=` (anything
  else replaced) and percent-encoded UTF-8 in `filename*=`: no quote, semicolon or line
  break of the name reaches the header as itself.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ...errors import NotFoundError
from ...files import RASTER_IMAGES
from ..execution_files import IN, OUT, file_row
from ..store import LogStore
from .common import page

FILE_CSP = "default-src 'none'; img-src 'self'; style-src 'none'; sandbox"
_UNSAFE_IN_HEADER = re.compile(r"[^A-Za-z0-9._-]")


def disposition(name: str) -> str:
    """A Content-Disposition that saves the file under its last part, safely."""
    leaf = name.rsplit("/", 1)[-1] or "file"
    plain = _UNSAFE_IN_HEADER.sub("_", leaf)[:150] or "file"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(leaf, safe='')}"


@page
def execution_file(request: Request, store: LogStore) -> Response:
    execution_id = request.path_params["execution_id"]
    direction = request.path_params["direction"]
    position = request.path_params["position"]
    if direction not in (IN, OUT):
        raise NotFoundError(f"no files {direction!r}: an execution's files are 'in' or 'out'",
                            fix="follow a link from the execution's page")
    found = store.read(lambda conn: file_row(conn, execution_id, direction, position))
    if found is None:
        raise NotFoundError(f"execution {execution_id} has no file {direction}/{position}",
                            fix="follow a link from the execution's page")
    headers = {"content-security-policy": FILE_CSP, "x-content-type-options": "nosniff"}
    if found["data"] is None:
        return PlainTextResponse("the log recorded this file without its bytes (its cap for "
                                 "files, RUNNER_LOG_FILES_MB, was reached)\n", 410, headers=headers)
    inline = found["media_type"] in RASTER_IMAGES and request.query_params.get("download") != "1"
    if inline:
        return Response(found["data"], media_type=found["media_type"], headers=headers)
    return Response(found["data"], media_type="application/octet-stream",
                    headers={**headers, "content-disposition": disposition(found["name"])})


def routes() -> list[Route]:
    return [Route("/executions/{execution_id}/files/{direction}/{position:int}", execution_file)]
