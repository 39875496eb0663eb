"""All spec models in one place: the ``dataSchema`` models and the I/O, tuning and top-level ones."""

from specs.data_schema import (
    AggregatorType,
    DataSchemaSpec,
    DimensionSpec,
    DimensionsSpec,
    DimensionType,
    GranularitySpec,
    MetricSpec,
    SpecModel,
    TimestampSpec,
)
from specs.granularity import Granularity
from specs.supervisor import (
    UNLIMITED_PARSE_EXCEPTIONS,
    InputFormatSpec,
    KafkaIOConfigSpec,
    KafkaSupervisorIngestionSpec,
    KafkaTuningConfigSpec,
    SupervisorSpec,
    ignored_field_paths,
)

__all__ = [
    "UNLIMITED_PARSE_EXCEPTIONS",
    "AggregatorType",
    "DataSchemaSpec",
    "DimensionSpec",
    "DimensionType",
    "DimensionsSpec",
    "Granularity",
    "GranularitySpec",
    "InputFormatSpec",
    "KafkaIOConfigSpec",
    "KafkaSupervisorIngestionSpec",
    "KafkaTuningConfigSpec",
    "MetricSpec",
    "SpecModel",
    "SupervisorSpec",
    "TimestampSpec",
    "ignored_field_paths",
]
