"""The ``ndd-stream`` command line: the parser (:mod:`.main`), the subcommands around
Kafka (:mod:`.commands`, :mod:`.io_commands`), the demo (:mod:`.demo`) and ``eval``.

Importing this package sets up the process for a subcommand: every subcommand builds its
settings (pydantic-settings) and loads the core (numpy), so both are imported here, first,
the cheap way (:func:`_import_libraries`)."""

import gc
import os
import sys
import types
from typing import Any

# numpy's OpenBLAS starts a busy thread per core when it is imported, ~0.1 s of CPU in
# every process; ndd-stream does no linear algebra. Set before anything imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


class _AsyncioOnFirstUse(types.ModuleType):
    """What ``pydantic_settings.main`` gets for its ``import asyncio``: it uses asyncio
    only to run an async ``CliApp`` command, and ndd-stream has none. The first attribute
    read imports the real asyncio (into ``sys.modules``, as any import) and reads it."""

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get("asyncio") is self:  # read during the import below
            del sys.modules["asyncio"]
        import asyncio

        return getattr(asyncio, name)


def _import_pydantic_settings() -> None:
    """pydantic-settings without the asyncio it imports at its top, unused (with ssl,
    socket, subprocess and concurrent.futures, 41 modules: ~6% of a ``dedup`` start-up).
    The stand-in is in ``sys.modules`` during this one import only (the command line has
    no other thread yet): any later ``import asyncio`` gets the real module."""
    if "pydantic_settings" in sys.modules or "asyncio" in sys.modules:
        return
    stand_in = sys.modules["asyncio"] = _AsyncioOnFirstUse("asyncio")
    try:
        import pydantic_settings  # noqa: F401
    finally:
        if sys.modules.get("asyncio") is stand_in:
            del sys.modules["asyncio"]


def _import_libraries() -> None:
    """pydantic-settings (with pydantic) and numpy: three quarters of a start-up, ~60,000
    objects that live as long as the process. The garbage collector is off meanwhile
    (otherwise its collections traverse them again and again, ~3% of a start-up) and
    they are frozen: later collections skip them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        _import_pydantic_settings()
        import numpy  # noqa: F401
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


_import_libraries()
