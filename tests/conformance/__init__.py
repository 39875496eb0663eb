"""Druid's own query tests as our conformance suite: ``python -m tests.conformance`` prints the score.

The cases' facts (queries and expected answers) come from apache/druid at these commits:
TestDataBuilder 04bb5b8821f9 (the rows); CalciteQueryTest dada817b7dac (most cases) and 0005fd49cb52;
CalciteSelectQueryTest 00f5f8ec940b; CalciteMultiValueStringQueryTest 03530aa99a70; CalciteArraysQueryTest
33a2ee66729f; CalciteJoinQueryTest 0031067ca89a; CalciteSubqueryTest 026b4421323f; InformationSchema 0468ea1f2e29;
the window ``.sqlTest`` files and MSQWindowTest at the commits the closing note of issue 28 names;
the DataSketches SQL aggregator tests f88ebad66b87 (HLL), 1767a10b6cfa (theta), b16229cfd19b (quantiles).
Native cases whose ``from`` says "hand-derived" apply Druid's documented result shapes to these rows.
"""
