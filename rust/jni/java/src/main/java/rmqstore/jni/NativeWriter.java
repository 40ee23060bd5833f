package rmqstore.jni;

/**
 * The native methods of rust/jni's appends (rust/jni/src/write.rs): a store opened writable,
 * with its lock, for one write job's commit, fed batches of staged rows through the Arrow C
 * Data Interface. Errors arrive as {@link RmqStoreException}s carrying the store's message
 * ({@link StoreLockedException} when another store holds the folder).
 */
public final class NativeWriter {
  static {
    // The library is loaded by NativeStore's initializer.
    try {
      Class.forName(NativeStore.class.getName(), true, NativeWriter.class.getClassLoader());
    } catch (ClassNotFoundException e) {
      throw new NoClassDefFoundError(e.getMessage());
    }
  }

  private NativeWriter() {}

  /** Fails as opening a store with these StoreConfig settings would, without opening one. */
  public static native void checkSettings(String[] settingNames, String[] settingValues);

  /** Opens (creating it if needed) the store at {@code path} writable; returns a writer. */
  public static native long open(String path, String[] settingNames, String[] settingValues);

  /**
   * Puts the rows of the staged batch exported at {@code arrowArray} / {@code arrowSchema}
   * (moved: released by the native side, also when this throws). Returns how many.
   */
  public static native int append(long writer, long arrowArray, long arrowSchema);

  /** Closes the store (forced, dispatched, unlocked); returns the rows appended. */
  public static native long close(long writer);

  /** Writers not closed yet. */
  public static native int openWriters();
}
