"""The ``inputFormat`` of a Kafka supervisor spec: JSON, CSV, TSV, Avro or Protobuf values, or ``kafka`` around them.

A ``json`` value in Confluent's wire format (a zero byte and a 4-byte schema id before the
document, as its JSON Schema serializer writes) is read as the document: JSON text never starts
with a zero byte. The registry's JSON Schema is not checked (the producer's serializer did).

A ``csv`` or ``tsv`` value is one line of ``columns`` (Druid reads a value of several lines as
several rows: such a value is refused per record here); empty fields are null, as in Druid. The
``kafka`` format reads the value with its ``valueFormat`` (one of those) and offers the
record's metadata as input fields too: the key's first column (``keyFormat`` tsv or csv), the
Kafka timestamp in milliseconds, the topic, and each header as UTF-8 text, under the names
its ``...ColumnName`` fields give (Druid's defaults ``kafka.key``, ``kafka.timestamp``,
``kafka.topic``, ``kafka.header.<name>``). The key and headers are read only when their
formats are given, as in Druid.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from specs import limits
from specs.avro import AvroBytesDecoderSpec
from specs.data_schema import Name, SpecModel, duplicates, unsupported
from specs.flatten import FlattenSpec
from specs.protobuf import ProtoBytesDecoderSpec
from specs.spec_errors import SpecError

__all__ = ["HeaderFormatSpec", "InputFormatSpec", "KeyFormatSpec"]

_Columns = Annotated[tuple[Name, ...], limits.at_most(limits.MAX_INPUT_COLUMNS, "columns")]
_ShortText = Annotated[str, limits.at_most(limits.MAX_SHORT_TEXT_LENGTH, "characters")]


class KeyFormatSpec(SpecModel):
    """How a record's key is read: its first tab- (tsv) or comma-separated (csv) column."""

    not_implemented: ClassVar[dict[str, str]] = {
        "findColumnsFromHeader": "column names from a header row", "skipHeaderRows": "skipping header rows"}
    harmless: ClassVar[frozenset[str]] = frozenset({"listDelimiter"})  # a key: only its first column is read

    type: Literal["tsv", "csv"]
    """Key format: tsv or csv (a csv key that starts with a quote is unparseable)."""
    columns: _Columns = Field(default=(), strict=False)
    """Column names; only the first column is ingested, as the key column."""
    delimiter: _ShortText = "\t"
    """tsv only: the column delimiter (one character)."""

    @model_validator(mode="after")
    def _one_character_delimiter(self) -> KeyFormatSpec:
        if self.type == "csv" and "delimiter" in self.model_fields_set:
            raise SpecError.at("delimiter", "a csv key is comma-separated; use tsv for another delimiter")
        if len(self.delimiter) != 1:
            raise SpecError.at("delimiter", f"expected one character, got {self.delimiter!r}")
        return self

    @property
    def separator(self) -> str:
        """The character that ends the first column."""
        return "," if self.type == "csv" else self.delimiter


class HeaderFormatSpec(SpecModel):
    """How header values are read: as UTF-8 text."""

    type: Literal["string"]
    """Header format type."""
    encoding: _ShortText = "UTF-8"
    """Only UTF-8 is supported."""

    @field_validator("encoding")
    @classmethod
    def _utf8(cls, value: str) -> str:
        if value.upper().replace("_", "-") not in ("UTF-8", "UTF8"):
            raise SpecError.at("", f"only UTF-8 headers are supported, got {value!r}")
        return value


_UNSUPPORTED_DECODERS = {
    "schema_repo": "Druid's AVRO-1124 schema repository, which this service does not read",
    "multiple_version": "Druid's AVRO-1124 schema repository, which this service does not read",
    "multiple_schemas_inline": "Druid's decoder of inline schemas by version byte, which this service does not read",
}


