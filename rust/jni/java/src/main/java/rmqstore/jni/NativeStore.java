package rmqstore.jni;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * The native methods of rust/jni (librmqstore_jni.so, loaded from inside this jar, or from the
 * file the system property {@code rmqstore.jni.library} names). Stores are opened read-only and
 * shared: {@link #open} returns a handle, and the store closes with its last handle. Errors
 * arrive as {@link RmqStoreException}s carrying the store's message.
 */
public final class NativeStore {
  static final String RESOURCE = "/rmqstore/native/linux-x86_64/librmqstore_jni.so";

  static {
    load();
  }

  private NativeStore() {}

  private static void load() {
    String given = System.getProperty("rmqstore.jni.library");
    if (given != null && !given.isEmpty()) {
      System.load(given);
      return;
    }
    String os = System.getProperty("os.name", "").toLowerCase(java.util.Locale.ROOT);
    String arch = System.getProperty("os.arch", "");
    if (!os.contains("linux") || !(arch.equals("amd64") || arch.equals("x86_64"))) {
      throw new UnsatisfiedLinkError(
          "rmqstore's native library is built for Linux x86-64 only; this JVM runs on "
              + os + " " + arch);
    }
    try (InputStream in = NativeStore.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new UnsatisfiedLinkError(RESOURCE + " is not inside the rmqstore jar");
      }
      Path file = Files.createTempFile("librmqstore_jni", ".so");
      try {
        Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
        System.load(file.toAbsolutePath().toString());
      } finally {
        // The loaded library stays mapped; the file is not needed any longer.
        Files.deleteIfExists(file);
      }
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("cannot unpack " + RESOURCE + ": " + e);
    }
  }

  /** A handle on the store at {@code path} opened read-only with these StoreConfig settings. */
  public static native long open(String path, String[] settingNames, String[] settingValues);

  /**
   * Records {@code group}'s offsets (the next to consume) of {@code topic}'s queues in the
   * store's config/consumerOffset.json, durably, through the core; takes the store's lock for
   * the write and throws {@link StoreLockedException} while a writer holds it.
   */
  public static native void commitOffsets(
      String path, String group, String topic, int[] queueIds, long[] offsets);

  /** Closes a handle (a closed or unknown handle is ignored). */
  public static native void close(long handle);

  public static native String[] topics(long handle);

  /** Queue ids of a topic, ascending. */
  public static native int[] queueIds(long handle, String topic);

  /**
   * {min offset, max offset (the next to be dispatched), the commitlog's min offset} of a
   * queue.
   */
  public static native long[] queueOffsets(long handle, String topic, int queueId);

  /** The commitlog offset of the queue's unit at {@code queueOffset}, 0 when there is none. */
  public static native long commitLogOffset(long handle, String topic, int queueId, long queueOffset);

  /** getOffsetInQueueByTime: lower = the first offset stored at or after {@code timestampMs}. */
  public static native long offsetByTime(
      long handle, String topic, int queueId, long timestampMs, boolean upper);

  /**
   * Reads up to {@code maxRows} messages of a queue from {@code offset}. When it read some and
   * {@code columns} (bits of {@link Columns}) is not 0, the selected columns are exported as one
   * struct array into the C Data Interface structs at {@code arrowArray} and {@code
   * arrowSchema}, which the caller allocated empty and then owns. Returns the rows read; {@code
   * out} (3 longs) receives the next offset to read, the first and the last queue offset read.
   */
  public static native int readBatch(
      long handle,
      String topic,
      int queueId,
      long offset,
      int maxRows,
      int columns,
      boolean bodyView,
      long arrowArray,
      long arrowSchema,
      long[] out);

  /**
   * {@link #readBatch} of the rows that meet the conditions: with {@code byTags}, a tag among
   * {@code tags} (null: any tag) or, with {@code untagged}, no tag (tags compared as strings;
   * the consume queue's tag codes only pass units over); a store time (ms) within {@code
   * [minStoreMs, maxStoreMs]} (Long.MIN_VALUE and Long.MAX_VALUE: no bound). At most {@code
   * maxRows} units are gone over, and the rows filtered out are never built. {@code out} (6
   * longs) receives the next offset to read, the first and last queue offsets of the rows
   * returned (-1 without rows), and the first and last queue offsets and the count of the units
   * gone over (those whose record was read or passed over by its tag code; units whose record is
   * gone are not among them).
   */
  public static native int readFiltered(
      long handle,
      String topic,
      int queueId,
      long offset,
      int maxRows,
      int columns,
      boolean bodyView,
      boolean byTags,
      String[] tags,
      boolean untagged,
      long minStoreMs,
      long maxStoreMs,
      long arrowArray,
      long arrowSchema,
      long[] out);

  /**
   * {exported Arrow buffers not yet released, bytes of column vectors they hold, stores open,
   * handles open}.
   */
  public static native long[] allocations();
}
