package rmqstore.jni;

/** The store's folder is locked by another open store (another process, or this one). */
public class StoreLockedException extends StoreIOException {
  private static final long serialVersionUID = 1L;

  public StoreLockedException(String message) {
    super(message);
  }
}
