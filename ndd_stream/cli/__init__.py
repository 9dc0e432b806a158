"""The ``ndd-stream`` command line: the parser (:mod:`.main`), the subcommands around
Kafka (:mod:`.commands`, :mod:`.io_commands`), the demo (:mod:`.demo`) and ``eval``."""
