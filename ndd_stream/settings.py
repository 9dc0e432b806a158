"""The one settings object of the service.

Built once at the entry point (CLI) from ``NDD_*`` environment variables, an
optional ``.env``-style file and CLI overrides, then passed down. Frozen, so no
component can change another's view of the configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ndd_stream.core.detector import (
    BITMAP_BITS_MAX,
    BITMAP_BITS_MIN,
    DEFAULT_THRESHOLD,
    DetectorConfig,
    NoveltyMode,
)
from ndd_stream.core.extract import DEFAULT_EXTRACT, DEFAULT_MAX_HTML_DEPTH, ExtractMode
from ndd_stream.core.items import ItemFormat
from ndd_stream.core.kernels import DEFAULT_DENSE_FRACTION

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
#: A list setting, written ``a,b,c`` in the environment (not JSON): split by a validator.
CommaList = Annotated[list[str], NoDecode]


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
        description="doc_q threshold for a near duplicate (0.3: right for crawled pages and, "
        "with the novelty rule, for agency newswire; see docs/EVALUATION.md).",
    )
    q: int = Field(4, ge=1, le=16, description="q-gram length.")
    bitmap_filter_bits: int | None = Field(
        None,
        description=f"Bitmap filter: 2**bits bits per document in the window, 0 = off or "
        f"{BITMAP_BITS_MIN}..{BITMAP_BITS_MAX}, "
        "unset = 14 (2 KiB per document) for thresholds >= 0.5, else off. Speeds up "
        "thresholds >= 0.5 (most on text sharing long passages); never changes a decision "
        "(ndd_stream/core/bitmaps.py).",
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
        description="Text extraction: raw (as is), tags (strip HTML), main (HTML: the page's "
        "main content by resiliparse, then only its prose blocks, dropping short lines such "
        "as bylines, menus and share links; plain text: its prose blocks).",
    )
    max_html_depth: int = Field(
        DEFAULT_MAX_HTML_DEPTH,
        ge=1,
        le=100_000,
        description="HTML nesting deeper than this (or so deep that elements x depth passes "
        "2 million) is extracted as flat text, in linear time: main-content extraction grows "
        "with the square of the depth (docs/RELIABILITY.md, Security).",
    )
    scope: str = Field(
        "channel",
        description="Comparison scope: 'channel', 'global', or the name of another item field.",
    )
    scope_map: dict[str, str] = Field(
        default_factory=dict,
        description="JSON object mapping a scope value (e.g. a channel) to a dedup group.",
    )
    novelty: NoveltyMode = Field(
        "auto",
        description="Judge the best doc_q match: a report with other figures, about another "
        "subject, or sharing under half of the shorter text, is routed unique and explained "
        "(ndd-novel headers). "
        "auto: for plain-text items, not for HTML ones; on; off (doc_q alone). See "
        "docs/EVALUATION.md.",
    )
    index_duplicates: bool = Field(
        True,
        description="Index every item after its decision (Fig. 2); False indexes unique ones only.",
    )

    # --- Scaling one scope (never changes a decision; docs/DEPLOYMENT.md) ---
    shards: int = Field(
        1, ge=1, le=64,
        description="Split the window of every scope over this many shards, each a partition "
        "of the shards topic with its own state, so one scope's counting spreads over "
        "workers. 1 = one window per scope (no shard stage). Needs index_duplicates. "
        "Changing it needs empty state (a new app_id): a worker refuses state built for "
        "another number.",
    )
    gather_memory_mb: int = Field(
        128, ge=0,
        description="With shards > 1: admitted items waiting for the shards' answers kept in "
        "memory per scoped partition, in MiB; past it they wait in a spill file beside the "
        "partition's state (deleted when it closes), so a backlog does not grow the "
        "gatherer's memory (docs/RELIABILITY.md, 'Memory under a backlog'). 0: every "
        "waiting item but the next to decide.",
    )

    # --- Speed of the core (never changes a decision; docs/BENCHMARK.md) --------------
    count_threads: int | None = Field(
        None,
        ge=1,
        description="Threads one decision's index count may use (C kernels); unset = the "
        "cores this process may run on (affinity mask, cgroup CPU quota), or 1 with shards "
        "> 1: shards already spread the count over the workers, and both at once compete "
        "for the cores (docs/BENCHMARK.md, issue 23). 1 with several workers per host.",
    )
    dense_fraction: float = Field(
        DEFAULT_DENSE_FRACTION,
        ge=0.0,
        le=1.0,
        description="A q-gram key held by at least this share of an index block's documents "
        "is also a bitmap row, counted by carry-save adders (C kernels); 0 = never.",
    )
    no_kernels: bool = Field(
        False,
        description="Run the numpy versions of the core's kernels even where the C kernels "
        "are built (same decisions, slower: comparisons, a suspected kernel bug).",
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
        Path("ndd-data"), description="State directory (RocksDB, one store per partition)."
    )
    partitions: int = Field(8, ge=1, description="Partitions of the internal (scope-keyed) topic.")
    web_host: str = Field("0.0.0.0", description="Bind address of /metrics and /health.")
    web_port: int = Field(6066, ge=0, le=65535, description="Port of /metrics and /health.")
    view_user: str = Field(
        "viewer", min_length=1, description="User name the web view asks for (view_password)."
    )
    view_password: SecretStr | None = Field(
        None,
        description="When set, `ndd-stream view` asks for HTTP Basic credentials (view_user "
        "and this password) on every page; /api/status stays open for health probes. "
        "Unset: no login (keep the view on loopback or behind an authenticating proxy).",
    )
    view_allowed_hosts: CommaList = Field(
        default_factory=list,
        description="Host names (comma separated; .example.org for a domain and its "
        "subdomains) the web view answers for without a password, besides localhost, "
        "loopback addresses and its bind address (a guard against DNS rebinding). Not used "
        "with view_password: the login protects.",
    )
    session_timeout_s: float = Field(30.0, gt=0, description="Kafka consumer session timeout (s).")
    guarantee: Literal["exactly-once", "at-least-once"] = Field(
        "at-least-once",
        description="exactly-once: every piece of a partition's decisions (its outputs, "
        "changelog records, checkpoint and consumed offset) commits in one Kafka "
        "transaction, the router forwards in transactions, and a worker that lost a "
        "partition commits nothing more for it; needs a broker with transactions (Apache "
        "Kafka), else the worker exits (code 3), and every consumer of the outputs must read "
        "isolation.level=read_committed. at-least-once: a crash or a rebalance can send "
        "outputs again (same decision; deduplicate by ndd-identity); any broker "
        "(docs/RELIABILITY.md, 'Exactly once').",
    )
    producer_batch_kb: int = Field(
        512, ge=16, le=65_536,
        description="The worker's producer batches up to this many KiB per partition in one "
        "record batch (Faust's default is 16). Larger batches mean fewer produce requests "
        "for the worker and the broker to handle: 16 -> 512 cut the broker's CPU per item "
        "~3x and raised items/s 1.16x with one shard, 1.19x with two (docs/BENCHMARK.md). "
        "Keep it under the broker's message.max.bytes (Kafka's default 1 MiB). Capped at "
        "the producer's request size (2 x max_item_bytes, at least 1 MiB).",
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
        description="How a scoped partition orders its items. event-time: by event time "
        "across every raw partition (ties: raw topic, partition, offset), each raw partition "
        "waited for boundedly (order_idle_ms, order_stall_s); offset: in the order the router "
        "forwards them, right when each scope's items share one raw partition (channel "
        "scopes with raw topics keyed by channel). auto: event-time for scope 'global', "
        "another field or a scope_map, offset for 'channel'.",
    )
    order_idle_ms: int = Field(
        1500, ge=30, le=600_000,
        description="event-time order: the longest a live item waits for a raw partition "
        "whose router has nothing more to forward. Routers confirm such partitions every "
        "third of this; a scope steps over one on the first confirmation at least two thirds "
        "of this after the item came, by the scope's clock or by the routers' (the records' "
        "Kafka timestamps; covering what a router had not fetched yet). Raise it "
        "if routers fall further behind producers (items then come out ndd-order: behind).",
    )
    order_stall_s: float = Field(
        120.0, gt=0,
        description="event-time order: how long a scope waits for a raw partition with "
        "records not forwarded yet, or not heard of (its worker down or rebalancing), "
        "before deciding past it. Keep it above session_timeout_s plus a rebalance.",
    )
    order_buffer_mb: int = Field(
        256, ge=1,
        description="event-time order: items held back per scoped partition, in MiB; past "
        "it the scope decides past the raw partitions it waits for.",
    )

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
        )

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
