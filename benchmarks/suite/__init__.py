"""The benchmark suite run by ``python -m benchmarks``: plan, runs, shapes, topics, checks, report."""
