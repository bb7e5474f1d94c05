"""The compose file runs the Apache Kafka version the test suite runs against: its image tag
equals `kafka.version` in docker/kafka/pom.xml (the jars the suite's broker is started from)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POM_NS = "{http://maven.apache.org/POM/4.0.0}"


def _pom_kafka_version() -> str:
    root = ET.parse(ROOT / "docker" / "kafka" / "pom.xml").getroot()
    version = root.findtext(f"{POM_NS}properties/{POM_NS}kafka.version")
    assert version, "docker/kafka/pom.xml has no <kafka.version> property"
    return version.strip()


def _compose_kafka_tags() -> list[str]:
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    return re.findall(r"^\s*image:\s*apache/kafka:(\S+)\s*$", compose, flags=re.MULTILINE)


def test_compose_runs_the_kafka_version_the_suite_tests() -> None:
    tags = _compose_kafka_tags()
    assert tags, "docker/compose.yaml names no apache/kafka image"
    assert set(tags) == {_pom_kafka_version()}, (
        f"docker/compose.yaml runs apache/kafka:{tags}, the suite tests "
        f"{_pom_kafka_version()} (docker/kafka/pom.xml kafka.version)")
