"""User errors of the command line, and how a settings error names what the user typed.

A user error (a missing file, a bad option or setting) is one line and exit code 2; a
traceback means a bug. Settings are validated by pydantic, whose messages name the field
(``threshold``); the user typed ``NDD_THRESHOLD`` or ``--threshold``, so the messages
here say that, with the allowed range.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import ValidationError

from ndd_stream.settings import Settings


class UsageError(Exception):
    """A user error: shown as ``ndd-stream CMD: error: MESSAGE``, exit code 2."""


class FileError(UsageError):
    """A user's file cannot be read or written: one line, no usage (the options are fine)."""


def file_error(exc: OSError | UnicodeDecodeError, path: object, what: str = "") -> FileError:
    """One line for a user's file that cannot be read or written: the option (``what``),
    the path and the reason. An OSError raised by a read or write (not by ``open``) has
    no filename (Python shows ``None``): ``path`` names the file then."""
    prefix = f"{what} " if what else ""
    if isinstance(exc, UnicodeDecodeError):
        return FileError(f"{prefix}{path}: not a UTF-8 text file (byte "
                         f"0x{exc.object[exc.start]:02x} at offset {exc.start})")
    if exc.strerror is None:  # raised with a message of its own ("corpus not found: X")
        return FileError(f"{prefix}{exc}")
    name = exc.filename if exc.filename is not None else path
    return FileError(f"{prefix}{name}: {exc.strerror}")


@contextmanager
def user_file(path: object, what: str = "") -> Iterator[None]:
    """Turn an OSError (or a UnicodeDecodeError) inside into a :class:`UsageError` naming
    ``path``: the one place user files get their one-line error."""
    try:
        yield
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error(exc, path, what) from None


def read_text(path: Path, what: str = "") -> str:
    """A user's UTF-8 text file, whole; any problem is a one-line :class:`UsageError`."""
    with user_file(path, what):
        return path.read_bytes().decode("utf-8")


def allowed_values(field: str) -> str | None:
    """The allowed values of a Settings field, as a user reads them: ``(0, 1]``, ``>= 1``."""
    info = Settings.model_fields.get(field)
    if info is None:
        return None
    if get_origin(info.annotation) is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(info.annotation))
    from ndd_stream.settings_doc import interval

    low, high = interval(info)
    if low and high:
        return f"{low}, {high}"
    if low:
        return (">" if low[0] == "(" else ">=") + " " + low[1:]
    if high:
        return ("<" if high[-1] == ")" else "<=") + " " + high[:-1]
    return None


def _typed(field: str, value: Any, cli_fields: set[str], config: Path | None) -> str:
    """What the user typed to set ``field``: an option, a variable, or a line of a file."""
    if field in cli_fields:
        return f"--{field.replace('_', '-')} {value}"
    env = "NDD_" + field.upper()
    if env not in os.environ and config is not None:
        return f"{env}={value} (in {config})"
    return f"{env}={value}"


def settings_error(exc: ValidationError, cli_fields: set[str], config: Path | None) -> str:
    """One line for all problems of a settings ValidationError."""
    problems = []
    for err in exc.errors(include_url=False):
        message = str(err["msg"]).removeprefix("Value error, ")
        if not err["loc"]:  # a model validator: the message names the variables itself
            problems.append(message)
            continue
        field = str(err["loc"][0])
        shown = _typed(field, err.get("input"), cli_fields, config)
        allowed = allowed_values(field)
        if allowed and err["type"] in ("greater_than", "greater_than_equal", "less_than",
                                       "less_than_equal", "literal_error"):
            problems.append(f"{shown}: allowed {allowed}")
        elif allowed:
            problems.append(f"{shown}: {message}; allowed {allowed}")
        else:
            problems.append(f"{shown}: {message}")
    return "; ".join(problems)


def settings_source_error(exc: Exception) -> str:
    """pydantic-settings' SettingsError (a complex value that is not JSON), named by variable."""
    match = re.search(r'field "(\w+)"', str(exc))
    if match is None:
        return str(exc)
    return f"NDD_{match.group(1).upper()}: not valid JSON (e.g. {{\"a\": \"b\"}})"
