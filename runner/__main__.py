"""`python -m runner` is the `runner` command."""

from .cli import main

main()
