"""The ``ndd-stream`` command line: the parser (:mod:`.main`), the subcommands around
Kafka (:mod:`.commands`, :mod:`.io_commands`), the demo (:mod:`.demo`) and ``eval``."""

import os

# numpy's OpenBLAS starts a busy thread per core when it is imported, ~0.1 s of CPU in
# every process; ndd-stream does no linear algebra. Set before anything imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
