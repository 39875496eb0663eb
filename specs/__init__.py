"""Druid-compatible Kafka supervisor specs.

``load_supervisor_spec`` reads the JSON a Druid Overlord accepts at
``POST /druid/indexer/v1/supervisor`` for ``"type": "kafka"`` into frozen
pydantic models.  Fields Druid knows but this service does not act on are
accepted and listed by :attr:`SupervisorSpec.ignored_fields`; invalid values
raise :class:`SpecError` naming their JSON path.
"""

from specs.consumer_properties import (
    ALLOWED_CONSUMER_PROPERTIES,
    ConsumerPropertiesPolicy,
    consumer_property_errors,
    environment_secret_values,
    resolve_consumer_properties,
)
from specs.data_schema import (
    DataSchemaSpec,
    DimensionSpec,
    DimensionsSpec,
    GranularitySpec,
    MetricSpec,
    TimestampSpec,
    TransformSpec,
)
from specs.durations import format_iso_duration, parse_iso_duration
from specs.granularity import Granularity
from specs.loader import EXAMPLES_DIR, load_example, load_supervisor_spec
from specs.spec_errors import SpecError
from specs.supervisor import (
    DYNAMIC_CONFIG_PROVIDER,
    EXACT_READ_CONSUMER_PROPERTIES,
    SECRET_ENV_PREFIX,
    SEVERAL_TOPICS,
    UNLIMITED_PARSE_EXCEPTIONS,
    InputFormatSpec,
    KafkaIOConfigSpec,
    KafkaSupervisorIngestionSpec,
    KafkaTuningConfigSpec,
    SupervisorSpec,
    check_columns,
    check_update,
)

__all__ = [
    "ALLOWED_CONSUMER_PROPERTIES",
    "check_columns",
    "check_update",
    "consumer_property_errors",
    "ConsumerPropertiesPolicy",
    "environment_secret_values",
    "resolve_consumer_properties",
    "DYNAMIC_CONFIG_PROVIDER",
    "EXACT_READ_CONSUMER_PROPERTIES",
    "SECRET_ENV_PREFIX",
    "SEVERAL_TOPICS",
    "EXAMPLES_DIR",
    "UNLIMITED_PARSE_EXCEPTIONS",
    "DataSchemaSpec",
    "DimensionSpec",
    "DimensionsSpec",
    "Granularity",
    "GranularitySpec",
    "InputFormatSpec",
    "KafkaIOConfigSpec",
    "KafkaSupervisorIngestionSpec",
    "KafkaTuningConfigSpec",
    "MetricSpec",
    "SpecError",
    "SupervisorSpec",
    "TimestampSpec",
    "TransformSpec",
    "format_iso_duration",
    "load_example",
    "load_supervisor_spec",
    "parse_iso_duration",
]
