package rmqstore.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import rmqstore.jni.NativeStore;
import rmqstore.jni.RmqStoreException;

/**
 * Planning a batch read, as python/rmqstore/spark/planning.py and batch.py do: the queues the
 * options select, where each one's read starts and ends, and the read tasks (ranges split for
 * minPartitions, small ones packed up to rowsPerPartition).
 */
final class Planner {
  private static final Logger LOG = LoggerFactory.getLogger("rmqstore.spark");
  /** Seconds a topicPattern may take to match the store's topic names. */
  static final long PATTERN_TIMEOUT_SECONDS = 10;

  private Planner() {}

  static List<RangesPartition> plan(ReadOptions opts, QueueFilter filter) {
    try (StoreHandle store = new StoreHandle(opts)) {
      List<QueueRange> ranges = new ArrayList<>();
      List<String[]> queues = selectedQueues(store.id, opts);
      TreeSet<String> selected = new TreeSet<>();
      for (String[] q : queues) {
        selected.add(q[0] + "\u0000" + q[1]);
      }
      checkJsonTopics("startingOffsets", opts.starting, selected);
      checkJsonTopics("endingOffsets", opts.ending, selected);
      for (String[] q : queues) {
        String topic = q[0];
        int qid = Integer.parseInt(q[1]);
        if (!filter.allows(topic, qid)) {
          continue; // the query's conditions on topic and queue_id leave it out
        }
        long high = NativeStore.queueOffsets(store.id, topic, qid)[1];
        long low = readableLow(store.id, topic, qid, high);
        long start;
        if (opts.startingTimestamp != null) {
          start = NativeStore.offsetByTime(store.id, topic, qid, opts.startingTimestamp, false);
        } else {
          start = resolve(opts.startingWord, opts.starting, topic, qid, low, high, "earliest");
        }
        long end;
        if (opts.endingTimestamp != null) {
          end = NativeStore.offsetByTime(store.id, topic, qid, opts.endingTimestamp, false);
        } else {
          end = resolve(opts.endingWord, opts.ending, topic, qid, low, high, "latest");
        }
        if (start > high) {
          throw ReadOptions.bad(
              "startingOffsets " + start + " of " + topic + "/" + qid + " is past its end " + high);
        }
        if (end > high) {
          throw ReadOptions.bad(
              "endingOffsets " + end + " of " + topic + "/" + qid + " is past its end " + high);
        }
        if (start > end) {
          throw ReadOptions.bad(
              topic + "/" + qid + ": the starting offset " + start + " is after the ending offset "
                  + end + " (startingOffsets / startingTimestamp against endingOffsets /"
                  + " endingTimestamp)");
        }
        if (start < low) {
          start = dataLoss(opts, topic, qid, start, low);
        }
        if (end > start) {
          ranges.add(new QueueRange(topic, qid, start, end));
        }
      }
      return tasks(ranges, opts);
    }
  }

  /** (topic, queue id) pairs the selection options name, sorted. */
  static List<String[]> selectedQueues(long store, ReadOptions opts) {
    String[] all = NativeStore.topics(store);
    List<String> present = new ArrayList<>(Arrays.asList(all));
    present.sort(null);
    List<String[]> pairs = new ArrayList<>();
    if (opts.assign != null) {
      for (Map.Entry<String, int[]> e : opts.assign.entrySet()) {
        String topic = e.getKey();
        if (!present.contains(topic)) {
          throw ReadOptions.bad(
              "assign names topic '" + topic + "', which the store does not have");
        }
        int[] have = NativeStore.queueIds(store, topic);
        List<Integer> missing = new ArrayList<>();
        for (int q : e.getValue()) {
          if (Arrays.binarySearch(have, q) < 0) {
            missing.add(q);
          }
        }
        if (!missing.isEmpty()) {
          throw ReadOptions.bad(
              "assign names queues " + missing + " of topic '" + topic + "'; it has "
                  + Arrays.toString(have));
        }
        for (int q : e.getValue()) {
          pairs.add(new String[] {topic, Integer.toString(q)});
        }
      }
      return pairs;
    }
    List<String> topics;
    if (opts.topics != null) {
      List<String> unknown = new ArrayList<>();
      for (String t : opts.topics) {
        if (!present.contains(t)) {
          unknown.add(t);
        }
      }
      if (!unknown.isEmpty()) {
        throw ReadOptions.bad(
            "topics names "
                + ReadOptions.names(unknown)
                + ", which the store does not have (it has "
                + ReadOptions.names(present)
                + ")");
      }
      topics = new ArrayList<>(new TreeSet<>(opts.topics));
    } else if (opts.topicPattern != null) {
      topics = matching(opts.topicPattern, present);
    } else {
      topics = present;
    }
    for (String t : topics) {
      for (int q : NativeStore.queueIds(store, t)) {
        pairs.add(new String[] {t, Integer.toString(q)});
      }
    }
    return pairs;
  }

