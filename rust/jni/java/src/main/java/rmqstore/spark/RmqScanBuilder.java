package rmqstore.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * Builds the scan of the columns the query needs (the others are never built) and of the
 * queues its conditions on topic and queue_id leave (see {@link QueueFilter}), of the rows its
 * conditions on tags and store_timestamp leave (see {@link RowConditions}).
 */
final class RmqScanBuilder
    implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
  private final Map<String, String> options;
  private final StructType tableSchema;
  private StructType schema;
  private final QueueFilter filter = new QueueFilter();
  private final RowConditions conditions = new RowConditions();

  RmqScanBuilder(Map<String, String> options, StructType schema) {
    this.options = options;
    this.tableSchema = schema;
    this.schema = schema;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    schema = requiredSchema;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    List<Filter> rest = new ArrayList<>();
    for (Filter f : filters) {
      if (!filter.take(f) && !conditions.take(f)) {
        rest.add(f);
      }
    }
    return rest.toArray(new Filter[0]);
  }

  @Override
  public Filter[] pushedFilters() {
    List<Filter> all = new ArrayList<>(List.of(filter.pushed()));
    all.addAll(conditions.pushed());
    return all.toArray(new Filter[0]);
  }

  @Override
  public Scan build() {
    return new RmqScan(options, tableSchema, schema, filter, conditions, pushedFilters());
  }
}