class InputFormatSpec(SpecModel):
    """How Kafka records are parsed: JSON, CSV or TSV values, or the ``kafka`` format around a ``valueFormat``."""

    harmless: ClassVar[frozenset[str]] = frozenset({"keepNullColumns", "useJsonNodeReader"})
    not_implemented: ClassVar[dict[str, str]] = {
        "featureSpec": "JSON parser features", "assumeNewlineDelimited": "splitting a value into records at newlines",
        "tryParseNumbers": "reading CSV and TSV numbers as numbers",
        "extractUnionsByType": "Avro union members as fields named by their type"}

    type: Literal["json", "kafka", "csv", "tsv", "avro_stream", "protobuf"] = "json"
    """Input format type."""
    avro_bytes_decoder: AvroBytesDecoderSpec | None = None
    """avro_stream: the schema of the values (``schema_inline``) or where it is (``schema_registry``)."""
    proto_bytes_decoder: ProtoBytesDecoderSpec | None = None
    """protobuf: the message type of the values (``file``, ``inline``) or where it is (``schema_registry``)."""
    binary_as_string: bool = False
    """avro_stream, protobuf: read bytes values as UTF-8 text (else a record holding one is unparseable)."""
    columns: _Columns = Field(default=(), strict=False)
    """csv, tsv: the names of the values of a line, in order (extra values are dropped, missing ones null)."""
    delimiter: _ShortText = "\t"
    """tsv: the one character between values (csv: a comma)."""
    list_delimiter: _ShortText = "\u0001"
    """csv, tsv: what splits a value into the values of a multi-value dimension (an empty part is null)."""
    find_columns_from_header: bool = False
    """csv, tsv: must be false (in a stream, each record would be its own header)."""
    skip_header_rows: int = 0
    """csv, tsv: must be 0 (each record would lose its first lines)."""
    flatten_spec: FlattenSpec = FlattenSpec()
    """json: input fields read from nested values (JSONPath or jq), and whether top-level fields are offered."""
    value_format: InputFormatSpec | None = None
    """kafka: the format of the record value (json)."""
    key_format: KeyFormatSpec | None = None
    """kafka: the format of the record key; without it the key is not read."""
    header_format: HeaderFormatSpec | None = None
    """kafka: the format of header values; without it headers are not read."""
    key_column_name: Name | None = None
    """kafka: the input field holding the key's first column (default ``kafka.key``)."""
    timestamp_column_name: Name | None = None
    """kafka: the input field holding the record's Kafka timestamp in ms (default ``kafka.timestamp``)."""
    topic_column_name: Name | None = None
    """kafka: the input field holding the topic (default ``kafka.topic``)."""
    header_column_prefix: Name | None = None
    """kafka: header ``h`` is the input field ``<prefix>h`` (default ``kafka.header.``)."""

    @property
    def metadata_columns(self) -> dict[str, str]:
        """kafka: the input field names of the key, timestamp and topic, and the header prefix."""
        return {"key": self.key_column_name or "kafka.key",
                "timestamp": self.timestamp_column_name or "kafka.timestamp",
                "topic": self.topic_column_name or "kafka.topic",
                "header": self.header_column_prefix or "kafka.header."}

    @field_validator("avro_bytes_decoder", "proto_bytes_decoder", mode="before")
    @classmethod
    def _known_decoder(cls, value: Any) -> Any:
        kinds = {"schema_inline", "schema_registry", "file", "inline"}
        kind = value.get("type") if isinstance(value, dict) else None
        if isinstance(value, dict) and kind not in kinds:
            what = _UNSUPPORTED_DECODERS.get(str(kind), "an unknown decoder type")
            raise SpecError.at("type", f"{kind!r} is {what}; supported: schema_inline or schema_registry (Avro), "
                                       "file, inline or schema_registry (Protobuf)")
        return value

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> InputFormatSpec:
        kafka_only = {"valueFormat", "keyFormat", "headerFormat", "keyColumnName", "timestampColumnName",
                      "topicColumnName", "headerColumnPrefix"}
        delimited_only = {"columns", "delimiter", "listDelimiter", "findColumnsFromHeader", "skipHeaderRows"}
        avro_only = {"avroBytesDecoder", "binaryAsString"}
        protobuf_only = {"protoBytesDecoder", "binaryAsString"}
        fields = type(self).model_fields  # a default written out (as a spec read back is) counts as not given
        given = {fields[name].alias or name for name in self.model_fields_set
                 if name in fields and getattr(self, name) != fields[name].default}
        takers = {"json": {"flattenSpec"}, "kafka": kafka_only, "csv": delimited_only - {"delimiter"},
                  "tsv": delimited_only, "avro_stream": avro_only | {"flattenSpec"},
                  "protobuf": protobuf_only | {"flattenSpec"}}
        wrong = sorted(given & (kafka_only | delimited_only | avro_only | protobuf_only | {"flattenSpec"})
                       - takers[self.type])
        if wrong:
            raise SpecError([(key, f"a {self.type} input format does not take it") for key in wrong])
        if self.type in ("csv", "tsv"):
            return self._delimited()
        if self.type == "avro_stream":
            if self.avro_bytes_decoder is None:
                raise SpecError.at("avroBytesDecoder", "required for avro_stream: {\"type\": \"schema_inline\", "
                                                       "\"schema\": {...}} or {\"type\": \"schema_registry\", ...}")
            return self
        if self.type == "protobuf":
            if self.proto_bytes_decoder is None:
                raise SpecError.at("protoBytesDecoder", "required for protobuf: {\"type\": \"file\", \"descriptor\": "
                                                        "..., \"protoMessageType\": ...} or {\"type\": "
                                                        "\"schema_registry\", ...}")
            return self
        if self.type == "json":
            return self
        if self.value_format is None:
            raise SpecError.at("valueFormat", "required for the kafka input format")
        if self.value_format.type == "kafka":
            raise SpecError.at("valueFormat.type", "json, csv, tsv, avro_stream or protobuf")
        columns = self.metadata_columns
        names = {"keyColumnName": columns["key"], "timestampColumnName": columns["timestamp"],
                 "topicColumnName": columns["topic"]}
        seen: dict[str, str] = {}
        for key, name in names.items():
            if name in seen or name.startswith(columns["header"]):
                raise SpecError.at(key, f"{name!r} is already the name of {seen.get(name, 'a header column')}")
            seen[name] = key
        return self

    def _delimited(self) -> InputFormatSpec:
        if self.find_columns_from_header:
            raise SpecError([unsupported("findColumnsFromHeader", "reading column names from a header row (each "
                                         "record of a stream would be its own header)", "list the columns")])
        if self.skip_header_rows:
            raise SpecError([unsupported("skipHeaderRows", "skipping header rows (each record would lose them)")])
        if not self.columns:
            raise SpecError.at("columns", f"a {self.type} input format needs the names of its columns")
        errors = duplicates([name.lower() for name in self.columns], "columns", "column")
        if errors:
            raise SpecError([(path.removesuffix(".name"), message) for path, message in errors])
        if len(self.delimiter) != 1 or self.delimiter in "\r\n":
            raise SpecError.at("delimiter", f"expected one character other than a line break, got {self.delimiter!r}")
        if not self.list_delimiter:
            raise SpecError.at("listDelimiter", "must not be empty")
        return self

    @property
    def value_spec(self) -> InputFormatSpec:
        """The format of the record values: this one, or the kafka format's ``valueFormat``."""
        return self.value_format if self.value_format is not None else self

    @property
    def separator(self) -> str:
        """csv, tsv: the character between values."""
        return "," if self.type == "csv" else self.delimiter

    def metadata_source(self, name: str) -> str | None:
        """What input field ``name`` holds: ``key:tsv|csv``, ``timestamp``, ``topic``, ``header:<name>``, or None."""
        if self.type != "kafka":
            return None
        columns = self.metadata_columns
        if self.key_format is not None and name == columns["key"]:
            return f"key:{self.key_format.type}"
        if name == columns["timestamp"]:
            return "timestamp"
        if name == columns["topic"]:
            return "topic"
        if self.header_format is not None and name.startswith(columns["header"]) and name != columns["header"]:
            return f"header:{name[len(columns['header']):]}"
        return None
