"""Runtimes: the embedded one (one machine, no Kafka) and the Kafka fleet; independent of each other."""
