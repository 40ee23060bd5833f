package rmqstore.jni;

/** An error of rmqstore's native library, carrying the store's message. */
public class RmqStoreException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public RmqStoreException(String message) {
    super(message);
  }
}
