package rmqstore.spark;

import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;

/**
 * Appends only. {@code mode("overwrite")} reaches {@link #truncate} (the table declares
 * TRUNCATE for this) and is refused with the Python source's message; Spark itself refuses the
 * other modes than append for a table it cannot create ({@code errorifexists}, {@code ignore}).
 * Options and columns are checked when the write is built, at planning.
 */
final class RmqWriteBuilder implements WriteBuilder, SupportsTruncate {
  private final LogicalWriteInfo info;

  RmqWriteBuilder(LogicalWriteInfo info) {
    this.info = info;
  }

  @Override
  public WriteBuilder truncate() {
    throw ReadOptions.bad(
        "the store is an append-only log: overwrite is not supported, use mode('append')");
  }

  @Override
  public Write build() {
    WriteOptions opts = new WriteOptions(info.options().asCaseSensitiveMap());
    WriteSchema.check(info.schema());
    return new Write() {
      @Override
      public String description() {
        return "rmqstore append to " + opts.path;
      }

      @Override
      public BatchWrite toBatch() {
        return new RmqBatchWrite(opts, info.schema());
      }
    };
  }
}
