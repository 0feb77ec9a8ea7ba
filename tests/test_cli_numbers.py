"""Every numeric option of every `runner` command: one definition (`cli_options.Number`), so
`nan`, `inf` and a number outside the option's range are usage errors (exit 2) that state
the range, before anything runs. The options are found by walking the command tree, so a
command added later is checked too."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from runner.cli import main
from runner.cli_options import Number


def numeric_options(group: click.Group = main, path: tuple[str, ...] = ()
                    ) -> Iterator[tuple[tuple[str, ...], click.Option]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from numeric_options(command, (*path, name))
            continue
        for param in command.params:
            if isinstance(param, click.Option) and param.type.name in (
                    "integer", "float", "number", "integer range", "float range"):
                yield (*path, name), param


OPTIONS = list(numeric_options())


def test_the_walk_finds_the_numeric_options():
    names = {(" ".join(path), option.opts[0]) for path, option in OPTIONS}
    for expected in [("exec", "--timeout"), ("math eval", "--llm-timeout"),
                     ("math check", "--timeout"), ("math train", "--temperature"),
                     ("agent", "--retries"), ("logs list", "-n"), ("logs serve", "--port")]:
        assert expected in names


@pytest.mark.parametrize(("path", "option"), OPTIONS,
                         ids=[f"{' '.join(p)} {o.opts[0]}" for p, o in OPTIONS])
def test_every_numeric_option_is_one_kind_and_refuses_nan_inf_and_out_of_range(path, option):
    assert isinstance(option.type, Number), f"{' '.join(path)} {option.opts[0]} is {option.type!r}"
    runner = CliRunner()
    name = option.opts[0]
    for value in ("nan", "inf", "-inf", "-1e400", "1e400"):
        result = runner.invoke(main, [*path, f"{name}={value}" if name.startswith("--") else name,
                                      *([] if name.startswith("--") else [value])])
        assert result.exit_code == 2, (value, result.output)
        assert "is not a " in result.output and option.type.valid.text() in result.output, \
            (value, result.output)
