package rmqstore.jni;

/**
 * Bits of the column mask of {@link NativeStore#readBatch}, as rust/jni/src/export.rs has them;
 * the exported struct array has the selected columns in this order. {@code topic} and {@code
 * queue_id} are constants of a queue's read and are never exported.
 */
public final class Columns {
  public static final int QUEUE_OFFSET = 1;
  public static final int COMMIT_LOG_OFFSET = 1 << 1;
  public static final int STORE_TIMESTAMP = 1 << 2;
  public static final int BORN_TIMESTAMP = 1 << 3;
  public static final int TAGS = 1 << 4;
  public static final int KEYS = 1 << 5;
  public static final int PROPERTIES = 1 << 6;
  public static final int BODY = 1 << 7;

  private Columns() {}

  /** The bit of an exported column, 0 for topic and queue_id; -1 for a name of no column. */
  public static int bit(String column) {
    switch (column) {
      case "topic":
      case "queue_id":
        return 0;
      case "queue_offset":
        return QUEUE_OFFSET;
      case "commit_log_offset":
        return COMMIT_LOG_OFFSET;
      case "store_timestamp":
        return STORE_TIMESTAMP;
      case "born_timestamp":
        return BORN_TIMESTAMP;
      case "tags":
        return TAGS;
      case "keys":
        return KEYS;
      case "properties":
        return PROPERTIES;
      case "body":
        return BODY;
      default:
        return -1;
    }
  }
}
