package rmqstore.spark;

import java.util.Map;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * A scan: a batch read (one task per queue range or group of small ones) or a micro-batch
 * stream ({@link RmqMicroBatchStream}). The options are parsed when Spark says which (batch and
 * streaming reads take different options and defaults, as in the Python source).
 */
final class RmqScan implements Scan, Batch {
  private final Map<String, String> options;
  private final StructType tableSchema;
  private final StructType schema;
  private final QueueFilter filter;
  private final RowConditions conditions;
  private final Filter[] pushed;
  private ReadOptions opts;

  RmqScan(
      Map<String, String> options,
      StructType tableSchema,
      StructType schema,
      QueueFilter filter,
      RowConditions conditions,
      Filter[] pushed) {
    this.options = options;
    this.tableSchema = tableSchema;
    this.schema = schema;
    this.filter = filter;
    this.conditions = conditions;
    this.pushed = pushed;
  }

  private ReadOptions parse(boolean streaming) {
    ReadOptions parsed = new ReadOptions(options, streaming);
    SourceSchema.check(tableSchema, parsed);
    return parsed;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    String path = null;
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getKey().equalsIgnoreCase("path")) {
        path = e.getValue();
      }
    }
    return "rmqstore "
        + path
        + " ReadSchema: "
        + schema.catalogString()
        + (pushed.length == 0 ? "" : " PushedFilters: " + java.util.Arrays.toString(pushed));
  }

  @Override
  public Batch toBatch() {
    opts = parse(false);
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new RmqMicroBatchStream(parse(true), schema);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return Planner.plan(opts, filter).toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReaderFactory(opts, schema, conditions);
  }
}
