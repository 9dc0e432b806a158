"""Declarative Kafka topic definitions (``topics/*.yaml``) and applying them to a cluster.

Topics are created up front, never auto-created by clients, so partition counts and
retention are decided in one reviewed place. ``apply`` is idempotent: it creates what is
missing and reports, without changing anything, where an existing topic differs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings

Role = Literal["input", "output", "internal"]
Action = Literal["created", "would-create", "exists", "mismatch", "skipped", "error"]

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_CONFIG_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
#: Configs whose values are comma-separated sets (order does not matter).
_LIST_CONFIGS = frozenset({"cleanup.policy"})


class TopicDefinitionError(ValueError):
    """A topic definitions file is missing, unreadable or invalid."""


@dataclass(frozen=True)
class _Topic:
    """What a topic entry and the concrete topic made of it both have."""

    key: str
    name: str
    role: Role
    partitions: int
    replication_factor: int
    config: Mapping[str, str]


@dataclass(frozen=True)
class TopicSpec(_Topic):
    """One entry of a definitions file, before Settings are applied."""

    description: str = ""
    setting: str | None = None
    unmanaged_if: str | None = None
    partitions_setting: str | None = None
    partitions_times: str | None = None
    needs_above_one: str | None = None


@dataclass(frozen=True)
class TopicDefinitions:
    """All topic specs, in file order, and where they came from."""

    source: str
    topics: tuple[TopicSpec, ...]

    def by_key(self, key: str) -> TopicSpec:
        for spec in self.topics:
            if spec.key == key:
                return spec
        raise KeyError(f"no topic {key!r} in {self.source}")


@dataclass(frozen=True)
class ResolvedTopic(_Topic):
    """A concrete topic to create or check: Settings overrides already applied."""


@dataclass
class TopicStatus:
    """Outcome of ``apply`` for one topic."""

    topic: ResolvedTopic | None
    name: str
    action: Action
    diffs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class ApplyReport:
    """Outcome of ``apply`` for all topics."""

    statuses: list[TopicStatus]

    @property
    def mismatches(self) -> list[TopicStatus]:
        return [s for s in self.statuses if s.action == "mismatch"]

    @property
    def errors(self) -> list[TopicStatus]:
        return [s for s in self.statuses if s.action == "error"]

    @property
    def missing(self) -> list[TopicStatus]:
        return [s for s in self.statuses if s.action == "would-create"]


# --- finding and loading ----------------------------------------------------------------
def default_definitions_path() -> Path:
    """The repo's ``topics/`` in a dev checkout, else the copy packaged in the wheel."""
    package_dir = Path(__file__).resolve().parents[1]  # ndd_stream/
    repo_topics = package_dir.parent / "topics"
    if repo_topics.is_dir() and any(repo_topics.glob("*.yaml")):
        return repo_topics
    packaged = package_dir / "_topics"
    if packaged.is_dir():
        return packaged
    raise TopicDefinitionError(
        f"no topic definitions found: neither {repo_topics} nor {packaged} exists; "
        "set NDD_TOPICS_FILE"
    )


def definitions_path(settings: Settings) -> Path:
    """``settings.topics_file`` when set, else :func:`default_definitions_path`."""
    if settings.topics_file is not None:
        if not settings.topics_file.exists():
            raise TopicDefinitionError(f"NDD_TOPICS_FILE={settings.topics_file} does not exist")
        return settings.topics_file
    return default_definitions_path()


def load_definitions(path: Path) -> TopicDefinitions:
    """Load one YAML file, or every ``*.yaml``/``*.yml`` of a directory (in name order)."""
    if path.is_dir():
        files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
        if not files:
            raise TopicDefinitionError(f"{path} holds no *.yaml topic definitions")
    elif path.is_file():
        files = [path]
    else:
        raise TopicDefinitionError(f"{path} does not exist")
    specs: list[TopicSpec] = []
    seen: dict[str, Path] = {}
    for file in files:
        for spec in _load_file(file):
            if spec.key in seen:
                raise TopicDefinitionError(
                    f"{file}: topic {spec.key!r} is already defined in {seen[spec.key]}"
                )
            seen[spec.key] = file
            specs.append(spec)
    return TopicDefinitions(source=str(path), topics=tuple(specs))


def load_for(settings: Settings) -> TopicDefinitions:
    """Definitions the service uses under these settings."""
    return load_definitions(definitions_path(settings))


def _load_file(file: Path) -> list[TopicSpec]:
    try:
        doc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TopicDefinitionError(f"{file}: cannot read YAML: {exc}") from exc
    try:
        parsed = TopicsFile.model_validate(doc)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'file'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise TopicDefinitionError(f"{file}: {problems}") from None
    d = parsed.defaults
    return [
        TopicSpec(
            key=key,
            name=t.name,
            role=t.role,
            partitions=t.partitions or d.partitions,
            replication_factor=t.replication_factor or d.replication_factor,
            config={**d.config, **t.config},
            description=t.description.strip(),
            setting=t.setting,
            unmanaged_if=t.unmanaged_if,
            partitions_setting=t.partitions_setting,
            partitions_times=t.partitions_times,
            needs_above_one=t.needs_above_one,
        )
        for key, t in parsed.topics.items()
    ]


