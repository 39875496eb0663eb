"""Topic identity: which incarnation of a topic a datasource's committed offsets belong to.

A topic deleted and re-created under its old name starts again at offset 0, so a committed
offset of the old topic may look valid in the new one, and reading on would skip the new
topic's first records. The broker's topic ID (KIP-516) tells the two apart: it is recorded
per committed partition the first time it is seen, compared on every later look, and
forgotten only when the operator resets that partition's offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from segment_store.offsets import Partition
from segment_store.schema import partition_topic_ids as ids_t

__all__ = ["check_topic_ids", "forget_topic_ids"]


def check_topic_ids(engine: sa.Engine, datasource: str,
                    current: Mapping[Partition, str]) -> dict[Partition, tuple[str, str]]:
    """Compare each partition's topic ID now with the one recorded; record those not recorded yet.

    ``current`` maps committed partitions to their topic's ID as the broker gives it now.
    Returns ``{partition: (recorded ID, current ID)}`` for the partitions whose topic was re-created.
    """
    with engine.begin() as conn:
        recorded = {row.partition: row.topic_id for row in conn.execute(
            sa.select(ids_t.c.partition, ids_t.c.topic_id).where(ids_t.c.datasource == datasource))}
        missing = [{"datasource": datasource, "partition": str(p), "topic_id": topic_id}
                   for p, topic_id in current.items() if str(p) not in recorded]
        if missing:
            conn.execute(pg_insert(ids_t).values(missing).on_conflict_do_nothing())
    return {p: (recorded[str(p)], topic_id) for p, topic_id in current.items()
            if recorded.get(str(p), topic_id) != topic_id}


def forget_topic_ids(conn: sa.Connection, datasource: str, partitions: Iterable[Partition] | None) -> None:
    """Forget the recorded topic IDs of some partitions (None: all), in the caller's transaction (a reset)."""
    where = ids_t.c.datasource == datasource
    if partitions is not None:
        where &= ids_t.c.partition.in_([str(p) for p in partitions])  # the offsets' text form
    conn.execute(ids_t.delete().where(where))
