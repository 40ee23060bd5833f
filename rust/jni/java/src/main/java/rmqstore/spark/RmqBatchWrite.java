package rmqstore.spark;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.UUID;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

/**
 * An append job: tasks stage their rows ({@link StagingWriter}); at commit the driver appends
 * the staged files in partition order through the Rust core ({@link StagedAppender}) and
 * removes the staging folder; an aborted job removes it and appends nothing. A retried task's
 * abandoned file is never named (Spark's commit coordinator lets one attempt of a partition
 * commit). A commit is not atomic against a failing put (a full disk): the rows appended
 * before it stay, and the error says how many.
 */
final class RmqBatchWrite implements BatchWrite {
  /** How long an aborted job keeps removing files its last running tasks stage. */
  static final long ABORT_GRACE_MS = 3000;

  private final WriteOptions opts;
  private final StructType schema;
  private final String job = UUID.randomUUID().toString().replace("-", "");

  RmqBatchWrite(WriteOptions opts, StructType schema) {
    this.opts = opts;
    this.schema = schema;
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    Staging.create(opts.path, job);
    return new StagingWriterFactory(opts.path, job, schema);
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    List<StagedFile> staged = new ArrayList<>();
    for (WriterCommitMessage m : messages) {
      if (m instanceof StagedFile f && f.file != null) {
        staged.add(f);
      }
    }
    staged.sort(Comparator.comparingInt(f -> f.partition));
    try {
      if (!staged.isEmpty()) {
        StagedAppender.append(opts, job, staged);
      }
    } finally {
      Staging.remove(opts.path, job);
    }
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    Staging.remove(opts.path, job);
    // Tasks of the failed job still running may finish their file just after: look again for
    // a little while. (One that outlives this leaves a staged file, never messages.)
    long deadline = System.nanoTime() + ABORT_GRACE_MS * 1_000_000;
    while (System.nanoTime() < deadline) {
      try {
        Thread.sleep(100);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
      if (Staging.exists(opts.path, job)) {
        Staging.remove(opts.path, job);
      }
    }
  }
}
