package rmqstore.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A store as a table: batch reads, micro-batch streams, appends. */
final class RmqTable implements SupportsRead, SupportsWrite {
  private final StructType schema;

  RmqTable(StructType schema) {
    this.schema = schema;
  }

  @Override
  public String name() {
    return "rmqstore";
  }

  @Override
  @SuppressWarnings("deprecation") // Table.columns() defaults to this schema's columns
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(
        TableCapability.BATCH_READ,
        TableCapability.MICRO_BATCH_READ,
        // Appends (RmqWriteBuilder): the written columns are not the read schema, and
        // TRUNCATE only lets overwrite reach the builder, which refuses it.
        TableCapability.BATCH_WRITE,
        TableCapability.ACCEPT_ANY_SCHEMA,
        TableCapability.TRUNCATE);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    // Parsed by the scan, which knows whether it is a batch read or a stream.
    return new RmqScanBuilder(new java.util.HashMap<>(options.asCaseSensitiveMap()), schema);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new RmqWriteBuilder(info);
  }
}
