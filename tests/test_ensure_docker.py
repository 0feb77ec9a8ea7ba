"""sandbox_images/ensure-docker.sh: when it may blame the storage driver.

Changing the driver orphans every image, so the script changes it only on evidence that
the driver is what fails. These tests run the script's own rule (extracted from the
script, so there is one definition) on the errors dockerd and `docker run` print. The
restart itself is exercised against the real engine in tests/test_docker_faults.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "sandbox_images" / "ensure-docker.sh"


def storage_evidence(text: str) -> str:
    source = SCRIPT.read_text()
    signs = re.search(r"^STORAGE_SIGNS=.*$", source, re.MULTILINE)
    rule = re.search(r"^storage_evidence_in\(\) \{.*?^\}", source, re.MULTILINE | re.DOTALL)
    assert signs and rule, "the rule moved: update this test"
    program = f'{signs.group(0)}\n{rule.group(0)}\nstorage_evidence_in "$1"\n'
    return subprocess.run(["bash", "-c", program, "rule", text], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


@pytest.mark.parametrize("error", [
    "failed to start daemon: error initializing graphdriver: driver not supported",
    'level=error msg="[graphdriver] prior storage driver overlay2 failed: driver not supported"',
    "docker: Error response from daemon: error creating overlay mount to "
    "/var/lib/docker/overlay2/0a1b-init/merged: invalid argument.",
    "overlay2: the backing xfs filesystem is formatted without d_type support",
])
def test_errors_of_the_storage_driver_are_evidence(error):
    assert storage_evidence(error) == error


@pytest.mark.parametrize("error", [
    # What a second dockerd says while the old one is still exiting:
    "failed to start daemon: pid file found, ensure docker is not running or delete "
    "/var/run/docker.pid",
    "failed to start daemon: error while opening volume store metadata database "
    "(/var/lib/docker/volumes/metadata.db): timeout",
    "failed to start containerd: timeout waiting for containerd to start",
    # A daemon that does not answer (starting, or exiting):
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker "
    "daemon running?",
    # Other faults a new driver would not fix:
    "docker: Error response from daemon: OCI runtime create failed: container_linux.go:380: "
    "starting container process caused: process_linux.go:545: container init caused: "
    "cgroup: memory: no such file or directory",
    # A choice for a person to make, not a broken driver:
    "failed to start daemon: error initializing graphdriver: /var/lib/docker contains several "
    "valid graphdrivers: overlay2, vfs; Please cleanup or explicitly choose storage driver",
])
def test_other_failures_are_not_evidence(error):
    assert storage_evidence(error) == ""