# --- the file format, checked by pydantic ---------------------------------------------
Positive = Annotated[StrictInt, Field(ge=1)]


def _config_values(raw: dict[str, Any]) -> dict[str, str]:
    """Topic configs as Kafka takes them: valid names, scalar values written as strings."""
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not _CONFIG_KEY.match(key):
            raise ValueError(f"invalid config name {key!r}")
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, int | float | str):
            out[key] = str(value)
        else:
            raise ValueError(f"{key}: expected a scalar, got {value!r}")
    return out


class TopicsDefaults(BaseModel):
    """``defaults:`` of a file: what a topic entry does not say."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partitions: Positive = 8
    replication_factor: Positive = 1
    config: dict[str, Any] = Field(default_factory=dict)

    _config = field_validator("config")(_config_values)


class TopicEntry(BaseModel):
    """One entry of ``topics:`` (the comment at the top of topics/news.yaml says each key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    role: Role = "output"
    partitions: Positive | None = None
    replication_factor: Positive | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    setting: str | None = None
    unmanaged_if: str | None = None
    partitions_setting: str | None = None
    partitions_times: str | None = None
    needs_above_one: str | None = None

    _config = field_validator("config")(_config_values)

    @field_validator("setting", "unmanaged_if", "partitions_setting", "partitions_times",
                     "needs_above_one")
    @classmethod
    def _a_settings_field(cls, value: str | None) -> str | None:
        if value is not None and value not in Settings.model_fields:
            raise ValueError(f"{value!r} is not a Settings field")
        return value


class TopicsFile(BaseModel):
    """A topic definitions file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    defaults: TopicsDefaults = Field(default_factory=TopicsDefaults)
    topics: dict[str, TopicEntry] = Field(min_length=1)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TopicDefinitionError(f"{where}: expected a positive integer, got {value!r}")
    return value


# --- resolving against Settings ---------------------------------------------------------
def resolve(
    settings: Settings,
    definitions: TopicDefinitions,
    *,
    replication_factor: int | None = None,
) -> tuple[list[ResolvedTopic], list[TopicStatus]]:
    """Concrete topics under ``settings``, plus ``skipped`` statuses for unmanaged ones."""
    resolved: list[ResolvedTopic] = []
    skipped: list[TopicStatus] = []
    owners: dict[str, str] = {}
    for spec in definitions.topics:
        if spec.unmanaged_if and getattr(settings, spec.unmanaged_if):
            skipped.append(
                TopicStatus(
                    None, spec.key, "skipped", notes=[f"{spec.unmanaged_if} is set: not managed"]
                )
            )
            continue
        if spec.needs_above_one and getattr(settings, spec.needs_above_one) <= 1:
            continue  # e.g. the shard stage's topics when shards = 1: not used, not created
        names = _names(settings, spec)
        if not names:
            skipped.append(
                TopicStatus(None, spec.key, "skipped", notes=[f"{spec.setting} is empty: disabled"])
            )
            continue
        partitions = spec.partitions
        if spec.partitions_setting:
            partitions = _positive_int(
                getattr(settings, spec.partitions_setting), f"Settings.{spec.partitions_setting}"
            )
        if spec.partitions_times and partitions is not None:
            partitions *= _positive_int(getattr(settings, spec.partitions_times),
                                        f"Settings.{spec.partitions_times}")
        for name in names:
            if not _TOPIC_NAME.match(name) or name in (".", ".."):
                raise TopicDefinitionError(
                    f"topic {spec.key!r}: {name!r} is not a valid Kafka topic name"
                )
            if name in owners:
                raise TopicDefinitionError(
                    f"topic name {name!r} is used by both {owners[name]!r} and {spec.key!r}"
                )
            owners[name] = spec.key
            resolved.append(
                ResolvedTopic(
                    key=spec.key,
                    name=name,
                    role=spec.role,
                    partitions=partitions,
                    replication_factor=replication_factor or spec.replication_factor,
                    config=dict(spec.config),
                )
            )
    return resolved, skipped


def _names(settings: Settings, spec: TopicSpec) -> list[str]:
    template = spec.name
    if spec.setting:
        value = getattr(settings, spec.setting)
        if value is None:
            return []
        template = ",".join(value) if isinstance(value, list) else str(value)
    try:
        expanded = template.format(app_id=settings.app_id)
    except (KeyError, IndexError, ValueError) as exc:
        raise TopicDefinitionError(
            f"topic {spec.key!r}: name {template!r} has an unknown placeholder "
            "(only {app_id} is known)"
        ) from exc
    return [n.strip() for n in expanded.split(",") if n.strip()]


# --- applying to a cluster --------------------------------------------------------------
def admin_client(settings: Settings, timeout: float) -> AdminClient:
    """AdminClient whose socket-level waits are bounded by ``timeout``."""
    ms = max(1000, int(timeout * 1000))
    return AdminClient(
        librdkafka_config(
            settings,
            {"socket.timeout.ms": ms, "socket.connection.setup.timeout.ms": ms},
        )
    )


def apply(
    settings: Settings,
    definitions: TopicDefinitions,
    *,
    create: bool = True,
    replication_factor: int | None = None,
    timeout: float = 30.0,
    admin: AdminClient | None = None,
) -> ApplyReport:
    """Create missing topics (unless ``create`` is False) and check existing ones.

    Existing topics are compared on partition count, replication factor and every
    configured value the broker reports; nothing existing is altered. Raises
    ``KafkaException`` when the cluster does not answer within ``timeout`` seconds.
    """
    wanted, skipped = resolve(settings, definitions, replication_factor=replication_factor)
    admin = admin or admin_client(settings, timeout)
    metadata = admin.list_topics(timeout=timeout)
    statuses: dict[str, TopicStatus] = {}
    to_create = [t for t in wanted if t.name not in metadata.topics]
    existing = [t for t in wanted if t.name in metadata.topics]

    if to_create and not create:
        for topic in to_create:
            statuses[topic.name] = TopicStatus(topic, topic.name, "would-create")
    elif to_create:
        futures = admin.create_topics(
            [
                NewTopic(
                    t.name,
                    num_partitions=t.partitions,
                    replication_factor=t.replication_factor,
                    config=dict(t.config),
                )
                for t in to_create
            ],
            request_timeout=timeout,
            operation_timeout=timeout,
        )
        for topic in to_create:
            try:
                futures[topic.name].result(timeout=timeout)
                statuses[topic.name] = TopicStatus(topic, topic.name, "created")
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    existing.append(topic)  # created concurrently: check it like the others
                else:
                    statuses[topic.name] = TopicStatus(
                        topic, topic.name, "error", notes=[f"create failed: {exc}"]
                    )
            except TimeoutError:
                statuses[topic.name] = TopicStatus(
                    topic, topic.name, "error", notes=[f"create timed out after {timeout:.0f}s"]
                )

    if existing:
        metadata = admin.list_topics(timeout=timeout)
        reported = _describe_configs(admin, [t.name for t in existing], timeout)
        for topic in existing:
            statuses[topic.name] = _check_existing(topic, metadata.topics.get(topic.name), reported)

    ordered = [statuses[t.name] for t in wanted if t.name in statuses]
    return ApplyReport(statuses=ordered + skipped)


def _describe_configs(
    admin: AdminClient, names: Sequence[str], timeout: float
) -> dict[str, dict[str, str] | str]:
    """Reported configs per topic, or the error text when the broker would not say."""
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    futures: dict[ConfigResource, Future[Any]] = admin.describe_configs(
        resources, request_timeout=timeout
    )
    out: dict[str, dict[str, str] | str] = {}
    for resource, future in futures.items():
        try:
            entries = future.result(timeout=timeout)
            out[resource.name] = {
                name: entry.value for name, entry in entries.items() if entry.value is not None
            }
        except (KafkaException, TimeoutError) as exc:
            out[resource.name] = f"configs not available: {exc}"
    return out


def _check_existing(
    topic: ResolvedTopic, meta: Any, reported: Mapping[str, dict[str, str] | str]
) -> TopicStatus:
    status = TopicStatus(topic, topic.name, "exists")
    if meta is None:
        status.action = "error"
        status.notes.append("topic vanished while checking it")
        return status
    partitions = len(meta.partitions)
    if partitions != topic.partitions:
        status.diffs.append(f"partitions: want {topic.partitions}, have {partitions}")
    replicas = {len(p.replicas) for p in meta.partitions.values()}
    if replicas and replicas != {topic.replication_factor}:
        have = ",".join(str(r) for r in sorted(replicas))
        status.diffs.append(f"replication_factor: want {topic.replication_factor}, have {have}")
    configs = reported.get(topic.name)
    if isinstance(configs, str):
        status.notes.append(configs)
    elif configs is not None:
        unreported = []
        for key, want in sorted(topic.config.items()):
            have_value = configs.get(key)
            if have_value is None:
                unreported.append(key)
            elif not _same_config(key, want, have_value):
                status.diffs.append(f"{key}: want {want}, have {have_value}")
        if unreported:
            status.notes.append(f"broker does not report: {', '.join(unreported)}")
    if status.diffs:
        status.action = "mismatch"
    return status


def _same_config(key: str, want: str, have: str) -> bool:
    if key in _LIST_CONFIGS:
        return {v.strip() for v in want.split(",")} == {v.strip() for v in have.split(",")}
    return want.strip() == have.strip()
