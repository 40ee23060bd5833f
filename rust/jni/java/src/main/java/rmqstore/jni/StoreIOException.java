package rmqstore.jni;

/** An operating-system I/O failure on a store file. */
public class StoreIOException extends RmqStoreException {
  private static final long serialVersionUID = 1L;

  public StoreIOException(String message) {
    super(message);
  }
}
