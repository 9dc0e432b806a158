"""``python -m ndd_stream.cli ...``: the same as the ``ndd-stream`` console script."""

from ndd_stream.cli.main import main

raise SystemExit(main())
