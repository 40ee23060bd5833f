package rmqstore.spark;

import java.io.Serializable;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import rmqstore.jni.NativeWriter;

/**
 * The options of a write (python/rmqstore/spark/__init__.py's {@code writer}): {@code path}
 * and {@code store.<setting>}, checked at planning with the Python source's messages.
 */
final class WriteOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Read options, refused by name ("does not apply to writes"). */
  private static final Map<String, String> READ_OPTIONS = readOptions();

  final String path;
  /** store.&lt;setting&gt; options: StoreConfig setting names and their text. */
  final TreeMap<String, String> settings = new TreeMap<>();

  private static Map<String, String> readOptions() {
    Map<String, String> m = new TreeMap<>();
    for (String name :
        Set.of(
            "topics",
            "topicPattern",
            "assign",
            "startingOffsets",
            "startingTimestamp",
            "endingOffsets",
            "endingTimestamp",
            "failOnDataLoss",
            "includeProperties",
            "minPartitions",
            "rowsPerPartition",
            "maxOffsetsPerTrigger",
            "consumerGroup")) {
      m.put(name.toLowerCase(Locale.ROOT), name);
    }
    return m;
  }

  WriteOptions(Map<String, String> raw) {
    String given = null;
    for (Map.Entry<String, String> e : raw.entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT);
      if (key.equals("path")) {
        given = e.getValue();
      } else if (key.startsWith("store.")) {
        String name = key.substring("store.".length());
        if (name.isEmpty()) {
          throw ReadOptions.bad("option " + ReadOptions.show(key) + " names no StoreConfig setting");
        }
        settings.put(name, e.getValue());
      } else if (READ_OPTIONS.containsKey(key)) {
        throw ReadOptions.bad("option '" + READ_OPTIONS.get(key) + "' does not apply to writes");
      } else {
        throw ReadOptions.bad(
            "unknown option "
                + ReadOptions.show(key)
                + " for writes; known: path and store.<StoreConfig setting>");
      }
    }
    if (given == null || given.isEmpty()) {
      throw ReadOptions.bad("no store path: pass it to load()/save() or as option 'path'");
    }
    path = given;
    NativeWriter.checkSettings(names(), values());
  }

  String[] names() {
    return settings.keySet().toArray(new String[0]);
  }

  String[] values() {
    return settings.values().toArray(new String[0]);
  }
}
