package rmqstore.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.types.StructType;

/** Makes each write task's {@link StagingWriter} (serialized to the executors). */
final class StagingWriterFactory implements DataWriterFactory {
  private static final long serialVersionUID = 1L;

  private final String path;
  private final String job;
  private final StructType schema;

  StagingWriterFactory(String path, String job, StructType schema) {
    this.path = path;
    this.job = job;
    this.schema = schema;
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
    return new StagingWriter(Staging.jobFolder(path, job), partitionId, new WriteColumns(schema));
  }
}
