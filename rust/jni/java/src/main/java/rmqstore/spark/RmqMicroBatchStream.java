package rmqstore.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import rmqstore.jni.NativeStore;
import rmqstore.jni.StoreLockedException;
import rmqstore.spark.StreamOffset.QueueKey;

/**
 * A micro-batch stream over a store, as the Python source's RmqStoreStreamReader
 * (python/rmqstore/spark/stream.py) is: offsets are the next offset of every selected queue
 * ({@link StreamOffset}); {@code maxOffsetsPerTrigger} splits over the queues in proportion to
 * their backlogs (Kafka's rateLimit, {@link #rateLimit}); {@code Trigger.AvailableNow} stops at
 * the queues' ends when it was prepared; queues that appear between batches are read from their
 * first readable offset; offsets removed before they were read fail the batch or are skipped
 * ({@code failOnDataLoss}); {@code consumerGroup} records each committed batch's end as the
 * group's offsets ({@link #commit}). The tasks are the batch path's ({@link Planner#pack}, {@link
 * ColumnarReader}).
 *
 * <p>The driver keeps one read-only handle on the store for the stream's life (the stores are
 * shared per JVM, so the tasks of a local session use the same one); {@link #stop} closes it.
 */
final class RmqMicroBatchStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private static final Logger LOG = LoggerFactory.getLogger("rmqstore.spark");
  private final ReadOptions opts;
  private final StructType schema;
  private StoreHandle store;
  /** The queues' ends when Trigger.AvailableNow was prepared (null: not prepared). */
  private Map<QueueKey, Long> frozen;
  /** Every queue's end at the last latestOffset, for Spark's progress reports. */
  private Map<QueueKey, Long> latest;

  RmqMicroBatchStream(ReadOptions opts, StructType schema) {
    this.opts = opts;
    this.schema = schema;
  }

  private long store() {
    if (store == null) {
      store = new StoreHandle(opts);
    }
    return store.id;
  }

  /** The selected queues, with their first readable offsets (low) and ends (high). */
  private void bounds(Map<QueueKey, Long> low, Map<QueueKey, Long> high) {
    long id = store();
    for (String[] q : Planner.selectedQueues(id, opts)) {
      QueueKey key = new QueueKey(q[0], Integer.parseInt(q[1]));
      long end = NativeStore.queueOffsets(id, key.topic, key.queueId)[1];
      high.put(key, end);
      if (low != null) {
        low.put(key, Planner.readableLow(id, key.topic, key.queueId, end));
      }
    }
  }

  @Override
  public Offset initialOffset() {
    long id = store();
    List<String[]> queues = Planner.selectedQueues(id, opts);
    TreeSet<String> selected = new TreeSet<>();
    for (String[] q : queues) {
      selected.add(q[0] + "\u0000" + q[1]);
    }
    Planner.checkJsonTopics("startingOffsets", opts.starting, selected);
    TreeMap<QueueKey, Long> out = new TreeMap<>();
    for (String[] q : queues) {
      String topic = q[0];
      int qid = Integer.parseInt(q[1]);
      long high = NativeStore.queueOffsets(id, topic, qid)[1];
      long low = Planner.readableLow(id, topic, qid, high);
      long offset;
      if (opts.startingTimestamp != null) {
        offset = NativeStore.offsetByTime(id, topic, qid, opts.startingTimestamp, false);
      } else {
        offset = Planner.resolve(opts.startingWord, opts.starting, topic, qid, low, high, "latest");
      }
      out.put(new QueueKey(topic, qid), Math.min(offset, high));
    }
    return new StreamOffset(out);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return StreamOffset.parse(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    Long n = opts.maxOffsetsPerTrigger;
    return n != null ? ReadLimit.maxRows(n) : ReadLimit.allAvailable();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    TreeMap<QueueKey, Long> high = new TreeMap<>();
    bounds(null, high);
    frozen = high;
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException(
        "rmqstore streams take a read limit: latestOffset(start, limit)");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    TreeMap<QueueKey, Long> low = new TreeMap<>();
    TreeMap<QueueKey, Long> high = new TreeMap<>();
    bounds(low, high);
    latest = new TreeMap<>(high);
    if (frozen != null) {
      TreeMap<QueueKey, Long> capped = new TreeMap<>();
      for (Map.Entry<QueueKey, Long> e : high.entrySet()) {
        Long f = frozen.get(e.getKey());
        if (f != null) {
          capped.put(e.getKey(), Math.min(e.getValue(), f));
        }
      }
      high = capped;
    }
    Map<QueueKey, Long> begin = ((StreamOffset) startOffset).asMap();
    // Queues found since the last batch start at their first readable offset; offsets the
    // cleaner removed since do not count against the limit (planInputPartitions reports them).
    TreeMap<QueueKey, Long> from = new TreeMap<>();
    TreeMap<QueueKey, Long> until = new TreeMap<>();
    for (Map.Entry<QueueKey, Long> e : high.entrySet()) {
      long first = low.get(e.getKey());
      long f = Math.max(begin.getOrDefault(e.getKey(), first), first);
      from.put(e.getKey(), f);
      until.put(e.getKey(), Math.max(e.getValue(), f));
    }
    if (limit instanceof ReadMaxRows) {
      until = rateLimit(from, until, ((ReadMaxRows) limit).maxRows());
    }
    // Queues that left the listing stay where they were.
    for (Map.Entry<QueueKey, Long> e : begin.entrySet()) {
      until.putIfAbsent(e.getKey(), e.getValue());
    }
    return new StreamOffset(until);
  }

  @Override
  public Offset reportLatestOffset() {
    return latest != null ? new StreamOffset(latest) : null;
  }

  /**
   * Kafka's rateLimit: {@code limit} offsets split over the queues in proportion to their
   * backlogs ({@code until - start}), at least one for a queue with a backlog, never past
   * {@code until}. Floating point as the Python source computes it, so both split alike.
   */
  static TreeMap<QueueKey, Long> rateLimit(
      Map<QueueKey, Long> start, Map<QueueKey, Long> until, long limit) {
    TreeMap<QueueKey, Long> sizes = new TreeMap<>();
    long total = 0;
    double totalApprox = 0;
    boolean overflow = false;
    for (Map.Entry<QueueKey, Long> e : until.entrySet()) {
      long size = e.getValue() - start.get(e.getKey()); // both in [0, 2^63): no overflow
      if (size > 0) {
        sizes.put(e.getKey(), size);
        totalApprox += size;
        if (!overflow) {
          try {
            total = Math.addExact(total, size);
          } catch (ArithmeticException x) {
            overflow = true;
          }
        }
      }
    }
    if (sizes.isEmpty()) {
      return new TreeMap<>(until);
    }
    TreeMap<QueueKey, Long> out = new TreeMap<>();
    for (Map.Entry<QueueKey, Long> e : until.entrySet()) {
      QueueKey q = e.getKey();
      long end = e.getValue();
      long begin = start.get(q);
      Long size = sizes.get(q);
      if (size == null) {
        out.put(q, Math.max(end, begin));
        continue;
      }
      double share = overflow ? size / totalApprox : (double) size / (double) total;
      double prorate = limit * share;
      double step = prorate < 1 ? Math.ceil(prorate) : Math.floor(prorate);
      // step <= limit * 1.0: a long (a double past Long.MAX_VALUE would saturate anyway).
      out.put(q, step >= (double) (end - begin) ? end : begin + (long) step);
    }
    return out;
  }

  @Override
  public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
    Map<QueueKey, Long> begin = ((StreamOffset) startOffset).asMap();
    Map<QueueKey, Long> stop = ((StreamOffset) endOffset).asMap();
    TreeMap<QueueKey, Long> low = new TreeMap<>();
    bounds(low, new TreeMap<>());
    List<QueueRange> ranges = new ArrayList<>();
    for (Map.Entry<QueueKey, Long> e : stop.entrySet()) {
      QueueKey q = e.getKey();
      long first = low.getOrDefault(q, 0L);
      long offset = begin.getOrDefault(q, first);
      if (offset < first) {
        offset = Planner.dataLoss(opts, q.topic, q.queueId, offset, first);
      }
      if (e.getValue() > offset) {
        ranges.add(new QueueRange(q.topic, q.queueId, offset, e.getValue()));
      }
    }
    return Planner.pack(ranges, opts.rowsPerPartition).toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReaderFactory(opts, schema, new RowConditions());
  }

  /**
   * Records {@code end} as the {@code consumerGroup}'s offsets in the store's
   * config/consumerOffset.json, through the core (NativeStore.commitOffsets takes the store's
   * lock for the write). While another process holds the lock (a writer), the commit is
   * skipped with a warning instead of failing the query, as the Python source does.
   */
  @Override
  public void commit(Offset end) {
    String group = opts.consumerGroup;
    if (group == null) {
      return;
    }
    TreeMap<String, List<long[]>> byTopic = new TreeMap<>();
    for (Map.Entry<QueueKey, Long> e : ((StreamOffset) end).asMap().entrySet()) {
      byTopic
          .computeIfAbsent(e.getKey().topic, t -> new ArrayList<>())
          .add(new long[] {e.getKey().queueId, e.getValue()});
    }
    try {
      for (Map.Entry<String, List<long[]>> e : byTopic.entrySet()) {
        List<long[]> queues = e.getValue();
        int[] ids = new int[queues.size()];
        long[] offsets = new long[queues.size()];
        for (int i = 0; i < ids.length; i++) {
          ids[i] = (int) queues.get(i)[0];
          offsets[i] = queues.get(i)[1];
        }
        NativeStore.commitOffsets(opts.path, group, e.getKey(), ids, offsets);
      }
    } catch (StoreLockedException e) {
      LOG.warn(
          "consumer group '{}': offsets not recorded, the store is locked by a writer ({})",
          group,
          e.getMessage());
    }
  }

  @Override
  public void stop() {
    if (store != null) {
      store.close();
      store = null;
    }
  }

  @Override
  public String toString() {
    return "rmqstore " + opts.path;
  }
}
