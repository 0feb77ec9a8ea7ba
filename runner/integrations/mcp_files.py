"""Files across the MCP server: the files a client hands `run_python` and `call_function`,
and the files a run made, as MCP content the client's model can see.

- In: `files`, a list of `{"name", "text"}` or `{"name", "base64"}` objects (pydantic,
  strict: exactly one content, nothing else), under runner.files' rules and limits.
- Out: the reply is sized for a model. Its first block is what the model reads: the
  status line, then what the run printed and what went wrong, as the other integrations
  show a block (`common.block_output`: head and tail within MAX_MODEL_CHARS, the cut
  saying where the whole is), then the files it made. The structured content is the
  result as JSON with stdout and stderr cut the same way (the log keeps what the run
  returned), each file there as name, size, media type, sha256 and `uri`, never its
  bytes. A run that did not end `ok` is a tool error (`isError`), as a failed command is
  for any MCP tool. Then each file in turn, while MAX_INLINE_BYTES of them fit (under
  the 1 MiB an HTTP client takes in one event, base64 included): a raster image (by its
  sniffed type, never its name) as image content, UTF-8 text as a text resource,
  anything else (SVG and HTML included) as a blob resource. A file past that, or one the
  log kept without its bytes, is a resource link to
  `runner://executions/{handle}/files/{position}`, which the server reads from the log
  (the handle is the execution's id and the server's seal on it: mcp.py).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..agent.feedback import clip
from ..errors import ConfigurationError
from ..files import MAX_INPUT_BYTES, RASTER_IMAGES, input_files
from ..types import ExecutionResult, InputFile, OutputFile, Status
from .common import DEFAULT_MAX_OUTPUT_CHARS, block_output, cut_note

__all__ = ["EXECUTION_URI", "FILE_URI", "MAX_INLINE_BYTES", "FileArgument", "given_files", "reply"]

EXECUTION_URI = "runner://executions/{execution}"
FILE_URI = EXECUTION_URI + "/files/{position}"
MAX_INLINE_BYTES = 512 * 1024  # of a reply's files; the rest are links to read later
MAX_MODEL_CHARS = DEFAULT_MAX_OUTPUT_CHARS  # of what a run printed, in each of the two forms


class FileArgument(BaseModel):
    """A file a client hands a run: its name in the run's directory, and its content as
    text (written as UTF-8) or as base64."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="relative path in the run's directory, e.g. 'data.csv'")
    text: str | None = Field(default=None, description="the content, as text")
    base64: str | None = Field(default=None, description="the content, base64-encoded")

    @model_validator(mode="after")
    def _one_content(self) -> FileArgument:
        if (self.text is None) == (self.base64 is None):
            raise ValueError(f"file {self.name[:80]!r}: give exactly one of text and base64")
        return self

    def content(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8", errors="surrogateescape")
        try:
            return base64.b64decode(self.base64 or "", validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"file {self.name[:80]!r}: base64 is not valid base64",
                                     fix="encode the bytes with standard base64") from None


def given_files(files: list[FileArgument] | None) -> tuple[InputFile, ...]:
    """The files for the run (runner.files' rules; a ConfigurationError names the problem)."""
    if not files:
        return ()
    # The total is checked on the encoded sizes before anything is decoded (base64 is 4/3
    # of its bytes): a client cannot make the server hold more than the limit first.
    encoded = sum(len(item.text.encode("utf-8", "surrogateescape")) if item.text is not None
                  else len(item.base64 or "") * 3 // 4 for item in files)
    if encoded > MAX_INPUT_BYTES:
        raise ConfigurationError(
            f"the files given hold about {encoded:,} bytes, over the {MAX_INPUT_BYTES:,} a run "
            "takes", fix="give fewer or smaller files")
    named: dict[str, bytes] = {}
    for item in files:
        if item.name in named:
            raise ConfigurationError(f"file name {item.name[:80]!r} is given twice",
                                     fix="give each file a name of its own")
        named[item.name] = item.content()
    return input_files(named)


def reply(result: ExecutionResult, extra: dict[str, Any] | None = None, *,
          handle: str) -> CallToolResult:
    """The tool's reply for a result (see the module docstring); `handle` names the
    execution in the resources' URIs (the server's, which only this reply carries)."""
    data = result.to_json_dict()
    data["uri"] = EXECUTION_URI.format(execution=handle)
    uris = [FILE_URI.format(execution=handle, position=position)
            for position in range(len(result.files))]
    data["files"] = [{"name": made.name, "size": made.size, "media_type": made.media_type,
                      "sha256": made.sha256, "uri": uri} for made, uri in zip(result.files, uris,
                                                                              strict=True)]
    note = cut_note(result, f"runner's log ({data['uri']})")
    for stream in ("stdout", "stderr"):
        data[stream], _ = clip(data[stream], MAX_MODEL_CHARS, note=note)
    data.update(extra or {})
    content: list[ContentBlock] = [TextContent(type="text", text=_model_text(result, extra))]
    budget = MAX_INLINE_BYTES
    for made, uri in zip(result.files, uris, strict=True):
        block = _inline(made, uri) if made.kept and made.size <= budget else None
        # What a block costs is its size on the wire (base64, or text with JSON's escapes:
        # a control character is six bytes there), not the file's.
        cost = len(block.model_dump_json(by_alias=True)) if block is not None else 0
        if block is None or cost > budget:
            content.append(ResourceLink(type="resource_link", uri=uri, name=made.name,
                                        mime_type=made.media_type, size=made.size))
            continue
        budget -= cost
        content.append(block)
    return CallToolResult(content=content, structured_content=data,
                          is_error=result.status is not Status.OK)


def _inline(made: OutputFile, uri: str) -> ContentBlock:
    """A file as a content block of the reply itself: an image as an image, UTF-8 text as
    text, anything else as a blob."""
    encoded = base64.b64encode(made.data).decode("ascii")
    if made.media_type in RASTER_IMAGES:
        return ImageContent(type="image", data=encoded, mime_type=made.media_type)
    if made.media_type == "text/plain":
        return EmbeddedResource(type="resource", resource=TextResourceContents(
            uri=uri, mime_type="text/plain", text=made.data.decode("utf-8", errors="replace")))
    return EmbeddedResource(type="resource", resource=BlobResourceContents(
        uri=uri, mime_type=made.media_type, blob=encoded))


def _model_text(result: ExecutionResult, extra: dict[str, Any] | None) -> str:
    """What the model reads of a result: one line of facts, then the block's output."""
    facts = [f"status: {result.status}", f"execution {result.id}", f"{result.duration_ms} ms"]
    facts += [f"{key} {value}" for key, value in (extra or {}).items()]
    if result.return_value is not None:
        facts.append(f"return_value: {json.dumps(result.return_value, default=str)[:MAX_MODEL_CHARS // 4]}")
    output = block_output(result, max_chars=MAX_MODEL_CHARS)
    return "; ".join(facts) + ("\n" + output if output else "")
