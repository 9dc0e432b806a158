# ndd-stream worker image.
#
#   docker build -t ndd-stream:0.1.0 .
#   docker run --rm -e NDD_BROKERS=kafka:9092 ndd-stream:0.1.0 worker
#
# Entry point is the `ndd-stream` CLI; the default command is `worker`, so
# `topics apply`, `produce FILE.jsonl` and `demo` run from the same image.
# The state directory (RocksDB, one store per partition) is a volume at
# /var/lib/ndd-stream (NDD_DATA_DIR). /metrics and /health listen on 6066.

ARG PYTHON_VERSION=3.11

# --- build: install the package and its dependencies into a venv ----------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# A C compiler for the detector's kernels (ndd_stream/core/_kernels.c, _count.c, _block.c,
# _probe.c; ~4x faster decisions at large windows); only this stage has it. Versions follow
# the base image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    NDD_REQUIRE_KERNELS=1

WORKDIR /src
# Everything the wheel build needs: pyproject.toml names README.md as the readme,
# force-includes topics/ as ndd_stream/_topics (the bundled topic definitions) and
# compiles the kernels with hatch_build.py.
COPY pyproject.toml README.md hatch_build.py ./
COPY ndd_stream/ ndd_stream/
COPY topics/ topics/
RUN pip install --no-cache-dir . \
    && ndd-stream --help > /dev/null \
    && python -c "from ndd_stream.core.kernels import IMPLEMENTATION as I; assert I == 'c', I"

# --- runtime: slim base, the venv, a non-root user --------------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime

LABEL org.opencontainers.image.title="ndd-stream" \
      org.opencontainers.image.description="Streaming near-duplicate filter for news on Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 ndd \
    && useradd --system --uid 10001 --gid ndd --no-create-home \
       --home-dir /var/lib/ndd-stream --shell /usr/sbin/nologin ndd \
    && mkdir -p /var/lib/ndd-stream \
    && chown ndd:ndd /var/lib/ndd-stream

COPY --from=build /opt/venv /opt/venv
# The bundled sample feed at a stable path, for `ndd-stream produce` (compose loader).
COPY ndd_stream/data/sample_feed.jsonl /usr/share/ndd-stream/sample_feed.jsonl

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NDD_DATA_DIR=/var/lib/ndd-stream \
    NDD_WEB_HOST=0.0.0.0 \
    NDD_WEB_PORT=6066

WORKDIR /var/lib/ndd-stream
USER 10001:10001
VOLUME ["/var/lib/ndd-stream"]
EXPOSE 6066

HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=4 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('NDD_WEB_PORT', '6066') + '/health', timeout=4)"]

ENTRYPOINT ["ndd-stream"]
CMD ["worker"]
