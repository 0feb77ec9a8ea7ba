"""The sandbox image: its tag, whether it is built, and building it.

The tag carries the project version and a hash of everything that goes into the image
(the worker program, the Dockerfile, the pinned libraries), so an upgrade, or an edit
of the worker, never runs an old worker: it asks for an image that does not exist yet.
The images are built by the scripts in sandbox_images/ (see their headers); this module
finds them and runs them.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..errors import BackendUnavailableError
from .engine import image_id, list_images

REPOSITORY = "runner-sandbox"
BASE_IMAGE = "runner-base:bookworm-py3"
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def images_dir() -> Path:
    """sandbox_images/ of this checkout (the runner builds its images from source)."""
    configured = os.environ.get("RUNNER_SANDBOX_IMAGES_DIR")
    directory = Path(configured) if configured else _PACKAGE_ROOT.parent / "sandbox_images"
    if not (directory / "build-sandbox.sh").is_file():
        raise BackendUnavailableError(
            f"the image definitions are not at {directory}",
            fix="run the runner from its source checkout (pip install -e .), or set "
                "RUNNER_SANDBOX_IMAGES_DIR to the sandbox_images directory")
    return directory


def _content_hash() -> str:
    digest = hashlib.sha256()
    worker = _PACKAGE_ROOT / "worker"
    inputs = sorted(path for path in worker.rglob("*.py") if "__pycache__" not in path.parts)
    try:
        directory = images_dir()
        inputs += [directory / "sandbox" / "Dockerfile", directory / "sandbox" / "requirements.txt"]
    except BackendUnavailableError:
        pass
    for path in inputs:
        digest.update(str(path.relative_to(worker) if path.is_relative_to(worker)
                          else path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def default_tag() -> str:
    override = os.environ.get("RUNNER_SANDBOX_IMAGE")
    return override or f"{REPOSITORY}:{__version__}-{_content_hash()}"


@dataclass(frozen=True)
class ImageStatus:
    tag: str
    id: str | None

    @property
    def built(self) -> bool:
        return self.id is not None


def status(tag: str | None = None) -> ImageStatus:
    tag = tag or default_tag()
    return ImageStatus(tag, image_id(tag))


def require(tag: str | None = None) -> ImageStatus:
    current = status(tag)
    if not current.built:
        raise BackendUnavailableError(
            f"the sandbox image {current.tag} is not built",
            fix="run `runner images build` (or `runner doctor --fix`)")
    return current


def build(tag: str | None = None, *, base_from_pull: str | None = None,
          force: bool = False) -> ImageStatus:
    """Build the base image (if missing) and the sandbox image; progress goes to stderr."""
    tag = tag or default_tag()
    directory = images_dir()
    env = dict(os.environ)
    if base_from_pull:
        env["RUNNER_BASE_FROM_PULL"] = base_from_pull
    command = ["bash", str(directory / "build-sandbox.sh"), "--tag", tag]
    if force:
        command.append("--no-cache")
    proc = subprocess.run(command, check=False, env=env, stdout=subprocess.DEVNULL,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise BackendUnavailableError(
            f"building the sandbox image {tag} failed (exit status {proc.returncode}); "
            "its progress lines above say where",
            fix="run `runner doctor` to check the engine, then `runner images build` again")
    return status(tag)


def listed() -> list[dict[str, str]]:
    return list_images(REPOSITORY) + list_images(BASE_IMAGE.split(":")[0])
