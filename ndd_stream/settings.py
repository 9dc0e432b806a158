"""The one settings object of the service.

Built once at the entry point (CLI) from, highest precedence first, command-line
options, ``NDD_*`` environment variables and an optional ``.env``-style file
(``--config``), then passed down. Frozen, so no component can change another's view of
the configuration. :data:`SETTING_GROUPS` sorts the fields for ``--help`` and
docs/CONFIGURATION.md (``ndd_stream/settings_doc.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ndd_stream.core.detector import (
    BITMAP_BITS_MAX,
    BITMAP_BITS_MIN,
    DEFAULT_THRESHOLD,
    DetectorConfig,
    IndexKind,
    NoveltyMode,
)
from ndd_stream.core.extract import DEFAULT_EXTRACT, DEFAULT_MAX_HTML_DEPTH, ExtractMode
from ndd_stream.core.items import ItemFormat
from ndd_stream.core.kernels import DEFAULT_DENSE_FRACTION, available_cores
from ndd_stream.core.stories import KeepPolicy

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
#: A list setting, written ``a,b,c`` in the environment (not JSON): split by a validator.
CommaList = Annotated[list[str], NoDecode]


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/ndd-stream``, else ``~/.local/share/ndd-stream``: an absolute path,
    so a worker started from another directory finds the same state (a relative default
    left a fresh, empty window in every working directory)."""
    base = os.environ.get("XDG_DATA_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "share"
    return root / "ndd-stream"


class Settings(BaseSettings):
    """Every knob of ndd-stream. Environment variable = ``NDD_`` + upper-case field name."""

    model_config = SettingsConfigDict(
        env_prefix="NDD_", frozen=True, extra="forbid", env_file=None, validate_default=True
    )

    # --- Kafka connection -------------------------------------------------------------
    brokers: CommaList = Field(
        default_factory=lambda: ["127.0.0.1:9092"],
        description="Kafka bootstrap servers (host:port), comma separated.",
    )
    security_protocol: SecurityProtocol = Field(
        "PLAINTEXT",
        description="Kafka security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
    )
    sasl_mechanism: SaslMechanism = Field(
        "PLAIN", description="SASL mechanism when security_protocol is SASL_*."
    )
    sasl_username: str | None = Field(None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(
        None, description="SASL password (never logged; shown as '**********')."
    )
    ssl_cafile: Path | None = Field(None, description="CA bundle (PEM) to verify the brokers.")
    ssl_certfile: Path | None = Field(None, description="Client certificate (PEM) for mutual TLS.")
    ssl_keyfile: Path | None = Field(None, description="Client private key (PEM) for mutual TLS.")
    ssl_check_hostname: bool = Field(
        True, description="Verify the broker host name against its certificate."
    )

    # --- Topics -----------------------------------------------------------------------
    app_id: str = Field(
        "ndd-stream", description="Faust application id: consumer group and internal topic prefix."
    )
    raw_topics: CommaList = Field(
        default_factory=lambda: ["news.raw"], description="Raw input topics, comma separated."
    )
    raw_topic_pattern: str | None = Field(
        None, description="Regex of raw input topics; replaces raw_topics when set."
    )
    unique_topic: str = Field("news.unique", description="Output topic for items routed unique.")
    duplicate_topic: str = Field(
        "news.duplicate", description="Output topic for near and exact duplicates."
    )
    dlq_topic: str = Field(
        "news.dlq", description="Dead-letter topic for items that fail validation."
    )
    decisions_topic: str | None = Field(
        "news.decisions",
        description="Audit topic (one compact record per item); empty disables it.",
    )
    topics_file: Path | None = Field(
        None, description="Topic definitions (YAML); default: the bundled topics/ definitions."
    )

    # --- Detection (see ndd_stream.core) ----------------------------------------------
    threshold: float = Field(
        DEFAULT_THRESHOLD,
        gt=0.0,
        le=1.0,
        description="doc_q threshold of a near duplicate. 0.3 with the novelty rule suits "
        "newswire and web pages (docs/EVALUATION.md).",
    )
    q: int = Field(4, ge=1, le=16, description="q-gram length.")
    bitmap_filter_bits: int | None = Field(
        None,
        description="Bitmap filter of 2**bits bits per document in the window; unset: 14 "
        "(2 KiB per document) for thresholds >= 0.5, else off. Speed only.",
    )
    window_hours: int = Field(
        24, ge=0, le=24 * 30, description="Hours before the item's hour in its window."
    )
    case_sensitive: bool = Field(
        False,
        description="Keep letter case (True reproduces the paper exactly; default folds case).",
    )
    extract: ExtractMode = Field(
        DEFAULT_EXTRACT,
        description="Text compared: raw (as is), tags (HTML stripped), main (the page's main "
        "content, then only its prose blocks: no bylines, menus or share links).",
    )
    max_html_depth: int = Field(
        DEFAULT_MAX_HTML_DEPTH,
        ge=1,
        le=100_000,
        description="HTML nested deeper (or elements x depth over 2 million) is extracted as "
        "flat text, in linear time (docs/RELIABILITY.md, Security).",
    )
    scope: str = Field(
        "channel",
        description="Comparison scope: 'channel', 'global', or the name of another item field.",
    )
    scope_map: dict[str, str] = Field(
        # a lambda, not ``dict``: pydantic inspects a factory's signature, and a builtin's
        # is parsed from text by tokenize's large regex (~1% of a ``dedup`` start-up)
        default_factory=lambda: {},
        description="JSON object mapping a scope value (e.g. a channel) to a dedup group.",
    )
    novelty: NoveltyMode = Field(
        "auto",
        description="Novelty rule: a match with other figures, another subject or a new "
        "headline is routed unique, explained in ndd-novel. auto: plain text only; on; off.",
    )
    keep: KeepPolicy = Field(
        "first",
        description="Which version of a story a reader keeps. first: every near duplicate "
        "goes to the duplicates topic; complete: a near duplicate holding what the story's "
        "kept version says and materially more goes to the unique topic with "
        "ndd-supersedes. See docs/STORIES.md.",
    )
    index_duplicates: bool = Field(
        True,
        description="Index every item after its decision (the paper's Fig. 2); false: unique "
        "ones only.",
    )

    # --- Scaling one scope (never changes a decision; docs/DEPLOYMENT.md) ---
    shards: int = Field(
        1, ge=1, le=64,
        description="Split every scope's window over this many shards (partitions with their "
        "own state) so one scope spreads over workers; same decisions. Changing it needs new "
        "state (a new app_id). Needs index_duplicates.",
    )
    gather_memory_mb: int = Field(
        128, ge=0,
        description="With shards > 1: MiB of items waiting for the shards' answers kept in "
        "memory per scoped partition; the rest wait in a spill file beside its state.",
    )

    # --- Speed of the core (never changes a decision; docs/BENCHMARK.md) --------------
    count_threads: int | None = Field(
        None,
        ge=1,
        description="Threads one decision's count may use; unset: the cores this process may "
        "use, or 1 with shards > 1 (both would compete for the cores). 1 with several "
        "workers per host.",
    )
    lookup_thread: Literal["auto", "on", "off"] = Field(
        "auto",
        description="dedup: each item's lookup and indexing in the flat index run on one "
        "engine thread (for every scope's window) while the next item is read, parsed and "
        "signed (same decisions and output). auto: on for a regular input file when this "
        "process may use two cores or more. The thread polls for the next item instead of "
        "sleeping, so the CPU time exceeds the wall time.",
    )
    index: IndexKind = Field(
        "auto",
        description="The window's index: flat (C kernels: a hash table of q-grams, one call "
        "per item), lsm (blocks merged like an LSM tree; the numpy fallback) or auto: flat "
        "where the C kernels are built, else lsm. Speed and memory only: the same decisions.",
    )
    dense_fraction: float = Field(
        DEFAULT_DENSE_FRACTION,
        ge=0.0,
        le=1.0,
        description="A q-gram held by at least this share of the window's documents is also "
        "counted as a bitmap row (C kernels; from threshold 0.5 up, by 1/32 at least); 0: "
        "never. Speed and memory only: the same decisions.",
    )
    no_kernels: bool = Field(
        False,
        description="Use the numpy kernels even where the C kernels are built (same "
        "decisions, slower).",
    )

    # --- Item fields ------------------------------------------------------------------
    id_field: str = Field("id", description="Identity field; missing -> topic/partition/offset.")
    channel_field: str = Field("channel", description="Channel field.")
    title_field: str | None = Field("title", description="Title field, prepended to the text.")
    text_fields: CommaList = Field(
        default_factory=lambda: ["text", "body", "content"],
        description="Body fields, comma separated, first present wins.",
    )
    timestamp_fields: CommaList = Field(
        default_factory=lambda: ["timestamp", "published_at"],
        description="Event-time fields, comma separated (ISO-8601 or epoch seconds).",
    )
    max_item_bytes: int = Field(
        2_000_000, ge=1024, description="Items larger than this go to the DLQ (reason oversized)."
    )
    max_future_seconds: int = Field(
        86_400,
        ge=0,
        description="Event times this far past the wall clock go to the DLQ; 0 disables the check.",
    )

    # --- Worker -----------------------------------------------------------------------
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="State directory (RocksDB, one store per partition); ~ is expanded. "
        "Default $XDG_DATA_HOME/ndd-stream, else ~/.local/share/ndd-stream; the image and "
        "the chart use /var/lib/ndd-stream.",
    )
    partitions: int = Field(8, ge=1, description="Partitions of the internal (scope-keyed) topic.")
    web_host: str = Field(
        "127.0.0.1",
        description="Bind address of /metrics and /health: loopback by default; the image, "
        "compose and the chart set 0.0.0.0 inside the container.",
    )
    web_port: int = Field(6066, ge=0, le=65535, description="Port of /metrics and /health.")
    view_user: str = Field(
        "viewer", min_length=1, description="User name the web view asks for (view_password)."
    )
    view_password: SecretStr | None = Field(
        None,
        description="When set, `ndd-stream view` asks for HTTP Basic credentials (view_user "
        "and this) on every page but /api/status. Unset: no login.",
    )
    view_allowed_hosts: CommaList = Field(
        default_factory=lambda: [],  # not ``list``: see scope_map
        description="Host names (.example.org: a domain and its subdomains) the web view "
        "answers for without a password, besides localhost and its bind address.",
    )
    session_timeout_s: float = Field(
        30.0, gt=0,
        description="Kafka consumer session timeout (s). No heartbeat is sent while a "
        "rebalance callback runs: it waits a third of this for the partitions it opens, "
        "and a longer restore goes on after it. Under exactly-once a raw partition's "
        "opening waits out a stopped worker's open transaction (up to 10 s plus the "
        "broker's cleanup interval, 10 s by default) inside the callback: keep it above "
        "that.")
    guarantee: Literal["exactly-once", "at-least-once"] = Field(
        "exactly-once",
        description="exactly-once: each piece of decisions (outputs, changelog, "
        "checkpoints, consumed offsets) commits in one Kafka transaction and a worker the "
        "consumer group left behind commits nothing; needs Apache Kafka (else exit 3), and "
        "consumers must "
        "read isolation.level=read_committed. at-least-once: a crash or a rebalance can "
        "send outputs again (same decision; deduplicate by ndd-identity); any broker.",
    )
    on_lost_records: Literal["report", "stop"] = Field(
        "report",
        description="records the broker removed before the worker read them (retention, "
        "deleted records, a truncated log) on an input, scoped or changelog partition: "
        "report logs one ERROR line naming the topic, the partition and the offsets, counts "
        "them "
        "(ndd_lost_records_total), sends a lost_records record to the DLQ, and goes on; "
        "stop does the same, then exits with code 3.",
    )
    fetch_stall_s: float = Field(
        60.0, gt=0, le=3600,
        description="records waiting on an owned partition and none delivered for this long "
        "(no batch being handled): the fetch is restarted from the first record not handed out, "
        "and /health answers 503 until records flow again; a fetch still stopped after 5 "
        "restarts ends the worker (exit code 3).",
    )
    producer_batch_kb: int = Field(
        512, ge=16, le=65_536,
        description="KiB per partition the worker's producer puts in one record batch "
        "(fewer requests: docs/BENCHMARK.md). Keep it under the broker's message.max.bytes; "
        "capped at 2 x max_item_bytes.",
    )
    log_level: str = Field("INFO", description="Log level.")
    broker_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Exit (code 3) when no broker has answered for this long, so the "
        "orchestrator restarts the worker instead of it hanging.",
    )

    # --- Order across raw partitions (docs/RELIABILITY.md, "Order") ---------------------
    scope_order: Literal["auto", "event-time", "offset"] = Field(
        "auto",
        description="Order of a scoped partition's decisions. event-time: across every raw "
        "partition; offset: as forwarded (right for channel scopes keyed by channel); auto: "
        "offset for scope channel, else event-time.",
    )
    order_idle_ms: int = Field(
        1500, ge=30, le=600_000,
        description="event-time order: the longest a live item waits for an idle raw "
        "partition. Raise it if items come out ndd-order: behind.",
    )
    order_stall_s: float = Field(
        120.0, gt=0,
        description="event-time order: how long a scope waits for a raw partition whose "
        "worker is down or rebalancing. Keep it above session_timeout_s plus a rebalance.",
    )
    order_buffer_mb: int = Field(
        256, ge=1,
        description="event-time order: MiB of items held back per scoped partition; past it "
        "the scope decides past the partitions it waits for.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' sources, highest precedence first; without a ``--config``
        file the .env source reads nothing, but it would still walk every field (half of
        the time of building the settings): then it is left out."""
        if isinstance(dotenv_settings, DotEnvSettingsSource) and dotenv_settings.env_file is None:
            return init_settings, env_settings, file_secret_settings
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    @field_validator("brokers", "raw_topics", "text_fields", "timestamp_fields",
                     "view_allowed_hosts", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        """``a, b,,c`` (environment, file, CLI) -> ``["a", "b", "c"]``; lists are kept."""
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list | tuple):
            return [str(v).strip() for v in value if str(v).strip()]
        return value

    @field_validator("data_dir")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        """``NDD_DATA_DIR=~/state`` means the home directory, as in a shell."""
        return value.expanduser()

    @field_validator("decisions_topic", "title_field", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        """``NDD_DECISIONS_TOPIC=`` disables the topic: stored as None, so every consumer
        (and :meth:`to_env`) sees one spelling of "off"."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("view_password")
    @classmethod
    def _password_not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        """An empty password would be a login anyone passes: refuse it rather than guess."""
        if value is not None and not value.get_secret_value():
            raise ValueError("must not be empty (leave it unset for no login)")
        return value

    @field_validator("brokers")
    @classmethod
    def _some_broker(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give at least one host:port")
        return value

    @field_validator("bitmap_filter_bits")
    @classmethod
    def _bitmap_range(cls, value: int | None) -> int | None:
        if value is not None and value != 0 and not BITMAP_BITS_MIN <= value <= BITMAP_BITS_MAX:
            raise ValueError(f"must be 0 (off) or in {BITMAP_BITS_MIN}..{BITMAP_BITS_MAX}")
        return value

    @model_validator(mode="after")
    def _security_consistent(self) -> Settings:
        """The SASL/TLS settings fit together (fail here, not in an opaque client error)."""
        sasl = self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        tls = self.security_protocol in ("SSL", "SASL_SSL")
        if sasl and (not self.sasl_username or self.sasl_password is None):
            raise ValueError(f"NDD_SECURITY_PROTOCOL={self.security_protocol} needs "
                             "NDD_SASL_USERNAME and NDD_SASL_PASSWORD")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("mutual TLS needs both NDD_SSL_CERTFILE and NDD_SSL_KEYFILE")
        if not tls and (self.ssl_cafile or self.ssl_certfile):
            raise ValueError(f"SSL files are set but NDD_SECURITY_PROTOCOL is "
                             f"{self.security_protocol}; use SSL or SASL_SSL")
        return self

    @model_validator(mode="after")
    def _shards_consistent(self) -> Settings:
        if self.shards > 1 and not self.index_duplicates:
            raise ValueError("NDD_SHARDS > 1 needs NDD_INDEX_DUPLICATES=true: what a shard "
                             "holds may not depend on decisions")
        if self.shards > 1 and self.keep != "first":
            raise ValueError("NDD_KEEP=complete needs NDD_SHARDS=1: the kept version's text "
                             "is in one shard")
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` validated like any other settings (pydantic's own copy
        skips validation, which would let ``brokers="a,b"`` in as a string)."""
        if not update:
            return super().model_copy(deep=deep)
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self).model_validate({**fields, **update})

    def bootstrap_servers(self) -> str:
        """The brokers as one ``a,b`` string: client configs and messages."""
        return ",".join(self.brokers)

    def detector_config(self) -> DetectorConfig:
        return DetectorConfig(
            q=self.q,
            threshold=self.threshold,
            window_hours=self.window_hours,
            case_sensitive=self.case_sensitive,
            index_duplicates=self.index_duplicates,
            bitmap_bits=self.bitmap_filter_bits,
            novelty=self.novelty,
            count_threads=self.count_threads or (1 if self.shards > 1 else None),
            dense_fraction=self.dense_fraction,
            keep=self.keep,
            index=self.index,
        )

    def lookup_thread_for(self, path: Path) -> bool:
        """Whether ``dedup`` of ``path`` looks items up on the engine thread: a pipe or a
        terminal would hold each decision back until the next item comes."""
        if self.lookup_thread != "auto":
            return self.lookup_thread == "on"
        from ndd_stream.files import regular_file

        # a path that cannot be read: dedup names the file when it opens it
        return regular_file(path) and available_cores() >= 2

    def exactly_once(self) -> bool:
        """Whether the worker runs its pieces in Kafka transactions (``guarantee``)."""
        return self.guarantee == "exactly-once"

    def event_time_order(self) -> bool:
        """Whether scoped partitions are decided in event-time order (see ``scope_order``)."""
        if self.scope_order == "auto":
            return self.scope != "channel" or bool(self.scope_map)
        return self.scope_order == "event-time"

    def item_format(self) -> ItemFormat:
        return ItemFormat(
            id_field=self.id_field,
            channel_field=self.channel_field,
            title_field=self.title_field or None,
            text_fields=tuple(self.text_fields),
            timestamp_fields=tuple(self.timestamp_fields),
            extract=self.extract,
            max_html_depth=self.max_html_depth,
            scope=self.scope,
            scope_map=dict(self.scope_map),
            max_item_bytes=self.max_item_bytes,
            max_future_seconds=self.max_future_seconds,
        )

    def to_env(self) -> dict[str, str]:
        """These settings as NDD_* variables (for a worker subprocess). Contains secrets.

        ``Settings()`` under exactly these variables equals ``self``: a None whose default
        is not None (a disabled decisions topic) is written as an empty value, not left out,
        or the subprocess would get the default back.
        """
        env: dict[str, str] = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if value is None and info.default is None:
                continue  # unset is the default
            env["NDD_" + name.upper()] = env_text(value)
        return env


#: Every field of :class:`Settings` in exactly one group (tests/test_docs.py checks it), in
#: the order ``worker --help`` and docs/CONFIGURATION.md show them: (title, fields).
SETTING_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Kafka", ("brokers", "security_protocol", "sasl_mechanism", "sasl_username",
               "sasl_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
               "ssl_check_hostname", "session_timeout_s", "broker_timeout_s",
               "producer_batch_kb", "guarantee", "on_lost_records",
               "fetch_stall_s")),
    ("Topics", ("app_id", "raw_topics", "raw_topic_pattern", "unique_topic",
                "duplicate_topic", "dlq_topic", "decisions_topic", "topics_file",
                "partitions")),
    ("Detection", ("threshold", "novelty", "window_hours", "scope", "scope_map", "q",
                   "case_sensitive", "extract", "index_duplicates", "keep")),
    ("Order", ("scope_order", "order_idle_ms", "order_stall_s", "order_buffer_mb")),
    ("Scaling", ("shards", "gather_memory_mb", "count_threads", "lookup_thread",
                 "bitmap_filter_bits",
                 "index", "dense_fraction", "no_kernels")),
    ("Worker", ("data_dir", "web_host", "web_port", "log_level")),
    ("View", ("view_user", "view_password", "view_allowed_hosts")),
    ("Input fields", ("id_field", "channel_field", "title_field", "text_fields",
                      "timestamp_fields", "max_item_bytes", "max_future_seconds",
                      "max_html_depth")),
)


def env_text(value: object) -> str:
    """A setting's value as written in an NDD_* variable (None: empty)."""
    from ndd_stream.jsonio import dumps

    if value is None:
        return ""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return dumps(value).decode()
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
