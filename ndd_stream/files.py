"""Reading and writing users' files so that every error names its file.

Python leaves ``filename`` empty on an OSError raised by a read or a write (as opposed
to ``open``): ``/proc/self/mem``'s EIO, ``/dev/full``'s ENOSPC, a disk failing mid-file
would show as ``None: Input/output error``. Everything here re-raises them with the path,
so the command line (``ndd_stream.cli.errors.file_error``) can say which file in one line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO


def named(exc: OSError, name: object) -> OSError:
    """``exc``, or the same error naming ``name`` when it names no file."""
    if exc.filename is not None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(name))


def regular_file(source: Path | int) -> bool:
    """Whether ``source`` (a path, or an open file's descriptor) is a regular file, whose
    lines are all there: reading one ahead holds no record back, as it would from a pipe, a
    socket or a terminal. False when it cannot be told."""
    try:
        mode = os.fstat(source).st_mode if isinstance(source, int) else source.stat().st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(mode)


def named_lines(lines: Iterable[bytes], name: object) -> Iterator[bytes]:
    """The lines of an open binary file; a read error names ``name``."""
    it = iter(lines)
    while True:
        try:
            line = next(it)
        except StopIteration:
            return
        except OSError as exc:
            raise named(exc, name) from exc
        yield line


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise named(exc, path) from exc


def read_utf8(path: Path) -> str:
    """A UTF-8 text file; a binary one is a ValueError naming the file and the byte."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a UTF-8 text file (byte 0x{data[exc.start]:02x} at "
                         f"offset {exc.start})") from None


class NamedSink:
    """A binary sink whose OSErrors name it."""

    def __init__(self, sink: IO[bytes], name: object) -> None:
        self.sink = sink
        self.name = name

    def write(self, data: bytes) -> int:
        try:
            return self.sink.write(data)
        except OSError as exc:
            raise named(exc, self.name) from exc

    def flush(self) -> None:
        try:
            self.sink.flush()
        except OSError as exc:
            raise named(exc, self.name) from exc
