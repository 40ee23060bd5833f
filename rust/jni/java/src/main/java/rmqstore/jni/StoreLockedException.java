package rmqstore.jni;

/** The store is held open for writing (its lock file is taken) by another process or opener. */
public class StoreLockedException extends RmqStoreException {
  private static final long serialVersionUID = 1L;

  public StoreLockedException(String message) {
    super(message);
  }
}
