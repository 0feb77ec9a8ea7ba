"""Images a turn's code made, shown to a vision model (`Agent(attach_images=True)`).

A chat-completions server that reads images takes them as `image_url` parts of a user
message (data URLs). After a turn's feedback, the raster images its executions made (by
their sniffed type, never their names; SVG never) follow as one user message: a text part
naming them, then the images, at most MAX_IMAGES of at most MAX_IMAGE_BYTES each (the
others are named as left out). Images are only worth sending while they are new, and
each costs the model as much as a page of text: `drop_old_images` keeps the image parts
of the newest such message only, and turns older ones into their text part, in what is
sent (the log keeps every message as it was).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Sequence

from ..files import RASTER_IMAGES, format_size
from ..types import OutputFile
from .llm import Message

MAX_IMAGES = 4
MAX_IMAGE_BYTES = 4 * 1024 * 1024


def image_message(files: Iterable[OutputFile]) -> Message | None:
    """The user message showing the images among `files` (None when there are none)."""
    images = [made for made in files if made.media_type in RASTER_IMAGES and made.kept]
    if not images:
        return None
    shown = [made for made in images if made.size <= MAX_IMAGE_BYTES][:MAX_IMAGES]
    left_out = [made for made in images if made not in shown]
    text = "The images your code made: " + ", ".join(
        f"{made.name} ({format_size(made.size)})" for made in shown)
    if left_out:
        text += (f". Not shown (at most {MAX_IMAGES} images of "
                 f"{format_size(MAX_IMAGE_BYTES)} each): " + ", ".join(made.name for made in left_out))
    parts: list[dict[str, object]] = [{"type": "text", "text": text + "."}]
    for made in shown:
        url = f"data:{made.media_type};base64,{base64.b64encode(made.data).decode('ascii')}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": parts}


def _has_images(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") == "image_url" for part in content)


def drop_old_images(messages: Sequence[Message]) -> list[Message]:
    """A copy of `messages` in which only the newest message with images keeps them."""
    with_images = [index for index, message in enumerate(messages) if _has_images(message)]
    if len(with_images) <= 1:
        return list(messages)
    sent = list(messages)
    for index in with_images[:-1]:
        older = copy.copy(sent[index])
        texts = [str(part.get("text", "")) for part in older["content"]
                 if isinstance(part, dict) and part.get("type") == "text"]
        older["content"] = " ".join(texts) + " (no longer shown)"
        sent[index] = older
    return sent
