"""The Spark indexing task: plan splits -> read Kafka ranges -> parse and roll up -> write Parquet -> publish."""