  /**
   * A CharSequence that stops a regex match (by an exception) once its thread is interrupted:
   * a java.util.regex match reads its input through charAt, so a pattern that backtracks
   * catastrophically is stopped within PATTERN_TIMEOUT_SECONDS.
   */
  private static final class Interruptible implements CharSequence {
    private final CharSequence text;

    Interruptible(CharSequence text) {
      this.text = text;
    }

    @Override
    public char charAt(int index) {
      if (Thread.currentThread().isInterrupted()) {
        throw new IllegalStateException("interrupted");
      }
      return text.charAt(index);
    }

    @Override
    public int length() {
      return text.length();
    }

    @Override
    public CharSequence subSequence(int start, int end) {
      return new Interruptible(text.subSequence(start, end));
    }

    @Override
    public String toString() {
      return text.toString();
    }
  }

  /** The topics the pattern fully matches (Java regex syntax), within a bounded time. */
  private static List<String> matching(String pattern, List<String> topics) {
    Pattern rx = Pattern.compile(pattern);
    ExecutorService pool =
        Executors.newSingleThreadExecutor(
            r -> {
              Thread t = new Thread(r, "rmqstore-topic-pattern");
              t.setDaemon(true);
              return t;
            });
    try {
      Future<List<String>> job =
          pool.submit(
              () -> {
                List<String> out = new ArrayList<>();
                for (String t : topics) {
                  if (rx.matcher(new Interruptible(t)).matches()) {
                    out.add(t);
                  }
                }
                return out;
              });
      return job.get(PATTERN_TIMEOUT_SECONDS, TimeUnit.SECONDS);
    } catch (TimeoutException e) {
      throw ReadOptions.bad(
          "topicPattern " + ReadOptions.show(pattern) + " did not match the store's "
              + topics.size() + " topic names within " + PATTERN_TIMEOUT_SECONDS + " s: it"
              + " backtracks catastrophically (nested repetition such as '(a+)+' does); write it"
              + " without nested repetition");
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RmqStoreException("rmqstore data source: interrupted while matching topicPattern");
    } catch (java.util.concurrent.ExecutionException e) {
      throw new RmqStoreException(
          "rmqstore data source: matching topicPattern failed: " + e.getCause());
    } finally {
      pool.shutdownNow();
    }
  }

  static void checkJsonTopics(
      String name, Map<String, Map<Integer, Long>> spec, TreeSet<String> selected) {
    for (Map.Entry<String, Map<Integer, Long>> e : spec.entrySet()) {
      for (Integer q : e.getValue().keySet()) {
        if (!selected.contains(e.getKey() + "\u0000" + q)) {
          throw ReadOptions.bad(
              name + " names " + e.getKey() + "/" + q + ", which is not a selected queue of the"
                  + " store");
        }
      }
    }
  }

  static long resolve(
      String word,
      Map<String, Map<Integer, Long>> spec,
      String topic,
      int qid,
      long low,
      long high,
      String dflt) {
    if (word == null) {
      Long given = spec.getOrDefault(topic, Map.of()).get(qid);
      if (given == null) {
        word = dflt;
      } else if (given == ReadOptions.EARLIEST) {
        word = "earliest";
      } else if (given == ReadOptions.LATEST) {
        word = "latest";
      } else {
        return given;
      }
    }
    return word.equals("earliest") ? low : high;
  }

