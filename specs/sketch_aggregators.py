"""Druid's sketch aggregators, and the Apache DataSketches sketch each stores per row.

==========================  ===============================================================
Druid aggregator            sketch stored
==========================  ===============================================================
``thetaSketch``             theta, ``size`` nominal entries (default 16384)
``HLLSketchBuild``          HLL, ``lgK`` (default 12) and ``tgtHllType`` (default HLL_4)
``hyperUnique``             HLL, lgK 11: Druid's HyperLogLog has 2^11 buckets; it counts '' too
``cardinality``             HLL, lgK 11, of its ``fields``' values (``byRow``: of their combination)
``quantilesDoublesSketch``  KLL of ``k * 1.5`` (at least Druid's classic sketch's rank accuracy)
==========================  ===============================================================

Spark reads each family natively (``theta_union_agg``, ``hll_union_agg``, ``kll_merge_agg_double``);
Spark has no classic quantiles sketch, hence KLL. A sketch column's :class:`Sketch` is recorded
in every segment's descriptor so a query knows how to merge it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from specs.spec_errors import SpecError

__all__ = ["SKETCH_AGGREGATORS", "Sketch", "sketch_of"]

SKETCH_AGGREGATORS = frozenset({"thetaSketch", "HLLSketchBuild", "hyperUnique", "cardinality",
                                "quantilesDoublesSketch"})
_PARAMETERS = {"size": "thetaSketch", "lgK": "HLLSketchBuild", "tgtHllType": "HLLSketchBuild",
               "k": "quantilesDoublesSketch", "fields": "cardinality", "byRow": "cardinality"}
_HYPER_UNIQUE_LG_K = 11


class Sketch(NamedTuple):
    """A sketch column's family and size: theta nominal entries, HLL lgK (and type), KLL k."""

    family: Literal["theta", "hll", "kll"]
    size: int
    hll_type: str = ""
    counts_empty: bool = False
    """Whether the empty string counts as a value: Druid's own HyperLogLog (hyperUnique, cardinality) hashes it;
    DataSketches, and so Druid's sketch aggregators, skip it."""

    def __str__(self) -> str:
        return f"{self.family}:{self.size}" + (f":{self.hll_type}" if self.hll_type else "") + (
            ":counts_empty" if self.counts_empty else "")

    @classmethod
    def parse(cls, text: str) -> Sketch:
        """The inverse of ``str``."""
        family, size, *rest = text.split(":")
        if family not in ("theta", "hll", "kll"):
            raise ValueError(f"not a sketch: {text!r}")
        hll_type = next((part for part in rest if part != "counts_empty"), "")
        return cls(family, int(size), hll_type, "counts_empty" in rest)  # type: ignore[arg-type]

    @property
    def lg_size(self) -> int:
        """log2 of a theta sketch's nominal entries (its lgK)."""
        return self.size.bit_length() - 1


def _power_of_two(value: int, low: int, high: int, name: str) -> int:
    if not low <= value <= high or value & (value - 1):
        raise SpecError.at(name, f"must be a power of 2 from {low} to {high}, got {value}")
    return value


def sketch_of(aggregator: str, fields: Mapping[str, Any]) -> Sketch | None:
    """The sketch a Druid aggregator of type ``aggregator`` with these (camelCase) ``fields`` stores.

    None for an aggregator that is not a sketch; :class:`SpecError` for a parameter that does
    not belong to the aggregator or is out of range.
    """
    for name, owner in _PARAMETERS.items():
        if fields.get(name) not in (None, False) and owner != aggregator:
            raise SpecError.at(name, f"only a {owner} aggregator takes {name}")
    if aggregator == "thetaSketch":
        return Sketch("theta", _power_of_two(fields.get("size") or 16384, 16, 2**26, "size"))
    if aggregator == "HLLSketchBuild":
        lg_k = fields.get("lgK") or 12
        if not 4 <= lg_k <= 21:
            raise SpecError.at("lgK", f"must be from 4 to 21, got {lg_k}")
        return Sketch("hll", lg_k, fields.get("tgtHllType") or "HLL_4")
    if aggregator in ("hyperUnique", "cardinality"):
        return Sketch("hll", _HYPER_UNIQUE_LG_K, "HLL_4", counts_empty=True)
    if aggregator == "quantilesDoublesSketch":
        k = _power_of_two(fields.get("k") or 128, 2, 32768, "k")
        return Sketch("kll", max(8, k + k // 2))
    return None
