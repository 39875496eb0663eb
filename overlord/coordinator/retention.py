"""Retention rules: Druid's per-datasource load and drop rules, and which intervals they drop.

Rules are Druid's ``/druid/coordinator/v1/rules/{dataSource}`` list, read top to bottom: the
first rule that applies to a segment's interval decides whether it is kept (a load or broadcast
rule: replicas and tiers do not apply here, deep storage is what queries read) or dropped,
i.e. marked unused. A datasource's own rules are followed by the cluster's default rules
(``_default``, ``loadForever`` unless set); an interval no rule applies to is kept. Periods
count back from now, months by the calendar, as Druid's do:

* ``*ByPeriod``: the interval ``[now - period, now)`` holds the segment's interval; with
  ``includeFuture`` (the default) a segment that starts or ends after it applies as well
  (a load rule asks only for overlap, as in Druid);
* ``dropBeforeByPeriod``: the segment ends by ``now - period``;
* ``*ByInterval``: the rule's interval holds (drop) or overlaps (load) the segment's;
* ``*Forever``: always.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from segment_store.timeline import Interval
from specs import SpecError
from specs.durations import parse_iso_period, parse_utc_interval, plus_period

__all__ = ["DEFAULT_RULES", "DEFAULT_RULES_KEY", "Rule", "RULES", "dropped"]

DEFAULT_RULES_KEY = "_default"
"""The datasource name under which Druid keeps the cluster's default rules."""


class _Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    type: str
    tiered_replicants: dict[str, int] | None = Field(default=None, alias="tieredReplicants")
    """Druid's replicas per tier: accepted, without effect (every segment is read from deep storage)."""
    use_default_tier_for_null: bool | None = Field(default=None, alias="useDefaultTierForNull")

    @property
    def drops(self) -> bool:
        return self.type.startswith("drop")


class _Forever(_Rule):
    type: Literal["loadForever", "dropForever", "broadcastForever"]

    def applies(self, interval: Interval, now: datetime) -> bool:
        return True


class _Periodic(_Rule):
    period: str

    @field_validator("period")
    @classmethod
    def _period(cls, value: str) -> str:
        try:
            parse_iso_period(value)
        except SpecError as exc:
            raise ValueError(exc.errors[0][1]) from None
        return value

    def since(self, now: datetime) -> datetime:
        return plus_period(now, parse_iso_period(self.period), -1)


class _ByPeriod(_Periodic):
    type: Literal["loadByPeriod", "dropByPeriod", "broadcastByPeriod"]
    include_future: bool = Field(default=True, alias="includeFuture")

    def applies(self, interval: Interval, now: datetime) -> bool:
        start = self.since(now)
        if self.drops:
            return start <= interval[0] and (self.include_future or interval[1] <= now)
        return interval[1] > start and (self.include_future or interval[0] < now)


class _DropBeforeByPeriod(_Periodic):
    type: Literal["dropBeforeByPeriod"]

    def applies(self, interval: Interval, now: datetime) -> bool:
        return interval[1] <= self.since(now)


class _ByInterval(_Rule):
    type: Literal["loadByInterval", "dropByInterval", "broadcastByInterval"]
    interval: str

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        parse_utc_interval(value)  # its ValueError names what was expected
        return value

    def applies(self, interval: Interval, now: datetime) -> bool:
        start, end = parse_utc_interval(self.interval)
        if self.drops:
            return start <= interval[0] and interval[1] <= end
        return start < interval[1] and interval[0] < end


Rule = Annotated[_Forever | _ByPeriod | _DropBeforeByPeriod | _ByInterval, Field(discriminator="type")]
RULES: TypeAdapter[list[Rule]] = TypeAdapter(list[Rule])
"""Validates a rules list (Druid's JSON)."""
DEFAULT_RULES: list[Rule] = RULES.validate_python([{"type": "loadForever"}])


def dropped(rules: Sequence[Rule], interval: Interval, now: datetime) -> bool:
    """Whether the first of ``rules`` that applies to ``interval`` drops it (none applies: kept)."""
    for rule in rules:
        if rule.applies(interval, now):
            return rule.drops
    return False
