package rmqstore.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.In;

/**
 * Conditions on topic and queue_id that a scan takes over: they select whole queues (both are
 * constants of a queue's rows), so the queues they rule out are never planned and Spark need
 * not evaluate them again. Each query plans its own scan, so a DataFrame queried with and
 * without a condition gets each its own answer.
 */
final class QueueFilter implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Topics allowed (null: any). */
  private TreeSet<String> topics;
  /** Queue ids allowed (null: any). */
  private TreeSet<Integer> queueIds;

  private final List<Filter> pushed = new ArrayList<>();

  /** Takes {@code f} over when it is a condition this scan evaluates exactly. */
  boolean take(Filter f) {
    String column;
    Object[] values;
    if (f instanceof EqualTo) {
      column = ((EqualTo) f).attribute();
      values = new Object[] {((EqualTo) f).value()};
    } else if (f instanceof EqualNullSafe) {
      column = ((EqualNullSafe) f).attribute();
      values = new Object[] {((EqualNullSafe) f).value()};
    } else if (f instanceof In) {
      column = ((In) f).attribute();
      values = ((In) f).values();
    } else {
      return false;
    }
    if (column.equals("topic")) {
      TreeSet<String> allowed = new TreeSet<>();
      for (Object v : values) {
        if (v instanceof String) {
          allowed.add((String) v);
        } else if (v != null) {
          return false;
        }
      }
      topics = intersect(topics, allowed);
    } else if (column.equals("queue_id")) {
      TreeSet<Integer> allowed = new TreeSet<>();
      for (Object v : values) {
        if (v instanceof Integer) {
          allowed.add((Integer) v);
        } else if (v != null) {
          return false;
        }
      }
      queueIds = intersect(queueIds, allowed);
    } else {
      return false;
    }
    pushed.add(f);
    return true;
  }

  private static <T extends Comparable<T>> TreeSet<T> intersect(TreeSet<T> have, Set<T> more) {
    if (have == null) {
      return new TreeSet<>(more);
    }
    TreeSet<T> out = new TreeSet<>(have);
    out.retainAll(more);
    return out;
  }

  boolean allows(String topic, int queueId) {
    return (topics == null || topics.contains(topic))
        && (queueIds == null || queueIds.contains(queueId));
  }

  Filter[] pushed() {
    return pushed.toArray(new Filter[0]);
  }

  boolean isEmpty() {
    return pushed.isEmpty();
  }

  @Override
  public String toString() {
    return pushed.toString();
  }
}
