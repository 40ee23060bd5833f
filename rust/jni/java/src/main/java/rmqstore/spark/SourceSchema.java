package rmqstore.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The rows' schema, as python/rmqstore/spark/schema.py has it. */
final class SourceSchema {
  private SourceSchema() {}

  static StructType of(boolean includeProperties) {
    List<StructField> fields = new ArrayList<>();
    fields.add(DataTypes.createStructField("topic", DataTypes.StringType, false));
    fields.add(DataTypes.createStructField("queue_id", DataTypes.IntegerType, false));
    fields.add(DataTypes.createStructField("queue_offset", DataTypes.LongType, false));
    fields.add(DataTypes.createStructField("commit_log_offset", DataTypes.LongType, false));
    fields.add(DataTypes.createStructField("store_timestamp", DataTypes.TimestampType, false));
    fields.add(DataTypes.createStructField("born_timestamp", DataTypes.TimestampType, false));
    fields.add(DataTypes.createStructField("tags", DataTypes.StringType, true));
    fields.add(
        DataTypes.createStructField(
            "keys", DataTypes.createArrayType(DataTypes.StringType, false), false));
    if (includeProperties) {
      fields.add(
          DataTypes.createStructField(
              "properties",
              DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, true),
              false));
    }
    fields.add(DataTypes.createStructField("body", DataTypes.BinaryType, false));
    return DataTypes.createStructType(fields);
  }

  /**
   * {@code schema} if a read can fill it: a user's {@code .schema(...)} may leave columns out,
   * but each column it has is a source column, once, of the source's type.
   */
  static StructType check(StructType schema, ReadOptions opts) {
    Map<String, DataType> source = new HashMap<>();
    for (StructField f : of(true).fields()) {
      source.put(f.name(), f.dataType());
    }
    TreeSet<String> unknown = new TreeSet<>();
    TreeSet<String> twice = new TreeSet<>();
    TreeSet<String> seen = new TreeSet<>();
    for (StructField f : schema.fields()) {
      if (!source.containsKey(f.name())) {
        unknown.add(f.name());
      }
      if (!seen.add(f.name())) {
        twice.add(f.name());
      }
    }
    if (!unknown.isEmpty()) {
      throw ReadOptions.bad("columns " + ReadOptions.names(unknown) + " are not columns of the source");
    }
    if (!twice.isEmpty()) {
      throw ReadOptions.bad("the schema has the columns " + ReadOptions.names(twice) + " more than once");
    }
    for (StructField f : schema.fields()) {
      String have = f.dataType().simpleString();
      String want = source.get(f.name()).simpleString();
      if (!have.equals(want)) {
        throw ReadOptions.bad(
            "the schema gives column '" + f.name() + "' the type " + have + "; the source reads"
                + " it as " + want + " (declare it so, and cast it after loading)");
      }
    }
    if (seen.contains("properties") && !opts.includeProperties) {
      throw ReadOptions.bad(
          "the schema has a 'properties' column: set includeProperties=true to read it");
    }
    return schema;
  }
}
