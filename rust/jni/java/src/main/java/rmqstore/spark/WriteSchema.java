package rmqstore.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The columns a write takes (python/rmqstore/spark/write.py's {@code _check_write_schema}, with
 * its messages): {@code topic} (string) and {@code body} (binary or string) are needed; {@code
 * queue_id} (an integer type), {@code tags} (string), {@code keys} (array of strings, or one
 * string) and {@code properties} (map of strings) may be given; nothing else.
 */
final class WriteSchema {
  private WriteSchema() {}

  private static final Map<String, List<Class<? extends DataType>>> COLUMNS = columns();

  private static Map<String, List<Class<? extends DataType>>> columns() {
    Map<String, List<Class<? extends DataType>>> m = new LinkedHashMap<>();
    m.put("topic", List.of(StringType.class));
    m.put("body", List.of(BinaryType.class, StringType.class));
    m.put("queue_id", List.of(IntegerType.class, LongType.class, ShortType.class, ByteType.class));
    m.put("tags", List.of(StringType.class));
    m.put("keys", List.of(ArrayType.class, StringType.class));
    m.put("properties", List.of(MapType.class));
    return m;
  }

  static void check(StructType schema) {
    List<String> names = List.of(schema.fieldNames());
    for (String required : new String[] {"topic", "body"}) {
      if (!names.contains(required)) {
        throw ReadOptions.bad(
            "writes need a '" + required + "' column; the DataFrame has " + ReadOptions.names(names));
      }
    }
    for (StructField field : schema.fields()) {
      List<Class<? extends DataType>> kinds = COLUMNS.get(field.name());
      if (kinds == null) {
        throw ReadOptions.bad(
            "column '"
                + field.name()
                + "' cannot be written; the columns are "
                + String.join(", ", COLUMNS.keySet())
                + " (drop or rename the others)");
      }
      DataType dt = field.dataType();
      boolean ok = kinds.stream().anyMatch(k -> k.isInstance(dt));
      if (dt instanceof ArrayType a) {
        ok = a.elementType() instanceof StringType;
      }
      if (dt instanceof MapType m) {
        ok = m.keyType() instanceof StringType && m.valueType() instanceof StringType;
      }
      if (!ok) {
        List<String> expected = new ArrayList<>();
        for (Class<? extends DataType> k : kinds) {
          expected.add(k.getSimpleName().replaceFirst("Type$", "").toLowerCase(java.util.Locale.ROOT));
        }
        String of = field.name().equals("keys") || field.name().equals("properties") ? " of strings" : "";
        throw ReadOptions.bad(
            "column '"
                + field.name()
                + "' has type "
                + dt.simpleString()
                + "; expected "
                + String.join(" or ", expected)
                + of);
      }
    }
  }
}
