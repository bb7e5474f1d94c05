#!/usr/bin/env bash
# Fetch the Apache Kafka broker the test suite runs against (docker/kafka/pom.xml) from Maven
# Central into a cache dir, once: `make kafka` runs it, and so does `make test` before the suite.
# Prints the cache dir. The broker is then `java -cp "<cache>/libs/*" kafka.Kafka server.properties`
# (tests/integration/apache_kafka.py starts it).
#
#   RECALL_KAFKA_CACHE  the cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/session-recall/kafka-<version>)
#
# Idempotent: a complete fetch is marked by libs/.complete holding the pom's sha256; when it
# matches, nothing is fetched (and Maven is not needed). Jars are copied into a temporary dir and
# moved into place, so an interrupted fetch leaves no half-filled libs/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/pom.xml"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")"
if [ -z "$version" ]; then
  echo "fetch.sh: no <kafka.version> in $pom" >&2
  exit 1
fi
cache="${RECALL_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/session-recall/kafka-$version}"
stamp="$cache/libs/.complete"
want="$(sha256sum "$pom" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$cache"
  exit 0
fi
for tool in mvn java; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "fetch.sh: '$tool' not found: install Maven and a JRE >= 17 (Debian: apt-get install maven default-jre-headless)" >&2
    exit 1
  fi
done
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/libs.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "fetch.sh: fetching Apache Kafka $version into $cache/libs" >&2
# runtime scope: the broker's jars and their runtime dependencies, nothing test-only
mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >&2
if ! ls "$tmp"/kafka_2.13-"$version".jar >/dev/null 2>&1; then
  echo "fetch.sh: Maven finished but kafka_2.13-$version.jar is missing from $tmp" >&2
  exit 1
fi
# copy-dependencies writes nothing else beside the pom; drop a target/ a plugin may leave
rm -rf "$here/target"
rm -rf "$cache/libs"
mv "$tmp" "$cache/libs"
trap - EXIT
echo "$want" > "$stamp"
echo "$cache"
