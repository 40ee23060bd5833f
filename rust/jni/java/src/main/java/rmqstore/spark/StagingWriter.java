package rmqstore.spark;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.UUID;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.arrow.vector.complex.MapVector;
import org.apache.arrow.vector.complex.StructVector;
import org.apache.arrow.vector.ipc.ArrowFileWriter;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import rmqstore.jni.StoreIOException;

/**
 * A write task: stages its rows, checked ({@link WriteColumns}), in an Arrow IPC file of the
 * job's staging folder ({@link Staging}), in batches of up to {@value #BATCH_ROWS} rows, and
 * names the file in its commit message once complete. A failed or killed attempt removes its
 * file ({@link #abort}); nothing of it is ever appended.
 */
final class StagingWriter implements DataWriter<InternalRow> {
  static final int BATCH_ROWS = 4096;
  /** Body bytes after which a batch is written out before {@value #BATCH_ROWS} rows. */
  static final long BATCH_BYTES = 8L << 20;

  private static final BufferAllocator ROOT = new RootAllocator();

  private final Path dir;
  private final int partition;
  private final WriteColumns in;
  private final String name;
  private final Path tmp;
  private final BufferAllocator allocator;
  private final VectorSchemaRoot root;
  private final VarCharVector topic;
  private final VarBinaryVector body;
  private final IntVector queue;
  private final VarCharVector tags;
  private final ListVector keys;
  private final VarCharVector keyItems;
  private final MapVector props;
  private final StructVector entries;
  private final VarCharVector propNames;
  private final VarCharVector propValues;
  private FileChannel channel;
  private ArrowFileWriter file;
  private int batchRows;
  private long batchBytes;
  private long rows;
  private long nullTopics;
  private long nullBodies;
  private boolean closed;
  private boolean committed;

  StagingWriter(Path dir, int partition, WriteColumns in) {
    this.dir = dir;
    this.partition = partition;
    this.in = in;
    this.name = String.format("%06d-%s.arrow", partition, UUID.randomUUID().toString().replace("-", ""));
    this.tmp = dir.resolve(name + ".tmp");
    this.allocator = ROOT.newChildAllocator("rmqstore-write", 0, Long.MAX_VALUE);
    this.root = VectorSchemaRoot.create(Staging.SCHEMA, allocator);
    topic = (VarCharVector) root.getVector("topic");
    body = (VarBinaryVector) root.getVector("body");
    queue = (IntVector) root.getVector("queue_id");
    tags = (VarCharVector) root.getVector("tags");
    keys = (ListVector) root.getVector("keys");
    keyItems = (VarCharVector) keys.getDataVector();
    props = (MapVector) root.getVector("properties");
    entries = (StructVector) props.getDataVector();
    propNames = (VarCharVector) entries.getChild("key");
    propValues = (VarCharVector) entries.getChild("value");
  }

  @Override
  public void write(InternalRow row) throws IOException {
    boolean noTopic = row.isNullAt(in.topic);
    boolean noBody = row.isNullAt(in.body);
    if (noTopic || noBody) {
      // Counted, and the task fails at its end with the Python source's message.
      nullTopics += noTopic ? 1 : 0;
      nullBodies += noBody ? 1 : 0;
      return;
    }
    int q = in.queueId(row);
    byte[][] ks = in.keys(row);
    byte[][][] ps = in.properties(row, in.hasTags(row), ks.length > 0);
    byte[] t = in.tags(row);
    byte[] b = in.body(row);
    int i = batchRows;
    topic.setSafe(i, row.getUTF8String(in.topic).getBytes());
    body.setSafe(i, b);
    if (q < 0) {
      queue.setNull(i);
    } else {
      queue.setSafe(i, q);
    }
    if (t == null) {
      tags.setNull(i);
    } else {
      tags.setSafe(i, t);
    }
    int start = keys.startNewValue(i);
    for (int j = 0; j < ks.length; j++) {
      keyItems.setSafe(start + j, ks[j]);
    }
    keys.endValue(i, ks.length);
    start = props.startNewValue(i);
    for (int j = 0; j < ps.length; j++) {
      entries.setIndexDefined(start + j);
      propNames.setSafe(start + j, ps[j][0]);
      propValues.setSafe(start + j, ps[j][1]);
    }
    props.endValue(i, ps.length);
    batchRows++;
    batchBytes += b.length;
    rows++;
    if (batchRows >= BATCH_ROWS || batchBytes >= BATCH_BYTES) {
      writeBatch();
    }
  }

  private void writeBatch() throws IOException {
    if (batchRows == 0) {
      return;
    }
    if (file == null) {
      // A new file only (never through a link, never over another's).
      channel =
          FileChannel.open(
              tmp,
              StandardOpenOption.CREATE_NEW,
              StandardOpenOption.WRITE,
              LinkOption.NOFOLLOW_LINKS);
      file = new ArrowFileWriter(root, null, channel);
      file.start();
    }
    root.setRowCount(batchRows);
    file.writeBatch();
    for (FieldVector v : root.getFieldVectors()) {
      v.reset();
    }
    batchRows = 0;
    batchBytes = 0;
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    if (nullTopics > 0 || nullBodies > 0) {
      String column = nullTopics > 0 ? "topic" : "body";
      throw ReadOptions.bad(
          "column '"
              + column
              + "' is null in "
              + (nullTopics > 0 ? nullTopics : nullBodies)
              + " row(s); filter those rows out before writing");
    }
    writeBatch();
    if (file == null) {
      return new StagedFile(partition, null, 0);
    }
    file.end();
    file.close();
    file = null;
    channel = null;
    try {
      Files.move(tmp, dir.resolve(name), StandardCopyOption.ATOMIC_MOVE);
    } catch (IOException e) {
      throw new StoreIOException(
          "rmqstore data source: cannot name the staged file " + tmp + ": " + e.getMessage());
    }
    committed = true;
    return new StagedFile(partition, name, rows);
  }

  @Override
  public void abort() throws IOException {
    closeFile();
    // This attempt's partial file is nobody's (a retry stages its own).
    Files.deleteIfExists(tmp);
  }

  private void closeFile() {
    try {
      if (file != null) {
        file.close();
      } else if (channel != null) {
        channel.close();
      }
    } catch (IOException | RuntimeException e) {
      // Closing after a failure: the file is removed next.
    }
    file = null;
    channel = null;
  }

  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    closeFile();
    if (!committed) {
      try {
        Files.deleteIfExists(tmp);
      } catch (IOException e) {
        // The job's abort removes the folder.
      }
    }
    root.close();
    allocator.close();
  }
}
