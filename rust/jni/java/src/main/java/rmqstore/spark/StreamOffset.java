package rmqstore.spark;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Collections;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;
import rmqstore.jni.RmqStoreException;

/**
 * A stream's offsets, Kafka's way: the next offset to read of every queue, as JSON {@code
 * {"Topic": {"queueId": offset}}}. The text is exactly what the Python source's offsets become
 * in a checkpoint (Python's {@code json.dumps} of its dict: topics and queue ids in order, ", "
 * and ": " between items, non-ASCII characters as \\u escapes), so a checkpoint written by one
 * source is read by the other, and Spark, which compares offsets by their text, sees the same
 * offsets as equal whichever source wrote them.
 */
final class StreamOffset extends Offset {
  private static final ObjectMapper JSON =
      new ObjectMapper().enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);

  /** (topic, queue id) -> next offset to read, in order. */
  final TreeMap<QueueKey, Long> offsets;

  private final String json;

  StreamOffset(Map<QueueKey, Long> offsets) {
    this.offsets = new TreeMap<>(offsets);
    this.json = encode(this.offsets);
  }

  Map<QueueKey, Long> asMap() {
    return Collections.unmodifiableMap(offsets);
  }

  @Override
  public String json() {
    return json;
  }

  /** The offsets a checkpoint holds (written by this source or by the Python source). */
  static StreamOffset parse(String text) {
    JsonNode root;
    try {
      root = JSON.readTree(text);
    } catch (JsonProcessingException e) {
      throw unreadable(text, "not valid JSON (" + e.getOriginalMessage() + ")");
    }
    if (root == null || !root.isObject()) {
      throw unreadable(text, "not a JSON object");
    }
    TreeMap<QueueKey, Long> out = new TreeMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = root.properties().iterator(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = it.next();
      if (!topic.getValue().isObject()) {
        throw unreadable(text, "topic '" + topic.getKey() + "' does not map queue ids to offsets");
      }
      Iterator<Map.Entry<String, JsonNode>> queues = topic.getValue().properties().iterator();
      while (queues.hasNext()) {
        Map.Entry<String, JsonNode> q = queues.next();
        String id = q.getKey();
        if (!id.matches("0|[1-9][0-9]{0,9}") || Long.parseLong(id) > Integer.MAX_VALUE) {
          throw unreadable(text, "queue id '" + id + "' is not an integer from 0 to 2147483647");
        }
        JsonNode v = q.getValue();
        if (!v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < 0) {
          throw unreadable(
              text, "offset " + v + " of " + topic.getKey() + "/" + id + " is not a long >= 0");
        }
        out.put(new QueueKey(topic.getKey(), Integer.parseInt(id)), v.asLong());
      }
    }
    return new StreamOffset(out);
  }

  private static RmqStoreException unreadable(String text, String why) {
    return new RmqStoreException(
        "rmqstore data source: the stream's offsets "
            + ReadOptions.show(text, 200)
            + " cannot be read: "
            + why
            + "; expected e.g. {\"TopicA\": {\"0\": 23, \"1\": 7}}");
  }

  /** Python's json.dumps of {topic: {str(queue id): offset}}. */
  private static String encode(TreeMap<QueueKey, Long> offsets) {
    StringBuilder b = new StringBuilder("{");
    String topic = null;
    for (Map.Entry<QueueKey, Long> e : offsets.entrySet()) {
      QueueKey q = e.getKey();
      if (!q.topic.equals(topic)) {
        if (topic != null) {
          b.append("}, ");
        }
        topic = q.topic;
        quote(b, topic);
        b.append(": {");
      } else {
        b.append(", ");
      }
      b.append('"').append(q.queueId).append("\": ").append(e.getValue());
    }
    if (topic != null) {
      b.append('}');
    }
    return b.append('}').toString();
  }

  /** A JSON string as Python's json.dumps writes it (ensure_ascii). */
  private static void quote(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        case '\b' -> b.append("\\b");
        case '\f' -> b.append("\\f");
        default -> {
          if (c < 0x20 || c > 0x7e) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    b.append('"');
  }

  /** A queue: topic and queue id, ordered by topic, then queue id (as the Python source's). */
  static final class QueueKey implements Comparable<QueueKey>, java.io.Serializable {
    private static final long serialVersionUID = 1L;

    final String topic;
    final int queueId;

    QueueKey(String topic, int queueId) {
      this.topic = topic;
      this.queueId = queueId;
    }

    @Override
    public int compareTo(QueueKey o) {
      int c = comparePython(topic, o.topic);
      return c != 0 ? c : Integer.compare(queueId, o.queueId);
    }

    /** Python's str order: by code point (String.compareTo orders by UTF-16 unit). */
    private static int comparePython(String a, String b) {
      int i = 0;
      int j = 0;
      while (i < a.length() && j < b.length()) {
        int x = a.codePointAt(i);
        int y = b.codePointAt(j);
        if (x != y) {
          return Integer.compare(x, y);
        }
        i += Character.charCount(x);
        j += Character.charCount(y);
      }
      return Integer.compare(a.length() - i, b.length() - j);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof QueueKey k && k.topic.equals(topic) && k.queueId == queueId;
    }

    @Override
    public int hashCode() {
      return topic.hashCode() * 31 + queueId;
    }

    @Override
    public String toString() {
      return topic + "/" + queueId;
    }
  }
}
