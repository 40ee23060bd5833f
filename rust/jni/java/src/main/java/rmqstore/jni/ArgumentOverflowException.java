package rmqstore.jni;

/** A number outside the range the store takes (python's ArgumentOverflowError). */
public class ArgumentOverflowException extends InvalidArgumentException {
  private static final long serialVersionUID = 1L;

  public ArgumentOverflowException(String message) {
    super(message);
  }
}
