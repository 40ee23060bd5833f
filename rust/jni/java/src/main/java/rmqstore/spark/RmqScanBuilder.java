package rmqstore.spark;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/** Builds the scan of the columns the query needs (the others are never exported). */
final class RmqScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns {
  private final ReadOptions opts;
  private StructType schema;

  RmqScanBuilder(ReadOptions opts, StructType schema) {
    this.opts = opts;
    this.schema = schema;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    schema = requiredSchema;
  }

  @Override
  public Scan build() {
    return new RmqScan(opts, schema);
  }
}
