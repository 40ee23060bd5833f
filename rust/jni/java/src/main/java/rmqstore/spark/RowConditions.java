package rmqstore.spark;

import java.io.Serializable;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * Conditions on tags and store_timestamp that the core applies while it reads (its row filter,
 * {@code NativeStore.readFiltered}): rows that fail them are never built. Both are exact (tags
 * are compared as strings, the consume queue's tag codes only pass units over; times are
 * compared per row with the literal's microseconds), so Spark need not evaluate them again.
 * Store times are not turned into a range of offsets: they need not grow with offsets.
 */
final class RowConditions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Whether tags are filtered. */
  private boolean byTags;
  /** Tags allowed (null: any tag). */
  private TreeSet<String> tags;
  /** Whether a message without a tag matches. */
  private boolean untagged = true;
  /** Inclusive store-time bounds, in milliseconds. */
  private long minMs = Long.MIN_VALUE;
  private long maxMs = Long.MAX_VALUE;

  private final List<Filter> pushed = new ArrayList<>();

  /** Takes {@code f} over when it is a condition the core evaluates exactly. */
  boolean take(Filter f) {
    boolean taken;
    if (f instanceof EqualTo && ((EqualTo) f).attribute().equals("tags")) {
      Object v = ((EqualTo) f).value();
      taken = (v == null || v instanceof String) && tags(v == null ? List.of() : List.of(v), false);
    } else if (f instanceof EqualNullSafe && ((EqualNullSafe) f).attribute().equals("tags")) {
      Object v = ((EqualNullSafe) f).value();
      taken = v == null ? tags(List.of(), true) : v instanceof String && tags(List.of(v), false);
    } else if (f instanceof In && ((In) f).attribute().equals("tags")) {
      List<Object> values = new ArrayList<>();
      for (Object v : ((In) f).values()) {
        if (v != null) {
          values.add(v); // a null in the list is never true for a row
        }
      }
      taken = tags(values, false);
    } else if (f instanceof IsNull && ((IsNull) f).attribute().equals("tags")) {
      taken = tags(List.of(), true);
    } else if (f instanceof IsNotNull && ((IsNotNull) f).attribute().equals("tags")) {
      taken = tags(null, false);
    } else {
      taken = time(f);
    }
    if (taken) {
      pushed.add(f);
    }
    return taken;
  }

  /** Requires a tag among {@code values} (null: any tag), or none when {@code nullOk}. */
  private boolean tags(List<Object> values, boolean nullOk) {
    TreeSet<String> set = null;
    if (values != null) {
      set = new TreeSet<>();
      for (Object v : values) {
        if (!(v instanceof String)) {
          return false;
        }
        set.add((String) v);
      }
    }
    if (!byTags) {
      tags = set;
    } else if (tags == null) {
      tags = set;
    } else if (set != null) {
      tags.retainAll(set);
    }
    untagged = (!byTags || untagged) && nullOk;
    byTags = true;
    return true;
  }

  /** A comparison of store_timestamp with a timestamp literal, as inclusive bounds in ms. */
  private boolean time(Filter f) {
    String column;
    Object value;
    if (f instanceof GreaterThan) {
      column = ((GreaterThan) f).attribute();
      value = ((GreaterThan) f).value();
    } else if (f instanceof GreaterThanOrEqual) {
      column = ((GreaterThanOrEqual) f).attribute();
      value = ((GreaterThanOrEqual) f).value();
    } else if (f instanceof LessThan) {
      column = ((LessThan) f).attribute();
      value = ((LessThan) f).value();
    } else if (f instanceof LessThanOrEqual) {
      column = ((LessThanOrEqual) f).attribute();
      value = ((LessThanOrEqual) f).value();
    } else if (f instanceof EqualTo) {
      column = ((EqualTo) f).attribute();
      value = ((EqualTo) f).value();
    } else if (f instanceof EqualNullSafe) {
      column = ((EqualNullSafe) f).attribute();
      value = ((EqualNullSafe) f).value();
    } else {
      return false;
    }
    if (!column.equals("store_timestamp")) {
      return false;
    }
    long micros;
    if (value instanceof Timestamp) {
      micros = DateTimeUtils.fromJavaTimestamp((Timestamp) value);
    } else if (value instanceof Instant) {
      micros = DateTimeUtils.instantToMicros((Instant) value);
    } else {
      return false; // null (never true: the column is never null) or another type: Spark's
    }
    // A row stored at ms has micros ms * 1000: compare in ms, rounding each bound inward.
    long floor = Math.floorDiv(micros, 1000L);
    long ceil = floor + (Math.floorMod(micros, 1000L) != 0 ? 1 : 0);
    if (f instanceof GreaterThan) {
      bound(floor + 1, Long.MAX_VALUE);
    } else if (f instanceof GreaterThanOrEqual) {
      bound(ceil, Long.MAX_VALUE);
    } else if (f instanceof LessThan) {
      bound(Long.MIN_VALUE, ceil - 1);
    } else if (f instanceof LessThanOrEqual) {
      bound(Long.MIN_VALUE, floor);
    } else {
      bound(ceil, floor);
    }
    return true;
  }

  private void bound(long min, long max) {
    minMs = Math.max(minMs, min);
    maxMs = Math.min(maxMs, max);
  }

  boolean isEmpty() {
    return pushed.isEmpty();
  }

  boolean byTags() {
    return byTags;
  }

  /** The allowed tags (null: any tag). */
  String[] tags() {
    return tags == null ? null : tags.toArray(new String[0]);
  }

  boolean untagged() {
    return untagged;
  }

  long minMs() {
    return minMs;
  }

  long maxMs() {
    return maxMs;
  }

  List<Filter> pushed() {
    return pushed;
  }
}
