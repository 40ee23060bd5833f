package rmqstore.jni;

/** A store file, or a record in it, is damaged (the store's CorruptRecord and Corrupted errors). */
public class StoreCorruptedException extends RmqStoreException {
  private static final long serialVersionUID = 1L;

  public StoreCorruptedException(String message) {
    super(message);
  }
}
