"""Prints the Maven flags that compile rust/jni/java against the jars of the installed PySpark:
the jars folder and the versions of the jars the connector compiles against, read from their
file names, so that arrow-c-data (packaged in the connector's jar) is exactly the Arrow version
this PySpark bundles. Run by `make jar` with the virtualenv's Python."""

from __future__ import annotations

import os
import re
import sys

# Maven property -> the file name pattern of the jar whose version it takes.
JARS = {
    "spark.version": r"spark-core_(?:\d+\.\d+)-(.+)\.jar",
    "scala.binary": r"spark-core_(\d+\.\d+)-.+\.jar",
    "scala.version": r"scala-library-(.+)\.jar",
    "arrow.version": r"arrow-vector-(.+)\.jar",
    "jackson.version": r"jackson-databind-(.+)\.jar",
    "jackson.annotations.version": r"jackson-annotations-(.+)\.jar",
    "kryo.version": r"kryo-shaded-(.+)\.jar",
    "slf4j.version": r"slf4j-api-(.+)\.jar",
}


def main() -> int:
    import pyspark

    folder = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    names = sorted(os.listdir(folder))
    flags = [f"-Dspark.jars={folder}"]
    for prop, pattern in JARS.items():
        found = {m[1] for n in names if (m := re.fullmatch(pattern, n))}
        if len(found) != 1:
            print(
                f"spark_jars.py: {folder} has {len(found)} jars matching {pattern} "
                f"({sorted(found)}); expected one (PySpark {pyspark.__version__})",
                file=sys.stderr,
            )
            return 1
        flags.append(f"-D{prop}={found.pop()}")
    print(" ".join(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
