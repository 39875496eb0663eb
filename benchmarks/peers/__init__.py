"""What we are measured against: a raw consumer, a plain Python loop, Quix Streams."""
