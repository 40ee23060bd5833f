package rmqstore.spark;

import org.apache.spark.sql.connector.write.WriterCommitMessage;

/** A write task's staged rows: {@code file} (null when it had none) from partition {@code partition}. */
final class StagedFile implements WriterCommitMessage {
  private static final long serialVersionUID = 1L;

  final int partition;
  final String file;
  final long rows;

  StagedFile(int partition, String file, long rows) {
    this.partition = partition;
    this.file = file;
    this.rows = rows;
  }
}
