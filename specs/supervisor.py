"""The ``ioConfig``, ``tuningConfig`` and top-level models of a Kafka supervisor spec."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal

import re2
from pydantic import Field, ValidationInfo, field_validator, model_validator

from specs import limits
from specs.consumer_properties import (
    DYNAMIC_CONFIG_PROVIDER,
    EXACT_READ_CONSUMER_PROPERTIES,
    SECRET_ENV_PREFIX,
    consumer_property_errors,
)
from specs.data_schema import DataSchemaSpec, DimensionSpec, MetricSpec, SpecModel
from specs.durations import IsoDuration, UtcTimestamp
from specs.input_format import InputFormatSpec
from specs.spec_errors import SpecError, join_path, key_path

__all__ = [
    "DYNAMIC_CONFIG_PROVIDER",
    "EXACT_READ_CONSUMER_PROPERTIES",
    "SECRET_ENV_PREFIX",
    "SEVERAL_TOPICS",
    "check_columns",
    "check_update",
    "UNLIMITED_PARSE_EXCEPTIONS",
    "InputFormatSpec",
    "KafkaIOConfigSpec",
    "KafkaSupervisorIngestionSpec",
    "KafkaTuningConfigSpec",
    "SupervisorSpec",
    "ignored_field_paths",
]

UNLIMITED_PARSE_EXCEPTIONS = 2_147_483_647
"""Druid's default ``maxParseExceptions`` (Java's Integer.MAX_VALUE): no limit."""

_SECTIONS = ("dataSchema", "ioConfig", "tuningConfig")


def _key_in(data: dict[Any, Any], alias: str, name: str) -> str:
    return name if name in data and alias not in data else alias


SEVERAL_TOPICS = "(topicPattern)"
"""The stream of a datasource reading by ``topicPattern``: its offsets name their topics
(``"clicks:0"``), so one pattern may follow another. Not a topic name (Kafka allows no parentheses)."""


@functools.cache
def _compiled(pattern: str) -> Any:
    """RE2 matches in linear time: a spec's pattern cannot stall the supervisor on a long topic name."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


_RejectionPeriod = Annotated[IsoDuration, limits.within(None, limits.MAX_REJECTION_PERIOD)]
_Topic = Annotated[str, Field(min_length=1), limits.at_most(limits.MAX_TOPIC_LENGTH, "characters")]
_TopicPattern = Annotated[str, Field(min_length=1), limits.at_most(limits.MAX_PATTERN_LENGTH, "characters")]


