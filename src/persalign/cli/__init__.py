"""The front door: `persalign` (cli/commands.py's subcommands, cli/parser.py's options) and `persalign study`."""


def main(argv: list[str] | None = None) -> int:
    """`persalign ARGS...`; commands.py is imported only when called, so `python -m persalign.cli.commands` runs
    it once (no second copy under the package)."""
    from persalign.cli.commands import main as run_command

    return run_command(argv)
