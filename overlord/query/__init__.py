"""SQL over published segments: the engine, its read-only sandbox, result formats and segment sources."""