class KafkaIOConfigSpec(SpecModel):
    """Where to read from and how the supervisor schedules its tasks."""

    harmless: ClassVar[frozenset[str]] = frozenset({
        "autoScalerConfig", "pollTimeout", "idleConfig", "stopTaskCount", "lagAggregate", "emitTimeLagMetrics",
        "configOverrides", "stream", "useEarliestSequenceNumber",  # the last two: Druid's names in exported specs
    })

    type: Literal["kafka"] = "kafka"
    """I/O config type."""
    topic_pattern: _TopicPattern | None = None
    """A regular expression (RE2 syntax) matching whole topic names: every topic it matches, and
    any created later, is read (this or ``topic``)."""
    topic: _Topic | None = Field(default=None, validate_default=True)
    """Kafka topic to read from (this or ``topicPattern``)."""
    consumer_properties: dict[str, Any] = Field(default_factory=dict)
    """Properties for the Kafka consumer, only those on the allow-list of :mod:`specs.consumer_properties`
    (strings, integers, booleans; bootstrap.servers defaults to the service's configuration), and Druid's
    ``druid.dynamic.config.provider`` for secrets from the environment."""
    input_format: InputFormatSpec = InputFormatSpec()
    """Format of the records: JSON values, or the kafka format (key, timestamp, topic and headers too)."""
    task_count: Annotated[int, limits.at_most(limits.MAX_TASK_COUNT, "")] = Field(default=1, ge=1)
    """Maximum number of reading tasks in a replica set."""
    replicas: Annotated[int, limits.at_most(limits.MAX_REPLICAS, "")] = Field(default=1, ge=1)
    """Number of replica sets; replicas of a task read the same partitions."""
    task_duration: Annotated[IsoDuration, limits.within(limits.MIN_TASK_DURATION, limits.MAX_TASK_DURATION)] = (
        timedelta(hours=1))
    """How long a task reads before it stops reading and publishes its segments."""
    period: Annotated[IsoDuration, limits.within(limits.MIN_PERIOD, limits.MAX_PERIOD)] = timedelta(seconds=30)
    """How often the supervisor runs its management logic."""
    start_delay: Annotated[IsoDuration, limits.within(None, limits.MAX_START_DELAY)] = timedelta(seconds=5)
    """Wait before the supervisor starts managing tasks."""
    use_earliest_offset: bool = False
    """With no stored offsets, start from the earliest (true) or latest (false) offset."""
    completion_timeout: Annotated[IsoDuration, limits.within(limits.MIN_COMPLETION_TIMEOUT,
                                                             limits.MAX_COMPLETION_TIMEOUT)] = timedelta(minutes=30)
    """How long to wait for a task to publish before it is considered failed."""
    late_message_rejection_period: _RejectionPeriod | None = None
    """Reject messages with timestamps this much earlier than the task's start."""
    early_message_rejection_period: _RejectionPeriod | None = None
    """Reject messages with timestamps this much later than the task's end."""
    late_message_rejection_start_date_time: UtcTimestamp | None = None
    """Reject messages with timestamps before this instant."""

    @field_validator("consumer_properties", mode="before")
    @classmethod
    def _property_values(cls, value: object) -> object:
        if isinstance(value, dict) and (errors := consumer_property_errors(value)):
            raise SpecError(errors)  # the allow-list of specs.consumer_properties, with the operator's additions
        return value

    @field_validator("topic_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                _compiled(value)
            except re2.error as exc:
                message = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
                raise SpecError.at("", f"not a regular expression in RE2 syntax (no lookaround or "
                                       f"backreferences): {message}") from None
        return value

    @field_validator("topic")
    @classmethod
    def _one_stream(cls, value: str | None, info: ValidationInfo) -> str | None:
        if "topic_pattern" not in info.data:  # invalid, and refused on its own
            return value
        pattern = info.data["topic_pattern"]
        if value is None and pattern is None:
            raise SpecError.at("", "required field is missing (or give topicPattern)")
        if value is not None and pattern is not None:
            raise SpecError.at("", "expected topic or topicPattern, not both")
        return value

    @property
    def stream(self) -> str:
        """What the datasource's committed offsets belong to: the topic, or :data:`SEVERAL_TOPICS`."""
        return self.topic if self.topic is not None else SEVERAL_TOPICS

    def reads(self, topic: str) -> bool:
        """Whether ``topic`` is read: it is the topic, or ``topicPattern`` matches all of it."""
        if self.topic_pattern is None:
            return topic == self.topic
        return _compiled(self.topic_pattern).fullmatch(topic) is not None

    @field_validator("task_duration", "period", "completion_timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise SpecError.at("", "must be a positive duration")
        return value

    @model_validator(mode="after")
    def _bounded_task_total(self) -> KafkaIOConfigSpec:
        total = self.task_count * self.replicas
        if total > limits.MAX_TASKS:
            message = (f"taskCount * replicas must be <= {limits.MAX_TASKS} (a limit of this service), got "
                       f"{self.task_count} * {self.replicas} = {total}")
            raise SpecError([("taskCount", message), ("replicas", message)])
        return self

    @model_validator(mode="after")
    def _one_late_rejection_rule(self) -> KafkaIOConfigSpec:
        if self.late_message_rejection_period is not None and self.late_message_rejection_start_date_time is not None:
            raise SpecError.at("lateMessageRejectionStartDateTime", "cannot be combined with "
                                                                    "lateMessageRejectionPeriod")
        return self

    def message_time_bounds(self, planned: datetime) -> tuple[datetime | None, datetime | None]:
        """The event times ``[earliest, latest]`` a task planned at ``planned`` keeps (None: unbounded).

        Druid's rejection windows: earlier than ``lateMessageRejectionStartDateTime``, or than
        ``lateMessageRejectionPeriod`` before planning; later than ``earlyMessageRejectionPeriod``
        after the task's duration. Fixed once per task group, so replicas keep the same records.
        """
        earliest = self.late_message_rejection_start_date_time
        if self.late_message_rejection_period is not None:
            earliest = planned - self.late_message_rejection_period
        latest = None
        if self.early_message_rejection_period is not None:
            latest = planned + self.task_duration + self.early_message_rejection_period
        return earliest, latest


class KafkaTuningConfigSpec(SpecModel):
    """Row limits and parse-error handling of the indexing tasks."""

    harmless: ClassVar[frozenset[str]] = frozenset({
        "maxBytesInMemory", "skipBytesInMemoryOverheadCheck", "maxTotalRows", "intermediatePersistPeriod",
        "maxPendingPersists", "indexSpec", "indexSpecForIntermediatePersists", "handoffConditionTimeout",
        "segmentWriteOutMediumFactory", "workerThreads", "chatThreads", "chatRetries", "chatAsync", "httpTimeout",
        "shutdownTimeout", "offsetFetchPeriod", "intermediateHandoffPeriod", "numPersistThreads",
        "skipSequenceNumberAvailabilityCheck", "repartitionTransitionDuration", "appendableIndexSpec",
        "partitionsSpec", "maxColumnsToMerge", "maxRecordsPerPoll", "releaseLocksOnHandoff", "basePersistDirectory",
    })

    type: Literal["kafka"] = "kafka"
    """Tuning config type."""
    max_rows_per_segment: Annotated[int, limits.at_most(limits.JAVA_INT_MAX, "")] = Field(default=5_000_000, ge=1)
    """Rows in a segment before it is handed off."""
    max_rows_in_memory: Annotated[int, limits.at_most(limits.JAVA_INT_MAX, "")] = Field(default=150_000, ge=1)
    """Rows aggregated in memory before they are persisted."""
    max_parse_exceptions: Annotated[int, limits.at_most(limits.JAVA_INT_MAX, "")] = Field(
        default=UNLIMITED_PARSE_EXCEPTIONS, ge=0)
    """Unparseable rows tolerated before a task fails (null or absent: unlimited)."""
    max_saved_parse_exceptions: Annotated[int, limits.at_most(limits.MAX_SAVED_PARSE_EXCEPTIONS, "")] = Field(
        default=0, ge=0)
    """How many parse exception messages a task keeps for its report."""
    log_parse_exceptions: bool = False
    """Log a message for each unparseable row."""
    report_parse_exceptions: bool = False
    """Deprecated: true means maxParseExceptions=0 and at most one saved parse exception."""
    reset_offset_automatically: bool = False
    """When committed offsets are no longer on the broker (retention): false makes the supervisor
    unhealthy naming the gap; true moves them to the earliest offsets and records what was skipped."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_report_flag(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        max_key = _key_in(data, "maxParseExceptions", "max_parse_exceptions")
        if data.get(max_key) is None:
            data.pop(max_key, None)
        if data.get(_key_in(data, "reportParseExceptions", "report_parse_exceptions")) is True:
            data[max_key] = 0
            saved_key = _key_in(data, "maxSavedParseExceptions", "max_saved_parse_exceptions")
            saved = data.get(saved_key, 0)
            if isinstance(saved, int) and not isinstance(saved, bool):
                data[saved_key] = min(1, saved)
        return data


class KafkaSupervisorIngestionSpec(SpecModel):
    """The ``spec`` object: schema, I/O and tuning."""

    data_schema: DataSchemaSpec
    """Datasource, timestamp, dimensions, metrics and granularity."""
    io_config: KafkaIOConfigSpec
    """Kafka topic, consumer properties and task scheduling."""
    tuning_config: KafkaTuningConfigSpec = KafkaTuningConfigSpec()
    """Row limits and parse-error handling."""

    @model_validator(mode="after")
    def _discovery_types_every_field(self) -> KafkaSupervisorIngestionSpec:
        fields = self.io_config.input_format.value_spec.flatten_spec.fields
        if self.data_schema.dimensions_spec.use_schema_discovery and fields:
            path = "ioConfig.inputFormat" + (".valueFormat" if self.io_config.input_format.type == "kafka" else "")
            raise SpecError.at(f"{path}.flattenSpec.fields", "flattened fields with useSchemaDiscovery are not "
                                                             "supported (they would not be typed as discovered)")
        return self


class SupervisorSpec(SpecModel):
    """A Kafka supervisor spec: ``{"type": "kafka", "spec": {...}}``.

    Druid's older flat form, with ``dataSchema``/``ioConfig``/``tuningConfig``
    next to ``type``, is read into the same model.  When both forms are present
    (as in specs Druid itself returns) ``spec`` wins and the flat copies are
    reported as ignored.
    """

    harmless: ClassVar[frozenset[str]] = frozenset({"context", "suspended", *_SECTIONS})

    type: Literal["kafka"] = "kafka"
    """Supervisor type."""
    spec: KafkaSupervisorIngestionSpec
    """Schema, I/O and tuning configuration."""

    @model_validator(mode="before")
    @classmethod
    def _wrap_flat_form(cls, data: object) -> object:
        if isinstance(data, Mapping) and "spec" not in data and any(key in data for key in _SECTIONS):
            wrapped = {key: value for key, value in data.items() if key not in _SECTIONS}
            wrapped["spec"] = {key: data[key] for key in _SECTIONS if key in data}
            return wrapped
        return data

    @property
    def id(self) -> str:
        """Supervisor id: Druid uses the datasource name."""
        return self.spec.data_schema.data_source

    @property
    def datasource(self) -> str:
        """Name of the datasource this supervisor writes."""
        return self.spec.data_schema.data_source

    @property
    def ignored_fields(self) -> list[str]:
        """JSON paths (in the ``spec`` form) of fields accepted but not acted on."""
        return ignored_field_paths(self)

    def to_druid_json(self) -> dict[str, Any]:
        """Return the spec as Druid JSON (camelCase, wrapped in ``spec``), including ignored fields."""
        return self.model_dump(mode="json", by_alias=True)


def ignored_field_paths(model: SpecModel, path: str = "") -> list[str]:
    """Paths of the unmodelled fields, and of set fields listed in ``ignored_when_set``, in ``model``."""
    found: list[str] = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        here = join_path(path, info.alias or name)
        if (
            name in model.ignored_when_set
            and name in model.model_fields_set
            and value not in (None, (), [], {})
        ):
            found.append(here)
        if isinstance(value, SpecModel):
            found.extend(ignored_field_paths(value, here))
        elif isinstance(value, tuple):
            for index, item in enumerate(value):
                if isinstance(item, SpecModel):
                    found.extend(ignored_field_paths(item, f"{here}[{index}]"))
    found.extend(join_path(path, key_path(key)) for key in (model.model_extra or {}))
    return found


def check_update(history: Sequence[SupervisorSpec], spec: SupervisorSpec) -> None:
    """Refuse a spec that changes what a column of an earlier spec means (:func:`check_columns`).

    ``history`` holds the datasource's earlier specs, newest first; a column keeps the meaning
    any of them gave it, even after a spec that dropped it.
    """
    earlier = [s.spec.data_schema for s in reversed(history)]  # oldest first: newer definitions win
    check_columns({m.name: m for old in earlier for m in old.metrics_spec},
                  {d.name: d for old in earlier for d in old.dimensions_spec.dimensions}, spec)


def check_columns(metrics: Mapping[str, MetricSpec], dimensions: Mapping[str, DimensionSpec],
                  spec: SupervisorSpec) -> None:
    """Refuse a spec that changes what a published column means (:class:`SpecError` naming paths).

    ``metrics`` and ``dimensions`` are the columns as rows were published with them (by earlier
    specs, or as segments record them). Columns may be added or dropped. A metric under a
    published name must keep its aggregator type and input field (compaction and queries
    combine old and new rows as one); a dimension its type.
    """
    new = spec.spec.data_schema
    errors: list[tuple[str, str]] = []
    for i, metric in enumerate(new.metrics_spec):
        before = metrics.get(metric.name)
        if before is None:
            continue
        if before.type != metric.type:
            errors.append((f"spec.dataSchema.metricsSpec[{i}].type", f"metric {metric.name!r}: expected "
                           f"{before.type}, found {metric.type}: published rows were aggregated as {before.type}; "
                           "use a new name"))
        elif (before.input_fields, bool(before.base.by_row)) != (metric.input_fields, bool(metric.base.by_row)):
            was, got = (", ".join(map(repr, m.input_fields)) + (" by row" if m.base.by_row else "")
                        for m in (before, metric))
            errors.append((f"spec.dataSchema.metricsSpec[{i}].fieldName", f"metric {metric.name!r}: expected {was}, "
                           f"found {got}; use a new name"))
        elif before.sketch != metric.sketch:
            errors.append((f"spec.dataSchema.metricsSpec[{i}]", f"metric {metric.name!r}: expected a {before.sketch} "
                           f"sketch, found {metric.sketch}: published sketches merge only with their own kind; "
                           "use a new name"))
        elif (before.filter, before.aggregator) != (metric.filter, metric.aggregator):
            errors.append((f"spec.dataSchema.metricsSpec[{i}]", f"filtered metric {metric.name!r} changed its filter "
                           "or aggregator: published rows were aggregated by the old one; use a new name"))
    if new.dimensions_spec.discovers:  # a field it does not list is discovered as a string, or typed by its values
        typed = sorted(name for name, d in dimensions.items() if d.type != "string" and name not in
                       new.dimensions_spec.names and name not in new.dimensions_spec.dimension_exclusions)
        made = "typed by their values" if new.dimensions_spec.use_schema_discovery else "string dimensions"
        if typed:
            errors.append(("spec.dataSchema.dimensionsSpec.dimensions", f"discovery would make {', '.join(typed)} "
                           f"{made}, but published rows hold them as numbers; list them with their type"))
    for i, metric in enumerate(new.metrics_spec):
        if metric.name in dimensions:
            errors.append((f"spec.dataSchema.metricsSpec[{i}].name", f"{metric.name!r}: expected a dimension, found "
                           "a metric: published rows hold it as a dimension; use a new name"))
    for i, dimension in enumerate(new.dimensions_spec.dimensions):
        if dimension.name in metrics:
            errors.append((f"spec.dataSchema.dimensionsSpec.dimensions[{i}].name", f"{dimension.name!r}: expected a "
                           "metric, found a dimension: published rows hold it as a metric; use a new name"))
        before_dim = dimensions.get(dimension.name)
        if before_dim is not None and before_dim.type != dimension.type:
            errors.append((f"spec.dataSchema.dimensionsSpec.dimensions[{i}].type", f"dimension {dimension.name!r}: "
                           f"expected {before_dim.type}, found {dimension.type}; use a new name"))
    if errors:
        raise SpecError(errors)
