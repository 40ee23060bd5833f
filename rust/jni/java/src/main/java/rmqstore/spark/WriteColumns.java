package rmqstore.spark;

import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;
import rmqstore.jni.ArgumentOverflowException;

/**
 * Where a written DataFrame's columns are (checked by {@link WriteSchema}) and their values
 * row by row, checked as the store will take them: the write task refuses a row the store
 * would refuse, so that a bad row fails the job before anything is appended.
 */
final class WriteColumns {
  static final long QUEUE_ID_MAX = Integer.MAX_VALUE;

  final int topic;
  final int body;
  final int queue;
  final int tags;
  final int keys;
  final int props;
  private final boolean bodyIsString;
  private final DataType queueType;
  private final boolean keysIsString;

  WriteColumns(StructType schema) {
    topic = index(schema, "topic");
    body = index(schema, "body");
    queue = index(schema, "queue_id");
    tags = index(schema, "tags");
    keys = index(schema, "keys");
    props = index(schema, "properties");
    bodyIsString = schema.fields()[body].dataType() instanceof StringType;
    queueType = queue < 0 ? null : schema.fields()[queue].dataType();
    keysIsString = keys >= 0 && schema.fields()[keys].dataType() instanceof StringType;
  }

  private static int index(StructType schema, String name) {
    String[] names = schema.fieldNames();
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  byte[] body(InternalRow row) {
    return bodyIsString ? row.getUTF8String(body).getBytes() : row.getBinary(body);
  }

  /** The row's queue id, or -1 when not given; out of range: the Python source's errors. */
  int queueId(InternalRow row) {
    if (queue < 0 || row.isNullAt(queue)) {
      return -1;
    }
    long q;
    if (queueType instanceof IntegerType) {
      q = row.getInt(queue);
    } else if (queueType instanceof LongType) {
      q = row.getLong(queue);
    } else if (queueType instanceof ShortType) {
      q = row.getShort(queue);
    } else if (queueType instanceof ByteType) {
      q = row.getByte(queue);
    } else {
      throw new IllegalStateException("queue_id of type " + queueType);
    }
    if (q < 0) {
      throw ReadOptions.bad("column 'queue_id' holds " + q + "; queue ids are 0 to " + QUEUE_ID_MAX);
    }
    if (q > QUEUE_ID_MAX) {
      throw new ArgumentOverflowException(
          "rmqstore data source: column 'queue_id' holds " + q + "; queue ids are 0 to " + QUEUE_ID_MAX);
    }
    return (int) q;
  }

  byte[] tags(InternalRow row) {
    return tags < 0 || row.isNullAt(tags) ? null : row.getUTF8String(tags).getBytes();
  }

  /** Whether the row gives tags (even empty ones, which are not stored). */
  boolean hasTags(InternalRow row) {
    return tags >= 0 && !row.isNullAt(tags);
  }

  /** The row's keys (nulls left out), each checked; an empty array when none. */
  byte[][] keys(InternalRow row) {
    if (keys < 0 || row.isNullAt(keys)) {
      return new byte[0][];
    }
    if (keysIsString) {
      return new byte[][] {checkedKey(row.getUTF8String(keys).toString())};
    }
    ArrayData a = row.getArray(keys);
    int n = 0;
    for (int i = 0; i < a.numElements(); i++) {
      n += a.isNullAt(i) ? 0 : 1;
    }
    byte[][] out = new byte[n][];
    int j = 0;
    for (int i = 0; i < a.numElements(); i++) {
      if (!a.isNullAt(i)) {
        out[j++] = checkedKey(a.getUTF8String(i).toString());
      }
    }
    return out;
  }

  private static byte[] checkedKey(String key) {
    boolean white = key.isEmpty() || key.codePoints().anyMatch(WriteColumns::isWhite);
    if (white) {
      throw ReadOptions.bad(
          "column 'keys' holds the key "
              + ReadOptions.show(key)
              + ", which is empty or contains white space (keys are stored space-separated)");
    }
    return key.getBytes(StandardCharsets.UTF_8);
  }

  private static boolean isWhite(int cp) {
    return Character.isWhitespace(cp) || Character.isSpaceChar(cp) || cp == 0x85;
  }

  /**
   * The row's properties as {name, value} pairs, each checked as the store checks them (TAGS and
   * KEYS not given both here and in their columns).
   */
  byte[][][] properties(InternalRow row, boolean hasTags, boolean hasKeys) {
    if (props < 0 || row.isNullAt(props)) {
      return new byte[0][][];
    }
    MapData m = row.getMap(props);
    ArrayData names = m.keyArray();
    ArrayData values = m.valueArray();
    byte[][][] out = new byte[m.numElements()][][];
    for (int i = 0; i < out.length; i++) {
      String name = names.getUTF8String(i).toString();
      if (values.isNullAt(i)) {
        throw ReadOptions.bad(
            "column 'properties' gives " + ReadOptions.show(name) + " a null value; leave it out");
      }
      String value = values.getUTF8String(i).toString();
      if (!legal(name) || !legal(value)) {
        throw ReadOptions.bad(
            "column 'properties' holds "
                + ReadOptions.show(name)
                + ": property names and values are not empty and hold neither \\u0001 nor"
                + " \\u0002");
      }
      if ((name.equals("TAGS") && hasTags) || (name.equals("KEYS") && hasKeys)) {
        throw ReadOptions.bad(
            "column 'properties' holds "
                + name
                + ", which its own column gives too; give it in one place");
      }
      out[i] =
          new byte[][] {name.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8)};
    }
    return out;
  }

  private static boolean legal(String s) {
    return !s.isEmpty() && s.indexOf('\u0001') < 0 && s.indexOf('\u0002') < 0;
  }
}
