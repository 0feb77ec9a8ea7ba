"""`runner doctor` and `runner images`: set up and check the Docker tier."""

from __future__ import annotations

import sys

import click


@click.command("doctor")
@click.option("--fix", is_flag=True,
              help="Install and start the engine when possible (root), and build the images.")
@click.option("--no-self-test", is_flag=True, help="Skip the isolation self-test container.")
def doctor_command(fix: bool, no_self_test: bool) -> None:
    """Is the Docker backend usable here? What to do if not."""
    from .docker.doctor import diagnose

    report = diagnose(fix=fix, self_check=not no_self_test)
    for check in report.checks:
        mark = "ok  " if check.ok else "FAIL"
        click.echo(f"[{mark}] {check.name}: {check.detail}")
        if not check.ok and check.fix:
            click.echo(f"       fix: {check.fix}")
    click.echo("the restricted backend needs none of this; it works without Docker")
    sys.exit(0 if report.ok else 1)


@click.group("images")
def images_group() -> None:
    """Build and list the sandbox images."""


@images_group.command("build")
@click.option("--base-from-pull", metavar="IMAGE",
              help="Start from a pulled image (e.g. python:3.11-slim) instead of debootstrap.")
@click.option("--force", is_flag=True, help="Rebuild without the engine's cache.")
def images_build(base_from_pull: str | None, force: bool) -> None:
    """Build the base and sandbox images (progress on stderr); prints the tag."""
    from .docker import images

    status = images.build(base_from_pull=base_from_pull, force=force)
    click.echo(status.tag)


@images_group.command("list")
def images_list() -> None:
    """The runner's images on this engine, and which one this version uses."""
    from .docker import images

    current = images.default_tag()
    rows = images.listed()
    if not rows:
        click.echo(f"no images; this version uses {current}: run `runner images build`")
        return
    for row in rows:
        tag = f"{row.get('Repository')}:{row.get('Tag')}"
        marker = "*" if tag == current else " "
        click.echo(f"{marker} {tag:<45} {row.get('ID', '')[:19]:<20} {row.get('Size', ''):>8}  "
                   f"{row.get('CreatedSince', '')}")
    click.echo(f"(* = used by this version: {current})")
