package rmqstore.spark;

import java.util.Map;
import rmqstore.jni.NativeStore;

/** A handle on a store opened read-only by the native library (shared with the JVM's others). */
final class StoreHandle implements AutoCloseable {
  final long id;
  private boolean closed;

  StoreHandle(ReadOptions opts) {
    String[] names = opts.settings.keySet().toArray(new String[0]);
    String[] values = new String[names.length];
    int i = 0;
    for (Map.Entry<String, String> e : opts.settings.entrySet()) {
      values[i++] = e.getValue();
    }
    id = NativeStore.open(opts.path, names, values);
  }

  @Override
  public void close() {
    if (!closed) {
      closed = true;
      NativeStore.close(id);
    }
  }
}
