#!/bin/sh
# Runs one of the Java peer programs: run.sh CLASS ARGS...  (e.g. run.sh ChronicleBench DIR N128 N1K WARMUP);
# `run.sh --build` only builds. Builds the project first when its jar or classpath file is
# missing or older than a source (Maven offline first: the local repository may have every
# dependency; online when that fails).
# The JVM flags: Chronicle's documented --add-exports/--add-opens for Java 17 (it reaches into
# the JDK's internals for off-heap memory and mapped files), the same for every Java peer; 2 GiB
# of heap, fixed, so the collector does not resize it between rounds; Chronicle's usage
# analytics off (no network).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cls=$1
shift
jar=$here/target/rmq-peers-1.0.jar
cp=$here/target/classpath.txt
if [ ! -f "$jar" ] || [ ! -f "$cp" ] || [ -n "$(find "$here/pom.xml" "$here/src" -newer "$jar" -type f | head -1)" ]; then
    (cd "$here" && { mvn -B -q -o package >/dev/null 2>&1 || mvn -B -q package >&2; })
    touch "$jar" "$cp"
fi
if [ "$cls" = "--build" ]; then
    exit 0
fi
exec java \
    --add-exports=java.base/jdk.internal.ref=ALL-UNNAMED \
    --add-exports=java.base/sun.nio.ch=ALL-UNNAMED \
    --add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED \
    --add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED \
    --add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED \
    --add-opens=java.base/java.lang=ALL-UNNAMED \
    --add-opens=java.base/java.lang.reflect=ALL-UNNAMED \
    --add-opens=java.base/java.io=ALL-UNNAMED \
    --add-opens=java.base/java.util=ALL-UNNAMED \
    --add-opens=java.base/java.nio=ALL-UNNAMED \
    -Xms2g -Xmx2g \
    -Dchronicle.analytics.disable=true \
    -cp "$jar:$(cat "$cp")" "rmqpeers.$cls" "$@"