  /**
   * The first offset of a queue whose message can still be read: its minimum, or past it while
   * its first units point into commitlog segments the cleaner already removed (bisection over
   * the units, which are in commitlog order).
   */
  static long readableLow(long store, String topic, int qid, long high) {
    long[] o = NativeStore.queueOffsets(store, topic, qid);
    long low = o[0];
    long phyMin = o[2];
    if (phyMin <= 0 || NativeStore.commitLogOffset(store, topic, qid, low) >= phyMin) {
      return low;
    }
    long hi = high;
    if (low >= hi) {
      return low;
    }
    long lo = low + 1;
    while (lo < hi) {
      long mid = lo + (hi - lo) / 2;
      if (NativeStore.commitLogOffset(store, topic, qid, mid) >= phyMin) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  /** Offsets [offset, low) are gone: fail, or log them and go on from low. */
  static long dataLoss(ReadOptions opts, String topic, int qid, long offset, long low) {
    String text =
        topic + "/" + qid + ": offsets [" + offset + ", " + low + ") of topic '" + topic
            + "' queue " + qid + " were removed before they were read (offset " + offset
            + " is below the first readable offset " + low + ": its segments expired)";
    if (opts.failOnDataLoss) {
      throw new RmqStoreException(
          "rmqstore data source: data loss, " + text
              + "; set failOnDataLoss=false to read from the first readable offset");
    }
    LOG.warn(
        "data loss, {}; skipped them, reading from {} (failOnDataLoss=false)", text, low);
    return low;
  }

  /** Ranges split for minPartitions, then packed, never into fewer tasks than it asks for. */
  static List<RangesPartition> tasks(List<QueueRange> ranges, ReadOptions opts) {
    ranges = split(ranges, opts.minPartitions);
    long rows = opts.rowsPerPartition;
    if (opts.minPartitions != null) {
      long total = 0;
      for (QueueRange r : ranges) {
        total += r.size();
      }
      rows = Math.min(rows, Math.max(1, total / opts.minPartitions));
    }
    return pack(ranges, rows);
  }

  /** Splits ranges in proportion to their sizes into at least minPartitions (Kafka's way). */
  static List<QueueRange> split(List<QueueRange> ranges, Integer minPartitions) {
    if (minPartitions == null || ranges.size() >= minPartitions) {
      return ranges;
    }
    long total = 0;
    for (QueueRange r : ranges) {
      total += r.size();
    }
    if (total == 0) {
      return ranges;
    }
    List<QueueRange> out = new ArrayList<>();
    for (QueueRange r : ranges) {
      long size = r.size();
      // ceil(size * minPartitions / total) without overflow: sizes fit 63 bits, and
      // minPartitions 31.
      java.math.BigInteger num =
          java.math.BigInteger.valueOf(size).multiply(java.math.BigInteger.valueOf(minPartitions));
      java.math.BigInteger[] qr = num.divideAndRemainder(java.math.BigInteger.valueOf(total));
      long parts = qr[0].longValue() + (qr[1].signum() > 0 ? 1 : 0);
      parts = Math.min(size, parts);
      for (long i = 0; i < parts; i++) {
        long lo = r.start + mulDiv(size, i, parts);
        long hi = r.start + mulDiv(size, i + 1, parts);
        if (hi > lo) {
          out.add(new QueueRange(r.topic, r.queueId, lo, hi));
        }
      }
    }
    return out;
  }

  private static long mulDiv(long a, long b, long c) {
    return java.math.BigInteger.valueOf(a)
        .multiply(java.math.BigInteger.valueOf(b))
        .divide(java.math.BigInteger.valueOf(c))
        .longValue();
  }

  /** Packs consecutive ranges into tasks of at most about {@code rows} messages. */
  static List<RangesPartition> pack(List<QueueRange> ranges, long rows) {
    List<RangesPartition> out = new ArrayList<>();
    List<QueueRange> group = new ArrayList<>();
    long held = 0;
    for (QueueRange r : ranges) {
      if (!group.isEmpty() && held + r.size() > rows) {
        out.add(new RangesPartition(group));
        group = new ArrayList<>();
        held = 0;
      }
      group.add(r);
      held += r.size();
    }
    if (!group.isEmpty()) {
      out.add(new RangesPartition(group));
    }
    return out;
  }
}
