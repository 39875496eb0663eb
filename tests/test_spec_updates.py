"""A spec update may add or drop columns, never change what an existing column means."""

from __future__ import annotations

from typing import Any

import pytest

from specs import SpecError, check_update, load_supervisor_spec
from tests.helpers import spec_json


def updated(change: Any) -> Any:
    raw = spec_json("ds", "topic")
    change(raw["spec"]["dataSchema"])
    return load_supervisor_spec(raw)


ORIGINAL = load_supervisor_spec(spec_json("ds", "topic"))


def metric(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in schema["metricsSpec"] if m["name"] == name)


@pytest.mark.parametrize(("change", "path", "fragment"), [
    (lambda s: metric(s, "value_max").update(type="longSum"),
     "spec.dataSchema.metricsSpec[3].type", "expected longMax"),
    (lambda s: metric(s, "value_sum").update(type="doubleSum"),
     "spec.dataSchema.metricsSpec[1].type", "expected longSum"),
    (lambda s: metric(s, "value_sum").update(fieldName="price"),
     "spec.dataSchema.metricsSpec[1].fieldName", "expected 'value'"),
    (lambda s: s["dimensionsSpec"].update(dimensions=[{"type": "long", "name": "country"}, "device"]),
     "spec.dataSchema.dimensionsSpec.dimensions[0].type", "expected string"),
    (lambda s: (s["metricsSpec"].remove(metric(s, "value_sum")), s["dimensionsSpec"].update(
        dimensions=["country", "value_sum"])), "spec.dataSchema.dimensionsSpec.dimensions[1].name",
     "expected a metric"),
    (lambda s: (s["dimensionsSpec"].update(dimensions=["country"]), s["metricsSpec"].append(
        {"type": "longSum", "name": "device", "fieldName": "value"})), "spec.dataSchema.metricsSpec[5].name",
     "expected a dimension"),
])
def test_changing_an_existing_columns_meaning_is_refused(change: Any, path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as refused:
        check_update([ORIGINAL], updated(change))
    (found_path, message), = refused.value.errors
    assert found_path == path and fragment in message


def test_adding_and_dropping_columns_is_allowed() -> None:
    def change(schema: dict[str, Any]) -> None:
        schema["dimensionsSpec"]["dimensions"].append("region")
        schema["metricsSpec"] = [m for m in schema["metricsSpec"] if m["name"] != "price_sum"]
        schema["metricsSpec"].append({"type": "doubleMax", "name": "price_max", "fieldName": "price"})

    check_update([ORIGINAL], updated(change))  # no error


def test_a_metric_dropped_by_an_earlier_update_keeps_its_meaning() -> None:
    dropped = updated(lambda s: s.update(metricsSpec=[m for m in s["metricsSpec"] if m["name"] != "value_max"]))
    again = updated(lambda s: metric(s, "value_max").update(type="longSum"))
    with pytest.raises(SpecError) as refused:
        check_update([dropped, ORIGINAL], again)
    assert refused.value.errors == [("spec.dataSchema.metricsSpec[3].type", refused.value.errors[0][1])]
    assert "expected longMax" in refused.value.errors[0][1]


def _filtered(device: str) -> dict[str, Any]:
    return {"type": "filtered", "filter": {"type": "selector", "dimension": "device", "value": device},
            "aggregator": {"type": "longSum", "name": "mobile_value", "fieldName": "value"}}


def test_a_filtered_metric_keeps_its_filter_and_aggregator() -> None:
    """Published rows were aggregated over the old filter's records: a new filter needs a new name."""
    first = updated(lambda s: s["metricsSpec"].append(_filtered("mobile")))
    assert first.spec.data_schema.metrics_spec[-1].name == "mobile_value"  # the aggregator's name
    check_update([first], updated(lambda s: s["metricsSpec"].append(_filtered("mobile"))))  # unchanged: fine
    with pytest.raises(SpecError) as refused:
        check_update([first], updated(lambda s: s["metricsSpec"].append(_filtered("tablet"))))
    [(path, message)] = refused.value.errors
    assert path == "spec.dataSchema.metricsSpec[5]" and "mobile_value" in message


def test_discovery_may_not_turn_a_typed_dimension_into_a_string() -> None:
    first = updated(lambda s: s["dimensionsSpec"].update(dimensions=["country", {"name": "n", "type": "long"}]))
    with pytest.raises(SpecError) as refused:
        check_update([first], updated(lambda s: s["dimensionsSpec"].update(dimensions=[])))
    [(path, message)] = refused.value.errors
    assert path == "spec.dataSchema.dimensionsSpec.dimensions" and "n string" in message
    check_update([first], updated(lambda s: s["dimensionsSpec"].update(
        dimensions=[{"name": "n", "type": "long"}], includeAllDimensions=True)))  # listed with its type: fine


def test_typed_discovery_may_not_retype_a_typed_dimension_either() -> None:
    """Discovery would type ``n`` by its values (a DOUBLE, a STRING): files holding it as LONG would not merge."""
    first = updated(lambda s: s["dimensionsSpec"].update(dimensions=["country", {"name": "n", "type": "long"}]))
    with pytest.raises(SpecError) as refused:
        check_update([first], updated(lambda s: s["dimensionsSpec"].update(dimensions=[], useSchemaDiscovery=True)))
    [(path, message)] = refused.value.errors
    assert path == "spec.dataSchema.dimensionsSpec.dimensions" and "n typed by their values" in message
    check_update([first], updated(lambda s: s["dimensionsSpec"].update(
        dimensions=[{"name": "n", "type": "long"}], useSchemaDiscovery=True)))
