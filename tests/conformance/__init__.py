"""Druid's own query tests as our conformance suite: ``python -m tests.conformance`` prints the score.

The cases' facts (queries and expected answers) come from apache/druid at these commits:
TestDataBuilder 04bb5b8821f9 (the rows); CalciteQueryTest dada817b7dac (most cases) and 0005fd49cb52;
CalciteSelectQueryTest 00f5f8ec940b; CalciteMultiValueStringQueryTest 03530aa99a70; CalciteArraysQueryTest
33a2ee66729f; CalciteJoinQueryTest 0031067ca89a; CalciteSubqueryTest 026b4421323f; InformationSchema 0468ea1f2e29;
the window ``.sqlTest`` files and MSQWindowTest at the commits the closing note of issue 28 names;
the DataSketches SQL aggregator tests f88ebad66b87 (HLL), 1767a10b6cfa (theta), b16229cfd19b (quantiles).
The ``quidem_*`` areas come from Druid's quidem files, each case naming its file and test id (or query number):
``quidem_agg_funcs`` from ``quidem-ut/.../QTest/qaAggFuncs`` (string_agg/array_agg over ``test_agg_funcs``) at
43676855b9e4, 13e378e23e55, 3cb46163f18c, 52812012956a, 771578617f64, 1a5be5b51eea, 1095adcf622f;
``quidem_sql`` from ``sql/src/test/quidem``'s SqlQuidemTest files (1a38434d8ddf, 134d8e45fe6c, 3879dd438058,
e1376ba7f49b, fbb39f9a519d, 44a1ec5a6e8b, 05439eb5a8af, 450caa723914) and DecoupledPlanningCalciteQueryTest files
(3bc928e87567, d1db9a9c1e31, 63caf06a857f, 72be6bf2e8bb, b8607425f827, 1da33eb6480a). A quidem table shows NULL and
'' alike as an empty cell: only cells whose NULL follows from the rows or from Druid's documented rule are kept.
Native cases whose ``from`` says "hand-derived" apply Druid's documented result shapes to these rows.
"""
