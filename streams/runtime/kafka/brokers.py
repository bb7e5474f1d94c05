"""Transport: the broker list, in the form each library takes it."""

from __future__ import annotations


def bootstrap_servers(broker_url: str) -> str:
    """`kafka://h1:9092;kafka://h2:9092` (faust's form) → `h1:9092,h2:9092` (aiokafka's form)."""
    hosts = []
    for part in broker_url.replace(",", ";").split(";"):
        part = part.strip()
        if part:
            hosts.append(part.split("://", 1)[-1].rstrip("/"))
    return ",".join(hosts)
