"""Helpers shared by the bad-input suites: run the CLI expecting one error line; write JSON-lines bytes."""

import json

from persalign import cli

QUIET = dict(log=lambda *_: None)


def cli_error(capsys, argv) -> str:
    """Run the CLI, expect a non-zero exit and exactly one line on stderr; return that line."""
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0, err
    assert len(err) == 1, err
    return err[0]


def jsonl_bytes(records) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)
