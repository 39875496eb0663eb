"""Upper (and some lower) bounds of every supervisor spec field, in one place.

A spec is user input that one overlord runs next to every other datasource's: each bound is far
beyond what a real Druid deployment writes, but keeps one spec from stalling the overlord (tasks
by the hundred thousand, a busy loop, a parser recursing without end, a Python integer no other
component can hold). Values refused are named by their JSON path, like every other spec error.
"""

from __future__ import annotations

from collections.abc import Sized
from datetime import timedelta

from pydantic import AfterValidator

from specs.durations import format_iso_duration
from specs.spec_errors import SpecError

__all__ = [
    "JAVA_INT_MAX",
    "MAX_CARDINALITY_FIELDS",
    "MAX_COMPLETION_TIMEOUT",
    "MAX_DATASOURCE_BYTES",
    "MAX_DIMENSIONS",
    "MAX_DIMENSION_EXCLUSIONS",
    "MAX_EXPRESSION_DEPTH",
    "MAX_EXPRESSION_LENGTH",
    "MAX_FILTER_CLAUSES",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_VALUES",
    "MAX_FLATTEN_FIELDS",
    "MAX_INPUT_COLUMNS",
    "MAX_JSON_DEPTH",
    "MAX_METRICS",
    "MAX_NAME_LENGTH",
    "MAX_PATH_LENGTH",
    "MAX_PATTERN_LENGTH",
    "MAX_PERIOD",
    "MAX_REJECTION_PERIOD",
    "MAX_REPLICAS",
    "MAX_SAVED_PARSE_EXCEPTIONS",
    "MAX_SHORT_TEXT_LENGTH",
    "MAX_START_DELAY",
    "MAX_STRING_BYTES",
    "MAX_TASKS",
    "MAX_TASK_COUNT",
    "MAX_TASK_DURATION",
    "MAX_TOPIC_LENGTH",
    "MAX_TRANSFORMS",
    "MIN_COMPLETION_TIMEOUT",
    "MIN_PERIOD",
    "MIN_SEGMENT_GRANULARITY",
    "MIN_TASK_DURATION",
    "at_most",
    "check_at_most",
    "within",
]

# --- task scheduling (ioConfig) ---------------------------------------------------------------
MAX_TASK_COUNT = 1_000  # Druid's taskCount is at most the partition count; topics rarely have 1,000
MAX_REPLICAS = 10  # Druid deployments run 1 to 3 replicas
MAX_TASKS = 1_000  # taskCount * replicas: the tasks one supervisor may plan, each a DB row and a log line
MIN_PERIOD = timedelta(seconds=1)  # a shorter management period is a busy loop (Druid's default: PT30S)
MAX_PERIOD = timedelta(days=1)  # a supervisor looks at its topic at least daily (it also wakes on task end)
MIN_TASK_DURATION = timedelta(seconds=1)  # shorter reads only churn tasks (Druid's default: PT1H)
MAX_TASK_DURATION = timedelta(days=30)  # keeps rejection windows and time arithmetic in range
MAX_START_DELAY = timedelta(days=1)  # Druid's default is PT5S
MIN_COMPLETION_TIMEOUT = timedelta(seconds=10)  # shorter stops every task before Spark has started it
MAX_COMPLETION_TIMEOUT = timedelta(days=7)  # Druid's default is PT30M
MAX_REJECTION_PERIOD = timedelta(days=3_650)  # ten years back or ahead: datetimes stay within year 1..9999

# --- text --------------------------------------------------------------------------------------
MAX_TOPIC_LENGTH = 249  # Kafka's own limit on a topic name
MAX_DATASOURCE_BYTES = 255  # a path component of deep storage (most file systems' limit)
MAX_NAME_LENGTH = 1_024  # column, field and metadata column names: a JSON path of a nested field fits
MAX_PATTERN_LENGTH = 1_000  # topicPattern, regex and like patterns: compiled per spec and per record
MAX_PATH_LENGTH = 1_000  # a flattenSpec JSONPath or jq expression
MAX_EXPRESSION_LENGTH = 10_000  # a transform's expression (parsed at submit, compiled into every task)
MAX_EXPRESSION_DEPTH = 64  # nested parentheses, calls and unary operators: the parser recurses per level
MAX_JSON_DEPTH = 64  # nested objects and arrays of a spec or request body: validation and serialisation recurse
MAX_SHORT_TEXT_LENGTH = 100  # delimiters, encodings and the like

# --- schema size (dataSchema, inputFormat) -----------------------------------------------------
MAX_DIMENSIONS = 2_000  # columns of every segment; wide Druid schemas have hundreds
MAX_DIMENSION_EXCLUSIONS = 10_000  # names only, but each is compared with every discovered field
MAX_METRICS = 1_000  # aggregators computed per row
MAX_TRANSFORMS = 1_000  # expressions compiled into every task's SQL
MAX_FLATTEN_FIELDS = 2_000  # one input field each, like dimensions
MAX_INPUT_COLUMNS = 10_000  # the columns of a csv or tsv value (or key)
MAX_CARDINALITY_FIELDS = 100  # the fields one cardinality aggregator combines
MAX_STRING_BYTES = 1_048_576  # stringFirst/stringLast's maxStringBytes: 1 MiB per value (Druid's default: 1024)

# --- filters (transformSpec.filter, filtered aggregators) --------------------------------------
MAX_FILTER_DEPTH = 32  # nested and/or/not: the filter is translated recursively
MAX_FILTER_CLAUSES = 1_000  # filter objects in one filter, all levels together
MAX_FILTER_VALUES = 10_000  # values of one in filter, intervals of one interval filter

# --- granularity -------------------------------------------------------------------------------
MIN_SEGMENT_GRANULARITY = timedelta(seconds=1)  # Druid's finest named one (SECOND); finer is a file per row

# --- tuning (tuningConfig) ---------------------------------------------------------------------
JAVA_INT_MAX = 2_147_483_647  # row counts and parse-exception limits: Druid's Java int, so any Druid spec fits
MAX_SAVED_PARSE_EXCEPTIONS = 1_000  # samples kept in memory and in every task report

def check_at_most(count: int, limit: int, what: str, path: str = "") -> None:
    """:class:`SpecError` at ``path`` if ``count`` (a number of ``what``) exceeds ``limit``."""
    if count > limit:
        raise SpecError.at(path, f"at most {limit} {what} are allowed (a limit of this service), got {count}")


def at_most(limit: int, what: str) -> AfterValidator:
    """A validator refusing a string, list (by length) or integer (by value) over ``limit``.

    ``what`` names the unit: ``characters``, ``dimensions``; for an integer it is unused.
    """
    def check(value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            if value > limit:
                raise SpecError.at("", f"must be <= {limit} (a limit of this service), got {value}")
        elif isinstance(value, Sized):
            check_at_most(len(value), limit, what)
        return value

    return AfterValidator(check)


def within(low: timedelta | None, high: timedelta) -> AfterValidator:
    """A validator refusing a duration shorter than ``low`` or longer than ``high``."""
    def check(value: timedelta | None) -> timedelta | None:
        if value is None:
            return value
        if low is not None and value < low:
            raise SpecError.at("", f"must be a positive duration of at least {format_iso_duration(low)} (a limit of "
                                   "this service), "
                                   f"got {format_iso_duration(value)}")
        if value > high:
            raise SpecError.at("", f"must be at most {format_iso_duration(high)} (a limit of this service), "
                                   f"got {format_iso_duration(value)}")
        return value

    return AfterValidator(check)
