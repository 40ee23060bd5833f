package rmqpeers;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.config.TopicConfig;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.common.record.internal.SimpleRecord;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.server.storage.log.FetchIsolation;
import org.apache.kafka.server.util.KafkaScheduler;
import org.apache.kafka.storage.internals.log.FetchDataInfo;
import org.apache.kafka.storage.internals.log.LogConfig;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;
import org.apache.kafka.storage.internals.log.ProducerStateManagerConfig;
import org.apache.kafka.storage.internals.log.UnifiedLog;
import org.apache.kafka.storage.log.metrics.BrokerTopicStats;

/**
 * Kafka's log (kafka-storage's {@code UnifiedLog}, in-process, no broker), one round of issue
 * 20's peer figures for bodies of 128 B and 1 KiB:
 *
 * <ul>
 *   <li>{@code put_<size>}: {@code appendAsLeader} of a one-record {@code MemoryRecords} built
 *       for each message (the record batch a producer sends with one record in it: its CRC32C
 *       computed when built, checked again by the log's validation), leader epoch 0;
 *   <li>{@code batch_put_<size>}: the same with 1,000 records a batch, into a fresh log;
 *   <li>{@code read_<size>}: {@code read} of the single-put log from offset 0 to its end, 1 MiB
 *       a call (a consumer's default {@code max.partition.fetch.bytes}), each batch's CRC checked
 *       ({@code ensureValid}, as the consumer's default {@code check.crcs} does) and each
 *       record's value copied into a reusable {@code byte[]}.
 * </ul>
 *
 * <p>The log: 1 GiB segments (Kafka's default), the offset and time indexes built inline on
 * append (one entry per 4 KiB, the default), no fsync (the default flush interval is unbounded),
 * {@code max.message.bytes} raised to 8 MiB so a batch of 1,000 bodies of 1 KiB fits. Prints one
 * JSON line {@code {"peer": "kafka", "put_128": msg/s, ...}}.
 */
public final class KafkaBench {
    private static final int BATCH = 1000;
    private static final int FETCH_BYTES = 1 << 20;

    private KafkaBench() {}

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse("KafkaBench", argv);
        KafkaScheduler scheduler = new KafkaScheduler(1, true, "peer-bench-");
        scheduler.startup();
        BrokerTopicStats stats = new BrokerTopicStats();
        Map<String, Object> rates = Args.rates();
        try {
            for (int size : new int[] {128, 1024}) {
                if (args.warmup > 0) {
                    single(args.dir, size, args.warmup, scheduler, stats);
                    batch(args.dir, size, args.warmup, scheduler, stats);
                }
                double[] r = single(args.dir, size, args.count(size), scheduler, stats);
                rates.put("put_" + size, r[0]);
                rates.put("read_" + size, r[1]);
                rates.put("batch_put_" + size, batch(args.dir, size, args.count(size), scheduler, stats));
            }
        } finally {
            stats.close();
            scheduler.shutdown();
        }
        System.out.println(Args.json("kafka", rates));
    }

    static UnifiedLog open(Path folder, KafkaScheduler scheduler, BrokerTopicStats stats)
            throws Exception {
        Map<String, Object> props = new HashMap<>();
        props.put(TopicConfig.MAX_MESSAGE_BYTES_CONFIG, 8 << 20);
        LogConfig config = new LogConfig(props);
        // A partition's folder is named topic-partition.
        File dir = folder.resolve("peer-0").toFile();
        return UnifiedLog.create(
                dir,
                config,
                0L,
                0L,
                scheduler,
                stats,
                Time.SYSTEM,
                300_000,
                new ProducerStateManagerConfig(86_400_000, false),
                600_000,
                new LogDirFailureChannel(1),
                true,
                Optional.empty());
    }

    /** One-record appends of {@code n} bodies, then a read of them all: {put, read} msg/s. */
    static double[] single(Path tmp, int size, int n, KafkaScheduler scheduler, BrokerTopicStats stats)
            throws Exception {
        byte[] body = Args.body(size);
        Path folder = Args.fresh(tmp, "kafka-");
        try {
            UnifiedLog log = open(folder, scheduler, stats);
            try {
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    MemoryRecords records = MemoryRecords.withRecords(
                            Compression.NONE, new SimpleRecord(System.currentTimeMillis(), body));
                    log.appendAsLeader(records, 0);
                }
                long putNanos = System.nanoTime() - t0;
                if (log.logEndOffset() != n) {
                    throw new IllegalStateException("kafka log end " + log.logEndOffset() + " != " + n);
                }
                byte[] into = new byte[Math.max(size, 4096)];
                long got = 0;
                long bytes = 0;
                long check = 0;
                long offset = 0;
                t0 = System.nanoTime();
                while (offset < n) {
                    FetchDataInfo info = log.read(offset, FETCH_BYTES, FetchIsolation.LOG_END, true);
                    for (RecordBatch batch : info.records.batches()) {
                        batch.ensureValid();
                        for (Record record : batch) {
                            ByteBuffer value = record.value();
                            int len = value.remaining();
                            value.get(into, 0, len);
                            check += into[len - 1];
                            bytes += len;
                            got++;
                        }
                        offset = batch.nextOffset();
                    }
                }
                long readNanos = System.nanoTime() - t0;
                Args.expect("kafka read", got, n, bytes, (long) n * size);
                if (check != (long) n * body[size - 1]) {
                    throw new IllegalStateException("kafka read: values differ from those written");
                }
                return new double[] {Args.rate(n, putNanos), Args.rate(n, readNanos)};
            } finally {
                log.close();
            }
        } finally {
            Args.remove(folder);
        }
    }

    /** Appends of {@code n} bodies in batches of {@link #BATCH} records: msg/s. */
    static double batch(Path tmp, int size, int n, KafkaScheduler scheduler, BrokerTopicStats stats)
            throws Exception {
        byte[] body = Args.body(size);
        Path folder = Args.fresh(tmp, "kafka-batch-");
        try {
            UnifiedLog log = open(folder, scheduler, stats);
            try {
                long t0 = System.nanoTime();
                int done = 0;
                while (done < n) {
                    int k = Math.min(BATCH, n - done);
                    long now = System.currentTimeMillis();
                    SimpleRecord[] records = new SimpleRecord[k];
                    for (int i = 0; i < k; i++) {
                        records[i] = new SimpleRecord(now, body);
                    }
                    log.appendAsLeader(MemoryRecords.withRecords(Compression.NONE, records), 0);
                    done += k;
                }
                long nanos = System.nanoTime() - t0;
                if (log.logEndOffset() != n) {
                    throw new IllegalStateException("kafka log end " + log.logEndOffset() + " != " + n);
                }
                return Args.rate(n, nanos);
            } finally {
                log.close();
            }
        } finally {
            Args.remove(folder);
        }
    }
}
