"""Druid fields that change what is ingested and are not implemented yet are refused, naming their
path: accepting and ignoring them would ingest other data than Druid does, without a word.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from specs import SpecError, load_supervisor_spec
from tests.helpers import spec_json


def _data_schema(change: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    return lambda raw: change(raw["spec"]["dataSchema"])


def _io(change: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    return lambda raw: change(raw["spec"]["ioConfig"])


@pytest.mark.parametrize(("change", "path"), [
    (_data_schema(lambda s: s.update(transformSpec={"filter": {"type": "selector", "dimension": "country",
                                                                "value": "DE"}})), "spec.dataSchema.transformSpec"),
    (_data_schema(lambda s: s.update(transformSpec={"transforms": [{"type": "expression", "name": "x",
                                                                    "expression": "1"}]})),
     "spec.dataSchema.transformSpec"),
    (_data_schema(lambda s: s["dimensionsSpec"].update(dimensions=[])), "spec.dataSchema.dimensionsSpec.dimensions"),
    (_data_schema(lambda s: s["dimensionsSpec"].update(useSchemaDiscovery=True)),
     "spec.dataSchema.dimensionsSpec.useSchemaDiscovery"),
    (_data_schema(lambda s: s["dimensionsSpec"].update(spatialDimensions=[{"dimName": "c", "dims": ["x", "y"]}])),
     "spec.dataSchema.dimensionsSpec.spatialDimensions"),
    (_io(lambda io: io.update(inputFormat={"type": "json", "flattenSpec": {"fields": [
        {"type": "path", "name": "a", "expr": "$.x.a"}]}})), "spec.ioConfig.inputFormat.flattenSpec"),
    (_io(lambda io: io.update(lateMessageRejectionPeriod="PT1H")), "spec.ioConfig.lateMessageRejectionPeriod"),
    (_io(lambda io: io.update(earlyMessageRejectionPeriod="PT1H")), "spec.ioConfig.earlyMessageRejectionPeriod"),
    (_io(lambda io: io.update(lateMessageRejectionStartDateTime="2026-01-01T00:00:00Z")),
     "spec.ioConfig.lateMessageRejectionStartDateTime"),
], ids=["transform-filter", "transforms", "schema-discovery", "useSchemaDiscovery", "spatialDimensions",
        "flattenSpec-fields", "late-rejection", "early-rejection", "late-rejection-start"])
def test_a_field_that_would_change_the_data_is_refused_naming_it(change: Any, path: str) -> None:
    raw = spec_json("ds", "topic")
    change(raw)
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    [(found, message)] = refused.value.errors
    assert found == path and "not supported" in message, refused.value.errors


def test_empty_or_default_forms_of_those_fields_are_accepted() -> None:
    raw = spec_json("ds", "topic")
    raw["spec"]["dataSchema"]["transformSpec"] = {"transforms": [], "filter": None}
    raw["spec"]["ioConfig"]["inputFormat"] = {"type": "json", "flattenSpec": {"useFieldDiscovery": True, "fields": []}}
    raw["spec"]["dataSchema"]["dimensionsSpec"]["useSchemaDiscovery"] = False
    load_supervisor_spec(raw)  # no error
