package rmqstore.spark;

import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** One read task: offset ranges of one or more queues, read one after the other. */
final class RangesPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final QueueRange[] ranges;

  RangesPartition(List<QueueRange> ranges) {
    this.ranges = ranges.toArray(new QueueRange[0]);
  }

  @Override
  public String toString() {
    return java.util.Arrays.toString(ranges);
  }
}
