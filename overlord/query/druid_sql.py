"""Druid SQL on Spark: Druid's functions and schemas rewritten into Spark SQL before it is parsed.

The rewriting works on sqlglot's syntax tree, never on the text. sqlglot parses Druid SQL
(``"name"`` identifiers, ``'text'`` strings) but passes Druid's own functions through
untouched, so each is translated here with Druid's semantics: ``TIME_FLOOR`` with Druid's
period alignment (one unit truncates, a multiple counts whole periods from the epoch),
``REGEXP_EXTRACT``'s default group 0, ``LATEST``/``EARLIEST`` by ``__time``, and so on. A query
with nothing Druid-specific is passed on as written, so Spark SQL keeps working; one that
sqlglot cannot parse is passed on too, and Spark reports the syntax error. The sandbox checks
the translated query's plans like any other: translation cannot widen what a query may do.

Tables: ``druid.x`` is the datasource ``x``; ``INFORMATION_SCHEMA.*`` and ``sys.*`` tables are
views the engine builds from the metadata store (:mod:`overlord.query.metadata_tables`).

The rewriting is a table of named rules (:mod:`overlord.query.druid_rewrite_rules`), tried on every
node, children first; Druid's own functions are in :mod:`overlord.query.druid_functions`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import build_date_delta
from sqlglot.dialects.druid import Druid
from sqlglot.errors import SqlglotError
from sqlglot.parsers.druid import DruidParser
from sqlglot.tokenizer_core import TokenType
from sqlglot.tokens import Tokenizer

from overlord.query.collect_sql import collected_column
from overlord.query.constants import check_constants
from overlord.query.druid_functions import DRUID_FUNCTIONS, MILLIS, UTC_NAMES, complex_argument, parse_period
from overlord.query.druid_rewrite_rules import (
    DRUID_DEFECTS,
    METADATA_TABLES,
    RULES,
    RewriteContext,
    array_argument_columns,
    metadata_view,
    refuse_null_tests_druid_folds,
    text_aliases,
    text_in_numbers,
    top_n_column,
    typed_operands,
)
from overlord.query.druid_string_functions import STRING_FUNCTIONS
from overlord.query.function_bounds import ALLOWED_FUNCTIONS
from overlord.query.multi_value import MV_FUNCTIONS, has_mv_results, rewrite_multi_value
from overlord.query.sketch_sql import SKETCH_OBJECT_FUNCTIONS
from overlord.query.star_joins import expand_star_joins, star_join_tables

__all__ = ["FUNCTIONS", "METADATA_TABLES", "MILLIS", "UTC_NAMES", "Translation", "metadata_view", "parse_period",
           "translate"]


class _DruidParser(DruidParser):
    # Druid's TIMESTAMPADD/DIFF take the unit first; sqlglot's Druid parser reads it as a column.
    FUNCTIONS = {**DruidParser.FUNCTIONS, "TIMESTAMPDIFF": build_date_delta(exp.TimestampDiff),
                 "TIMESTAMPADD": build_date_delta(exp.TimestampAdd),
                 "ANY_VALUE": lambda args: exp.Anonymous(this="ANY_VALUE", expressions=args),  # and maxBytes
                 "ARRAY_AGG": lambda args: exp.ArrayAgg(this=args[0]) if len(args) == 1 else exp.Anonymous(
                     this="ARRAY_AGG", expressions=args)}  # sqlglot's drops maxBytes
    FUNCTION_PARSERS = {**DruidParser.FUNCTION_PARSERS, "POSITION": lambda self: self._parse_position_from()}

    def _parse_position_from(self) -> exp.StrPosition:
        """``POSITION(s IN t FROM n)`` (Calcite's): the search starts at ``n``; other forms as sqlglot reads them."""
        position = self._parse_position()
        if position.args.get("position") is None and self._match(TokenType.FROM):
            position.set("position", self._parse_bitwise())
        return position


class _DruidTokenizer(Tokenizer):
    UNICODE_STRINGS = [("U&'", "'"), ("u&'", "'")]  # U&'\\05E8': Calcite's Unicode string literals


class _DruidDialect(Druid):
    Parser = _DruidParser
    Tokenizer = _DruidTokenizer


@dataclass(frozen=True)
class Translation:
    """The Spark SQL to run, and the metadata tables it reads (``schema.table``, lower case)."""

    sql: str
    metadata_tables: frozenset[str] = frozenset()
    table_names: frozenset[str] = frozenset()
    """Every table name the query names (lower case), CTEs' included."""
    columns: frozenset[str] = frozenset()
    """Every column name the query names (lower case): if any is multi-value, the query is translated again
    knowing it (``translate``'s ``complex_columns``)."""
    typed_columns: frozenset[str] = frozenset()
    """Columns (lower case) compared with a number, summed, or a top-N's: the query is translated again
    knowing which are text or numbers (``translate``'s ``complex_columns``: ``string``, ``float``, ...)."""
    complex_arguments: frozenset[str] = frozenset()
    """Columns (lower case) given to a function that reads sketch or first/last columns differently: if
    they are such columns, the query is translated again knowing their kind (``translate``'s ``complex_columns``)."""
    star_tables: frozenset[str] = frozenset()
    """Tables (lower case) under a ``*`` over a join in a subquery: the query is translated again knowing their
    columns (``translate``'s ``table_columns``), so that the ``*`` names each column once, as Calcite does."""


@lru_cache(maxsize=1024)
def translate(query: str, complex_columns: tuple[tuple[str, str], ...] = (),
              table_columns: tuple[tuple[str, tuple[str, ...]], ...] = ()) -> Translation:
    """Druid SQL to Spark SQL; :class:`QueryError` names a Druid construct that is not supported.

    ``complex_columns`` are the sketch, first/last and multi-value columns of the tables queried:
    (lower-case name, kind as segment descriptors record it: a ``Sketch`` as text, ``pair:<type>``
    or ``multi_value``). ``table_columns``: the columns of the tables :attr:`Translation.star_tables` names
    (lower-case table name, its columns in order).
    """
    try:
        trees = sqlglot.parse(query, read=_DruidDialect)
    except SqlglotError:
        return Translation(query)  # Spark's parser reports the syntax error
    if len(trees) != 1 or trees[0] is None:
        return Translation(query)
    tree = trees[0]
    refuse_null_tests_druid_folds(tree)
    star_tables = star_join_tables(tree)
    changed = expand_star_joins(tree, dict(table_columns)) if table_columns else False
    changed = check_constants(tree) or changed
    names = {table.name.lower() for table in tree.find_all(exp.Table)}
    arguments = {column.name.lower() for node in tree.walk()
                 if (column := complex_argument(node) or collected_column(node)) is not None}
    columns = frozenset(column.name.lower() for column in tree.find_all(exp.Column))
    typed = frozenset(column.name.lower() for node in tree.walk() for column in typed_operands(node)) | {
        column.name.lower() for select in tree.find_all(exp.Select) if (column := top_n_column(select, query))} | {
        column.name.lower() for node in tree.find_all(exp.In) if (column := text_in_numbers(node))} | {
        column.name.lower() for node in tree.find_all(exp.ArrayConcat, exp.ArraySize, exp.ArrayToString)
        for column in array_argument_columns(node)} | {
        column.name.lower() for node in tree.walk() if (column := collected_column(node)) is not None}
    kinds = dict(complex_columns)
    kinds |= text_aliases(tree, kinds)
    multi_value = frozenset(name for name, kind in kinds.items() if kind == "multi_value")
    if multi_value or has_mv_results(tree):
        tree, changed = rewrite_multi_value(tree, multi_value), True
    context = RewriteContext(query, kinds, multi_value)
    for node in reversed(list(tree.walk(bfs=False))):  # children first: nested Druid calls are rewritten too
        new = _rewrite(node, context)
        if new is not node:
            changed = True
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return Translation(tree.sql(dialect="spark") if changed else query, frozenset(context.tables), frozenset(names),
                       columns, typed, frozenset(arguments), star_tables)


def _rewrite(node: exp.Expr, context: RewriteContext) -> exp.Expr:
    """``node`` as the first of :data:`RULES` that applies rewrites it; itself when none does."""
    for rule in RULES:
        new = rule(node, context)
        if new is not None:
            return new
    return node


_AGGREGATES = frozenset("""
    ANY_VALUE APPROX_COUNT_DISTINCT APPROX_COUNT_DISTINCT_BUILTIN APPROX_COUNT_DISTINCT_DS_HLL
    APPROX_COUNT_DISTINCT_DS_THETA APPROX_QUANTILE_DS APPROX_PERCENTILE AVG BIT_AND BIT_OR BIT_XOR BOOL_AND BOOL_OR
    CORR COUNT COUNT_IF COVAR_POP COVAR_SAMP DS_HLL DS_THETA EARLIEST EARLIEST_BY EVERY FIRST HLL_SKETCH_AGG
    HLL_UNION_AGG KLL_MERGE_AGG_DOUBLE KURTOSIS LAST LATEST LATEST_BY MAX MAX_BY MEAN MEDIAN MIN MIN_BY PERCENTILE
    PERCENTILE_APPROX SKEWNESS SOME STD STDDEV STDDEV_POP STDDEV_SAMP SUM THETA_SKETCH_AGG THETA_UNION_AGG TRY_AVG
    TRY_SUM VAR_POP VAR_SAMP VARIANCE ANY ARRAY_AGG STRING_AGG LISTAGG COLLECT_LIST COLLECT_SET""".split())

FUNCTIONS: dict[str, bool] = {name.upper(): name.upper() in _AGGREGATES for name in (
    *ALLOWED_FUNCTIONS, *DRUID_FUNCTIONS, *STRING_FUNCTIONS, *MV_FUNCTIONS, *SKETCH_OBJECT_FUNCTIONS, "ANY_VALUE",
    "SAFE_DIVIDE", "ARRAY_AGG", "STRING_AGG", "LISTAGG", "STRING_TO_ARRAY", "ARRAY_APPEND", "ARRAY_PREPEND",
    "ARRAY_CONTAINS", "ARRAY_TO_STRING", "DATE_TRUNC")
    if name.replace("_", "").isalnum() and name.upper() not in DRUID_DEFECTS}
"""Every function a query may call (Druid's and Spark's allowed ones, upper case): whether it aggregates."""
