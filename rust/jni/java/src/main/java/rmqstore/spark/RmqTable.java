package rmqstore.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A store as a table: batch reads and micro-batch streams. */
final class RmqTable implements SupportsRead {
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
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    // Parsed by the scan, which knows whether it is a batch read or a stream.
    return new RmqScanBuilder(new java.util.HashMap<>(options.asCaseSensitiveMap()), schema);
  }
}
