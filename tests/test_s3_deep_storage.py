"""What only object storage has: buckets.

Indexing, queries, compaction and cleanup run on S3 in their own modules, parametrized over
local and S3 deep storage.
"""

from __future__ import annotations

import s3fs

from segment_store import DeepStorage


def test_makedirs_does_not_create_a_missing_bucket(s3_endpoint):
    storage = DeepStorage("s3://no-such-bucket/segments/")
    assert storage.root == "s3://no-such-bucket/segments"

    storage.makedirs_for(f"{storage.root}/ds/interval/attempt/part-00000.parquet")

    assert not s3fs.S3FileSystem(skip_instance_cache=True).exists("no-such-bucket")
