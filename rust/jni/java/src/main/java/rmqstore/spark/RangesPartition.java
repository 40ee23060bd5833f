package rmqstore.spark;

import java.util.List;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.connector.read.InputPartition;

/** One read task: offset ranges of one or more queues, read one after the other. */
final class RangesPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final QueueRange[] ranges;
  /** The host of the driver, whose local folder the store is (null: none known). */
  final String host;

  RangesPartition(List<QueueRange> ranges) {
    this.ranges = ranges.toArray(new QueueRange[0]);
    this.host = driverHost();
  }

  /**
   * The host of this JVM's block manager: partitions are made on the driver, whose machine holds
   * the store's folder. In local mode it is the one executor's host, so tasks run NODE_LOCAL; a
   * host no executor has leaves the tasks free to run anywhere (Spark waits for locality only
   * on hosts with executors).
   */
  private static String driverHost() {
    SparkEnv env = SparkEnv.get();
    if (env == null || env.blockManager() == null || env.blockManager().blockManagerId() == null) {
      return null;
    }
    return env.blockManager().blockManagerId().host();
  }

  /** The driver's host: the store is a folder of its machine. */
  @Override
  public String[] preferredLocations() {
    return host == null ? new String[0] : new String[] {host};
  }

  @Override
  public String toString() {
    return java.util.Arrays.toString(ranges);
  }
}
