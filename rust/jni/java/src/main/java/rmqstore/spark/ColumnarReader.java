package rmqstore.spark;

import org.apache.arrow.c.ArrowArray;
import org.apache.arrow.c.ArrowSchema;
import org.apache.arrow.c.Data;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ViewVarBinaryVector;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import rmqstore.jni.Columns;
import rmqstore.jni.NativeStore;
import rmqstore.jni.RmqStoreException;

/**
 * Reads a task's queue ranges as columnar batches of up to {@value #BATCH_ROWS} rows: the core
 * builds the selected columns and exports them through the Arrow C Data Interface; each batch
 * is imported into fresh Arrow vectors wrapped in Spark's ArrowColumnVector (topic and queue_id
 * are constant columns of a queue's batch). A batch's buffers go back to the core when the batch
 * is closed: by the next {@link #next}, by {@link #close}, or by Spark.
 *
 * <p>Every offset of a range is read or reported as lost ({@code failOnDataLoss}), as the
 * Python source's {@code _read_range} does: the store's cleaner may remove segments while the
 * task runs.
 */
final class ColumnarReader implements PartitionReader<ColumnarBatch> {
  /** Rows per batch. */
  static final int BATCH_ROWS = 64 * 1024;

  private static final BufferAllocator ROOT = new RootAllocator();
  /**
   * Whether bodies cross as binary_view vectors pointing into the mapped segments (no copy):
   * only when asked ({@code -Drmqstore.jni.bodyView=true}) and when this Spark's
   * ArrowColumnVector reads them (Spark 4.3 does). By default the core copies them into the
   * batch: Spark then never touches a mapping itself, so a segment truncated under the read
   * fails the task with the store's StoreIOException (the native reads guard their faults),
   * where a view read after the truncation faults in Java, an InternalError that Spark takes
   * for fatal and ends the JVM with.
   */
  static final boolean BODY_VIEW =
      Boolean.getBoolean("rmqstore.jni.bodyView") && readsBinaryView();

  private final ReadOptions opts;
  private final StructType schema;
  private final QueueRange[] ranges;
  private final int mask;
  private final BufferAllocator allocator;
  private final StoreHandle store;
  private final RowConditions conditions;
  private final long[] out = new long[6];
  private int index;
  private long offset;
  private ColumnarBatch current;

  ColumnarReader(
      ReadOptions opts, StructType schema, RangesPartition partition, RowConditions conditions) {
    this.opts = opts;
    this.conditions = conditions;
    this.schema = schema;
    this.ranges = partition.ranges;
    int m = 0;
    for (StructField f : schema.fields()) {
      m |= Columns.bit(f.name());
    }
    this.mask = m;
    this.allocator = ROOT.newChildAllocator("rmqstore-read", 0, Long.MAX_VALUE);
    StoreHandle handle;
    try {
      handle = new StoreHandle(opts);
    } catch (RuntimeException e) {
      allocator.close();
      throw e;
    }
    this.store = handle;
    this.index = 0;
    this.offset = ranges.length > 0 ? ranges[0].start : 0;
  }

  private static boolean readsBinaryView() {
    try (BufferAllocator a = new RootAllocator();
        ViewVarBinaryVector v = new ViewVarBinaryVector("probe", a)) {
      new ArrowColumnVector(v).close();
      return true;
    } catch (UnsupportedOperationException e) {
      return false;
    }
  }

