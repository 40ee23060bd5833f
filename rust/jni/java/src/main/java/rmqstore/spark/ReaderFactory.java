package rmqstore.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Creates the columnar readers of the read tasks (on the executors). */
final class ReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final ReadOptions opts;
  private final StructType schema;
  private final RowConditions conditions;

  ReaderFactory(ReadOptions opts, StructType schema, RowConditions conditions) {
    this.opts = opts;
    this.schema = schema;
    this.conditions = conditions;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("rmqstore reads are columnar only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new ColumnarReader(opts, schema, (RangesPartition) partition, conditions);
  }
}
