package rmqstore.spark;

import java.io.IOException;
import java.nio.channels.SeekableByteChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.StandardOpenOption;
import java.util.List;
import org.apache.arrow.c.ArrowArray;
import org.apache.arrow.c.ArrowSchema;
import org.apache.arrow.c.Data;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.arrow.vector.ipc.message.ArrowBlock;
import rmqstore.jni.NativeWriter;
import rmqstore.jni.StoreIOException;
import rmqstore.jni.StoreLockedException;

/**
 * The driver's side of a commit: opens the store writable through the Rust core (with its
 * lock), hands it each staged batch, in partition order, through the Arrow C Data Interface
 * (one native call a batch; the core puts runs of rows with {@code put_messages}), and closes
 * it (forced and dispatched).
 */
final class StagedAppender {
  private static final BufferAllocator ROOT = new RootAllocator();

  private StagedAppender() {}

  /** Appends the staged files; returns the rows appended. */
  static long append(WriteOptions opts, String job, List<StagedFile> staged) {
    long writer;
    try {
      writer = NativeWriter.open(opts.path, opts.names(), opts.values());
    } catch (StoreLockedException e) {
      throw new StoreLockedException(
          "rmqstore data source: cannot append to "
              + opts.path
              + ": another process holds the store open ("
              + e.getMessage()
              + "); close that writer and write again. Nothing was appended.");
    }
    Throwable failure = null;
    try (BufferAllocator allocator =
        ROOT.newChildAllocator("rmqstore-commit", 0, Long.MAX_VALUE)) {
      for (StagedFile f : staged) {
        appendFile(writer, allocator, Staging.stagedFile(opts.path, job, f.file));
      }
    } catch (RuntimeException | Error e) {
      failure = e;
      throw e;
    } finally {
      try {
        NativeWriter.close(writer);
      } catch (RuntimeException e) {
        if (failure == null) {
          throw e;
        }
        failure.addSuppressed(e);
      }
    }
    return staged.stream().mapToLong(f -> f.rows).sum();
  }

  private static void appendFile(long writer, BufferAllocator allocator, java.nio.file.Path path) {
    try (SeekableByteChannel channel =
            Files.newByteChannel(path, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS);
        ArrowFileReader reader = new ArrowFileReader(channel, allocator)) {
      VectorSchemaRoot root = reader.getVectorSchemaRoot();
      if (!root.getSchema().equals(Staging.SCHEMA)) {
        throw new StoreIOException(
            "rmqstore data source: " + path + " does not hold staged rows of this writer");
      }
      for (ArrowBlock block : reader.getRecordBlocks()) {
        reader.loadRecordBatch(block);
        try (ArrowArray array = ArrowArray.allocateNew(allocator);
            ArrowSchema schema = ArrowSchema.allocateNew(allocator)) {
          Data.exportVectorSchemaRoot(allocator, root, null, array, schema);
          try {
            NativeWriter.append(writer, array.memoryAddress(), schema.memoryAddress());
          } finally {
            // Moved by the native side: these do nothing then.
            array.release();
            schema.release();
          }
        }
      }
    } catch (IOException e) {
      throw new StoreIOException(
          "rmqstore data source: cannot read the staged file " + path + ": " + e.getMessage());
    }
  }
}