  @Override
  public boolean next() {
    closeCurrent();
    while (index < ranges.length) {
      QueueRange r = ranges[index];
      if (offset >= r.end) {
        index++;
        if (index < ranges.length) {
          offset = ranges[index].start;
        }
        continue;
      }
      long low = Planner.readableLow(store.id, r.topic, r.queueId, r.end);
      if (offset < low) {
        offset = Planner.dataLoss(opts, r.topic, r.queueId, offset, Math.min(low, r.end));
        continue;
      }
      int max = (int) Math.min(BATCH_ROWS, r.end - offset);
      VectorSchemaRoot root = null;
      int rows;
      ArrowArray array = ArrowArray.allocateNew(allocator);
      ArrowSchema arrowSchema = ArrowSchema.allocateNew(allocator);
      boolean handedOver = false;
      try {
        rows = read(r, max, array, arrowSchema);
        if (rows > 0 && mask != 0) {
          // The import takes both structs over (and closes them, also when it fails).
          handedOver = true;
          root = Data.importVectorSchemaRoot(allocator, array, arrowSchema, null);
        }
      } finally {
        if (!handedOver) {
          // Not filled (no rows, no columns, or an error): release() does nothing then.
          array.release();
          array.close();
          arrowSchema.release();
          arrowSchema.close();
        }
      }
      // The units gone over: those whose record was read or passed over by its tag code.
      long units = out[5];
      long first = out[3];
      long last = out[4];
      if (units == 0) {
        if (Planner.readableLow(store.id, r.topic, r.queueId, r.end) > offset) {
          continue; // removed since the check above: reported at the loop's top
        }
        long high = NativeStore.queueOffsets(store.id, r.topic, r.queueId)[1];
        throw new RmqStoreException(
            "rmqstore data source: " + r.topic + "/" + r.queueId + " has no message at offset "
                + offset + " (readable offsets [" + low + ", " + high + ")), planned up to "
                + r.end);
      }
      try {
        checkOffsets(r, first, last, units);
      } catch (RuntimeException e) {
        if (root != null) {
          root.close();
        }
        throw e;
      }
      offset = last + 1;
      if (rows == 0) {
        continue; // every row of these units was filtered out (no columns were exported)
      }
      current = assemble(r, rows, root);
      return true;
    }
    return false;
  }

  /**
   * The batch holds offsets first..last: units whose records were removed are passed over by
   * the core, and removed records are always the queue's first ones (units are in commitlog
   * order), so a gap can only precede the batch's first row.
   */
  private void checkOffsets(QueueRange r, long first, long last, long rows) {
    if (last - first + 1 != rows) {
      throw new RmqStoreException(
          "rmqstore data source: " + r.topic + "/" + r.queueId + ": the read from offset " + offset
              + " returned " + rows + " rows for offsets " + first + " to " + last);
    }
    if (first != offset) {
      long phyMin = NativeStore.queueOffsets(store.id, r.topic, r.queueId)[2];
      if (NativeStore.commitLogOffset(store.id, r.topic, r.queueId, first - 1) < phyMin) {
        Planner.dataLoss(opts, r.topic, r.queueId, offset, first);
        return;
      }
      throw new RmqStoreException(
          "rmqstore data source: " + r.topic + "/" + r.queueId + ": the read of offsets from "
              + offset + " returned none before " + first + ", though their messages are not"
              + " below the commitlog's first offset " + phyMin);
    }
  }

  private ColumnarBatch assemble(QueueRange r, int rows, VectorSchemaRoot root) {
    StructField[] fields = schema.fields();
    ColumnVector[] columns = new ColumnVector[fields.length];
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      if (name.equals("topic")) {
        ConstantColumnVector c = new ConstantColumnVector(rows, DataTypes.StringType);
        c.setUtf8String(UTF8String.fromString(r.topic));
        columns[i] = c;
      } else if (name.equals("queue_id")) {
        ConstantColumnVector c = new ConstantColumnVector(rows, DataTypes.IntegerType);
        c.setInt(r.queueId);
        columns[i] = c;
      } else {
        columns[i] = new ArrowColumnVector(root.getVector(name));
      }
    }
    return new ColumnarBatch(columns, rows);
  }

  /**
   * Reads from {@code offset} into the C Data structs; {@code out} then holds the next offset,
   * the rows' first and last offsets, and the first and last offsets and the count of the units
   * gone over (without conditions, those of the rows).
   */
  private int read(QueueRange r, int max, ArrowArray array, ArrowSchema arrowSchema) {
    if (conditions.isEmpty()) {
      int rows =
          NativeStore.readBatch(
              store.id,
              r.topic,
              r.queueId,
              offset,
              max,
              mask,
              BODY_VIEW,
              array.memoryAddress(),
              arrowSchema.memoryAddress(),
              out);
      out[3] = out[1];
      out[4] = out[2];
      out[5] = rows;
      return rows;
    }
    return NativeStore.readFiltered(
        store.id,
        r.topic,
        r.queueId,
        offset,
        max,
        mask,
        BODY_VIEW,
        conditions.byTags(),
        conditions.tags(),
        conditions.untagged(),
        conditions.minMs(),
        conditions.maxMs(),
        array.memoryAddress(),
        arrowSchema.memoryAddress(),
        out);
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  private void closeCurrent() {
    if (current != null) {
      current.close();
      current = null;
    }
  }

  @Override
  public void close() {
    try {
      closeCurrent();
    } finally {
      try {
        store.close();
      } finally {
        allocator.close();
      }
    }
  }
}
