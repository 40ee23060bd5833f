"""The Spark half of the main job (``make demo``): a local Spark pipeline over the store through
the JVM connector (format ``rmqstore-jvm``, whose jar the wheel carries; the Python source
``rmqstore`` where there is no jar), its results written as Parquet and a PNG chart, and a
Structured Streaming job (``Trigger.AvailableNow``) that picks up a second burst of messages
incrementally from its checkpoint. Both formats give the same report
(tests/spark/test_demo.py); benches/demo_spark.py times the pipeline with each."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "JVM_FORMAT",
    "SparkReport",
    "demo_format",
    "draw_chart",
    "run_pipeline",
    "spark_session",
]

#: The JVM connector's format, which the demo reads through when its jar is there.
JVM_FORMAT = "rmqstore-jvm"


@dataclass
class SparkReport:
    """What the pipeline found, for the printed report."""

    fmt: str = JVM_FORMAT
    total_messages: int = 0
    total_bytes: int = 0
    by_topic_tag: list[tuple[str, str | None, int, int]] = field(default_factory=list)
    latency_ms: dict[str, float] = field(default_factory=dict)
    per_minute: list[tuple[str, int, int]] = field(default_factory=list)
    per_second: list[tuple[str, int]] = field(default_factory=list)
    stream_batches: list[list[int]] = field(default_factory=list)
    burst: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    outputs: list[Path] = field(default_factory=list)


def spark_session(app: str = "rmqstore-demo") -> Any:
    """A quiet local Spark session (two cores) with both formats: the JVM connector's jar (when
    the installed package has it) and the Python source registered."""
    from .spark import local_session

    return local_session(app)


def demo_format() -> str:
    """``rmqstore-jvm`` when the connector's jar is there (the wheel carries it), else the
    Python source ``rmqstore``."""
    from .spark import _has_jar

    return JVM_FORMAT if _has_jar() else "rmqstore"


def run_pipeline(
    spark: Any,
    store_path: Path,
    report_dir: Path,
    burst: Callable[[], int],
    fmt: str = JVM_FORMAT,
) -> SparkReport:
    """Batch analytics over every message of the store, then the incremental streaming job:
    one AvailableNow run over what is there, ``burst()`` writes more (returning how many), and
    a second run from the same checkpoint must see exactly those. ``fmt`` is the source's
    format: ``rmqstore-jvm`` or ``rmqstore``."""
    from pyspark.sql import functions as F  # noqa: N812 (the usual name)

    out = SparkReport(fmt=fmt)
    report_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    df = spark.read.format(fmt).load(str(store_path))
    size = F.length("body")
    by_topic_tag = (
        df.groupBy("topic", "tags")
        .agg(F.count(F.lit(1)).alias("messages"), F.sum(size).alias("bytes"))
        .orderBy("topic", "tags")
    )
    by_topic_tag.write.mode("overwrite").parquet(str(report_dir / "by_topic_tag.parquet"))
    for r in spark.read.parquet(str(report_dir / "by_topic_tag.parquet")).collect():
        out.by_topic_tag.append((r["topic"], r["tags"], int(r["messages"]), int(r["bytes"])))
    out.by_topic_tag.sort(key=lambda r: (r[0], r[1] or ""))
    out.total_messages = sum(r[2] for r in out.by_topic_tag)
    out.total_bytes = sum(r[3] for r in out.by_topic_tag)
    out.seconds["messages and bytes per topic and tag"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    latency = (F.unix_millis("store_timestamp") - F.unix_millis("born_timestamp")).alias("ms")
    quantiles = [0.5, 0.9, 0.99, 0.999]
    row = (
        df.select(latency)
        .agg(F.percentile_approx("ms", quantiles, 10_000).alias("q"), F.max("ms").alias("max"))
        .first()
    )
    for q, v in zip(quantiles, row["q"], strict=True):
        out.latency_ms[f"p{q * 100:g}"] = float(v)
    out.latency_ms["max"] = float(row["max"])
    out.seconds["store - born latency percentiles"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    per_minute = (
        df.groupBy(F.date_trunc("minute", "store_timestamp").alias("minute"))
        .agg(F.count(F.lit(1)).alias("messages"), F.sum(size).alias("bytes"))
        .orderBy("minute")
    )
    per_minute.write.mode("overwrite").parquet(str(report_dir / "per_minute.parquet"))
    for r in spark.read.parquet(str(report_dir / "per_minute.parquet")).orderBy("minute").collect():
        out.per_minute.append((r["minute"].strftime("%H:%M"), int(r["messages"]), int(r["bytes"])))
    per_second = (
        df.groupBy(F.date_trunc("second", "store_timestamp").alias("second"))
        .count()
        .orderBy("second")
    )
    out.per_second = [
        (r["second"].strftime("%H:%M:%S"), int(r["count"])) for r in per_second.collect()
    ]
    out.seconds["volume per minute (and per second for the chart)"] = time.perf_counter() - t0
    out.outputs += [report_dir / "by_topic_tag.parquet", report_dir / "per_minute.parquet"]

    # Streaming: the same checkpoint for both runs; the second one reads only the burst.
    checkpoint = report_dir / "stream-checkpoint"
    shutil.rmtree(checkpoint, ignore_errors=True)
    sink = report_dir / "stream-counts.parquet"
    shutil.rmtree(sink, ignore_errors=True)
    for run in range(2):
        if run == 1:
            out.burst = burst()
        counts: list[int] = []

        def each(batch: Any, _batch_id: int, counts: list[int] = counts) -> None:
            grouped = batch.groupBy("topic").count()
            grouped.write.mode("append").parquet(str(sink))
            counts.append(int(batch.count()))

        t0 = time.perf_counter()
        query = (
            spark.readStream.format(fmt)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "400000")
            .load(str(store_path))
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        out.stream_batches.append(counts)
        out.seconds[f"streaming run {run + 1}"] = time.perf_counter() - t0
    out.outputs.append(sink)
    return out


def draw_chart(report: SparkReport, path: Path) -> Path:
    """A PNG with two bar charts: messages per second of store time, and per topic."""
    from PIL import Image, ImageDraw

    width, height, pad = 1000, 560, 50
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    d.text((pad, 12), "rmqstore demo: messages per second (left) and per topic (right)", "black")

    def bars(x0: int, x1: int, items: list[tuple[str, int]], colour: str, title: str) -> None:
        top, bottom = 80, height - 70
        d.text((x0, top - 40), title, "black")
        d.line([(x0, bottom), (x1, bottom)], "black")
        if not items:
            return
        peak = max(v for _, v in items) or 1
        slot = (x1 - x0) / len(items)
        for i, (label, v) in enumerate(items):
            h = (bottom - top) * v / peak
            left = x0 + i * slot + slot * 0.15
            d.rectangle([(left, bottom - h), (left + slot * 0.7, bottom)], fill=colour)
            if len(items) <= 12 or i % max(1, len(items) // 12) == 0:
                d.text((left, bottom + 6), label[:14], "black")
            if len(items) <= 24:
                d.text((left, bottom - h - 14), f"{v:,}", "black")

    bars(pad, width // 2 - pad, report.per_second, "#3b7dd8", "per second (store time, UTC)")
    per_topic: dict[str, int] = {}
    for topic, _tags, n, _b in report.by_topic_tag:
        per_topic[topic] = per_topic.get(topic, 0) + n
    bars(
        width // 2 + pad,
        width - pad,
        sorted(per_topic.items(), key=lambda kv: -kv[1]),
        "#e07b39",
        "per topic",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, "PNG")
    return path
