package rmqstore.spark;

import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * rmqstore's JVM data source (DataSource V2): batch reads of a store through the Rust core,
 * as columnar batches. Registered under the short name {@value #SHORT_NAME} while the Python
 * data source keeps the name {@code rmqstore} (docs/spark-jvm.md says how the names switch).
 * Options, columns and errors are those of the Python source's batch reads.
 */
public final class RmqStoreJvmSource implements TableProvider, DataSourceRegister {
  public static final String SHORT_NAME = "rmqstore-jvm";

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    String text = options.get("includeProperties");
    boolean props = false;
    if (text != null) {
      String v = text.strip().toLowerCase(Locale.ROOT);
      if (!v.equals("true") && !v.equals("false")) {
        throw ReadOptions.bad(
            "includeProperties must be 'true' or 'false', got " + ReadOptions.show(text));
      }
      props = v.equals("true");
    }
    return SourceSchema.of(props);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new RmqTable(schema);
  }
}
