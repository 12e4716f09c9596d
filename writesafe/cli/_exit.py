"""The `writesafe` command's exit codes (documented in `writesafe --help` and docs/cli.md)."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the command ran and found a failure (a mismatch, a refused resolution)
    USAGE = 2  # bad arguments, or an application path that does not load
    UNAVAILABLE = 3  # the database or Redis could not be reached
    NOT_FOUND = 4  # no operation under that key
