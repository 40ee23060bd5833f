package rmqstore.jni;

/** A bad argument or setting (the store's InvalidArgument and Config errors, bad options). */
public class InvalidArgumentException extends RmqStoreException {
  private static final long serialVersionUID = 1L;

  public InvalidArgumentException(String message) {
    super(message);
  }
}
