"""Transport and entry points: Kafka/faust, the embedded runtime, the query worker and the CLI."""
