"""Transport: the Kafka runtime's building blocks (fold step, partition-pinned table, worker)."""
