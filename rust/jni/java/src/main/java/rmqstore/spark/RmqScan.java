package rmqstore.spark;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/** A batch scan: one task per queue range (or group of small ones). */
final class RmqScan implements Scan, Batch {
  private final ReadOptions opts;
  private final StructType schema;
  private final QueueFilter filter;

  RmqScan(ReadOptions opts, StructType schema, QueueFilter filter) {
    this.opts = opts;
    this.schema = schema;
    this.filter = filter;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "rmqstore "
        + opts.path
        + " ReadSchema: "
        + schema.catalogString()
        + (filter.isEmpty() ? "" : " PushedFilters: " + filter);
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return Planner.plan(opts, filter).toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReaderFactory(opts, schema);
  }
}
