"""One module per schema revision, oldest first; each names the one before it in ``down_revision``.

Revisions are additive (new tables, nullable columns, indexes) so that overlords of the previous
release keep working while a rolling upgrade runs; a column is dropped one release after the code
stops reading it.
"""
