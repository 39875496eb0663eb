"""A ``*`` over a join, inside a subquery, named as Calcite names it: each column once.

Calcite makes the columns of ``SELECT * FROM foo AS t1 JOIN foo AS t2 ...`` unique: the first
``dim2`` keeps its name and the next is ``dim20`` (then ``dim21``, ...). An outer query that
reads ``dim2`` from such a subquery means the left side's; Spark keeps both names and calls the
reference ambiguous. :func:`expand_star_joins` writes the ``*`` out as Calcite's columns, given
each table's columns (:func:`star_join_tables` names the tables whose columns it needs).

A ``*`` over a join at the top of the query is left as it is (its names are not read again), and
so is one over a ``USING``/``NATURAL`` join or a subquery (Spark's rules apply there).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from sqlglot import exp

__all__ = ["expand_star_joins", "star_join_tables"]


def _star_joins(tree: exp.Expr) -> Iterator[tuple[exp.Select, list[exp.Table]]]:
    """The selects of ``*`` over joins of tables, below the top of ``tree``, and their tables in order."""
    for select in tree.find_all(exp.Select):
        joins = select.args.get("joins") or []
        source = select.args.get("from_") or select.args.get("from")
        if (select is tree or not joins or source is None
                or not any(isinstance(e, exp.Star) for e in select.expressions)):
            continue
        tables = [source.this, *(join.this for join in joins)]
        natural = any(join.args.get("using") or join.args.get("method") or str(join.args.get("kind") or "").upper()
                      == "NATURAL" for join in joins)
        if not natural and all(isinstance(t, exp.Table) for t in tables):
            yield select, tables


def star_join_tables(tree: exp.Expr) -> frozenset[str]:
    """The tables (lower-case names) whose columns :func:`expand_star_joins` needs for ``tree``."""
    return frozenset(table.name.lower() for _, tables in _star_joins(tree) for table in tables)


def expand_star_joins(tree: exp.Expr, columns: Mapping[str, Sequence[str]]) -> bool:
    """Write each ``*`` over a join out as Calcite's unique columns, in place; whether any was.

    ``columns``: each table's columns in order, by lower-case name. A ``*`` over a table not in
    ``columns`` is left as it is.
    """
    changed = False
    for select, tables in list(_star_joins(tree)):
        if not all(t.name.lower() in columns for t in tables):
            continue
        taken: set[str] = set()
        expanded: list[exp.Expr] = []
        for table in tables:
            for name in columns[table.name.lower()]:
                unique, attempt = name, 0
                while unique.lower() in taken:
                    unique, attempt = f"{name}{attempt}", attempt + 1
                taken.add(unique.lower())
                expanded.append(exp.alias_(exp.column(name, table=table.alias_or_name, quoted=True), unique,
                                           quoted=True))
        projections: list[exp.Expr] = []
        for projection in select.expressions:
            projections.extend(expanded if isinstance(projection, exp.Star) else [projection])
        select.set("expressions", projections)
        changed = True
    return changed
