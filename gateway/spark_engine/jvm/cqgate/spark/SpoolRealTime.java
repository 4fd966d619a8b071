package cqgate.spark;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One stream's spool (gateway/clearinghouse/spool.py) as a source for Spark's real-time mode:
 * one task reads the spool's files in order as they appear, each file's tuples and then its
 * watermark as a row of its own (``__punct`` true, every column null but the event time's),
 * as the Python source ``cqgate_spool`` gives them to micro-batches.
 *
 * <p>Options: ``path`` (the spool), ``schema`` (the stream's columns read, a DDL string),
 * ``ts_column``, ``reader`` (whose commits these are; none: never commits). An offset is
 * {"seq": n, "row": r, "spool": path}: files up to n read, and the first r rows of file n + 1
 * (real-time mode ends a batch wherever its time runs out). A file lacking a column (written
 * before the column was added to the stream) gives it as NULLs.
 */
public class SpoolRealTime implements TableProvider, DataSourceRegister {
    static final String PUNCT = "__punct";
    static final String WATERMARK_KEY = "cqgate.watermark";
    static final Pattern FILE = Pattern.compile("^(\\d{16})\\.arrow$");
    static final Pattern READER = Pattern.compile("^[A-Za-z0-9_.-]+$");

    public String shortName() { return "cqgate_spool_real_time"; }

    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return StructType.fromDDL(options.get("schema")).add(PUNCT, DataTypes.BooleanType);
    }

    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
        return new SpoolTable(schema);
    }

    static class SpoolTable implements Table, SupportsRead {
        final StructType schema;
        SpoolTable(StructType schema) { this.schema = schema; }
        public String name() { return "cqgate_spool_real_time"; }
        public StructType schema() { return schema; }
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.MICRO_BATCH_READ);
        }
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new SpoolScan(new Where(schema, options.get("path"), options.get("ts_column"),
                                           options.get("reader")));
        }
    }

    /** What every part of the source knows: the schema, the spool, the event time, the reader. */
    static class Where implements Serializable {
        final StructType schema; final String path; final String ts; final String reader;
        Where(StructType schema, String path, String ts, String reader) {
            this.schema = schema; this.path = path; this.ts = ts; this.reader = reader;
        }
    }

    static class SpoolScan implements ScanBuilder, Scan {
        final Where where;
        SpoolScan(Where where) { this.where = where; }
        public Scan build() { return this; }
        public StructType readSchema() { return where.schema; }
        public MicroBatchStream toMicroBatchStream(String checkpoint) { return new SpoolStream(where); }
    }

    static class SpoolOffset extends Offset implements PartitionOffset {
        final long seq; final long row; final String path;
        SpoolOffset(long seq, long row, String path) { this.seq = seq; this.row = row; this.path = path; }
        public String json() {
            return "{\"seq\":" + seq + ",\"row\":" + row + ",\"spool\":\""
                + path.replace("\\", "\\\\").replace("\"", "\\\"") + "\"}";
        }
    }

    static long field(String json, String name) {
        Matcher m = Pattern.compile("\"" + name + "\"\\s*:\\s*(\\d+)").matcher(json);
        return m.find() ? Long.parseLong(m.group(1)) : 0;
    }

    static class SpoolPartition implements InputPartition {
        final long seq; final long row; final long last;     // last < 0: no end (real time)
        SpoolPartition(long seq, long row, long last) { this.seq = seq; this.row = row; this.last = last; }
    }

    static class SpoolStream implements MicroBatchStream, SupportsRealTimeMode {
        final Where where;
        SpoolStream(Where where) { this.where = where; }

        public Offset initialOffset() {
            return new SpoolOffset(committed(where.path, where.reader), 0, where.path);
        }
        public Offset deserializeOffset(String json) {
            return new SpoolOffset(field(json, "seq"), field(json, "row"), where.path);
        }
        /** Files the reader has read whole may go (the spool deletes what every reader has). */
        public void commit(Offset end) {
            if (where.reader == null || !READER.matcher(where.reader).matches()) return;
            File target = new File(where.path, "committed." + where.reader);
            File tmp = new File(where.path, ".committed." + where.reader + ".tmp");
            try {
                Files.write(tmp.toPath(), Long.toString(((SpoolOffset) end).seq)
                            .getBytes(StandardCharsets.UTF_8));
                Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.ATOMIC_MOVE,
                           StandardCopyOption.REPLACE_EXISTING);
            } catch (IOException e) {
                throw new RuntimeException("cannot commit to spool " + where.path, e);
            }
        }
        public void stop() {}
        public Offset latestOffset() {
            long[] s = sequences(where.path);
            return new SpoolOffset(s.length == 0 ? 0 : s[s.length - 1], 0, where.path);
        }
        public InputPartition[] planInputPartitions(Offset start, Offset end) {
            SpoolOffset a = (SpoolOffset) start;
            return new InputPartition[] {new SpoolPartition(a.seq, a.row, ((SpoolOffset) end).seq)};
        }
        public InputPartition[] planInputPartitions(Offset start) {
            SpoolOffset a = (SpoolOffset) start;
            return new InputPartition[] {new SpoolPartition(a.seq, a.row, -1)};
        }
        public Offset mergeOffsets(PartitionOffset[] offsets) { return (SpoolOffset) offsets[0]; }
        public PartitionReaderFactory createReaderFactory() { return new Factory(where); }
    }

    static long committed(String path, String reader) {
        if (reader == null) return 0;
        try {
            return Long.parseLong(new String(Files.readAllBytes(
                new File(path, "committed." + reader).toPath()), StandardCharsets.UTF_8).trim());
        } catch (IOException | NumberFormatException e) {
            return 0;
        }
    }

    static long[] sequences(String path) {
        String[] names = new File(path).list();
        if (names == null) return new long[0];
        return Arrays.stream(names).map(FILE::matcher).filter(Matcher::matches)
            .mapToLong(m -> Long.parseLong(m.group(1))).sorted().toArray();
    }

    static class Factory implements PartitionReaderFactory {
        final Where where;
        Factory(Where where) { this.where = where; }
        public PartitionReader<InternalRow> createReader(InputPartition p) {
            return new Reader(where, (SpoolPartition) p);
        }
    }

    static class Reader implements SupportsRealTimeRead<InternalRow> {
        static final long POLL_MS = 1;      // how often a task looks for the spool's next file
        final Where where; final int tsIndex; final long last;
        final BufferAllocator alloc = new RootAllocator();
        long seq;                  // the file whose rows are being given (the last read whole)
        long skip;                 // rows of the next file given before this batch
        List<InternalRow> rows = new ArrayList<>();
        int at = 0;                // rows of file seq given
        InternalRow current;

        Reader(Where where, SpoolPartition p) {
            this.where = where; this.last = p.last; this.seq = p.seq; this.skip = p.row;
            this.tsIndex = where.ts == null ? -1 : where.schema.fieldIndex(where.ts);
        }

        /** File seq + 1, if it is there: its tuples, then its watermark's row. */
        boolean load() throws IOException {
            long next = seq + 1;
            if (last >= 0 && next > last) return false;
            File f = new File(where.path, String.format("%016d.arrow", next));
            if (!f.exists()) return false;
            StructType schema = where.schema;
            List<InternalRow> loaded = new ArrayList<>();
            try (FileInputStream in = new FileInputStream(f);
                 ArrowFileReader r = new ArrowFileReader(in.getChannel(), alloc)) {
                VectorSchemaRoot root = r.getVectorSchemaRoot();
                while (r.loadNextBatch()) {
                    int n = root.getRowCount();
                    ColumnVector[] cols = new ColumnVector[schema.size()];
                    for (int i = 0; i < schema.size(); i++) {
                        StructField field = schema.fields()[i];
                        FieldVector v = root.getVector(field.name());
                        if (v != null) {
                            cols[i] = new ArrowColumnVector(v);
                            continue;
                        }
                        OnHeapColumnVector c = new OnHeapColumnVector(Math.max(n, 1), field.dataType());
                        if (field.name().equals(PUNCT)) {
                            for (int k = 0; k < n; k++) c.putBoolean(k, false);
                        } else {
                            c.putNulls(0, Math.max(n, 1));
                        }
                        cols[i] = c;
                    }
                    ColumnarBatch batch = new ColumnarBatch(cols, n);
                    for (int k = 0; k < n; k++) loaded.add(batch.getRow(k).copy());
                }
                Map<String, String> meta = root.getSchema().getCustomMetadata();
                String mark = meta == null ? null : meta.get(WATERMARK_KEY);
                if (mark != null && tsIndex >= 0) {
                    Object[] values = new Object[schema.size()];
                    values[tsIndex] = Long.parseLong(mark);
                    values[schema.fieldIndex(PUNCT)] = true;
                    loaded.add(new GenericInternalRow(values));
                }
            }
            rows = loaded;
            seq = next;
            at = (int) Math.min(skip, rows.size());
            skip = 0;
            return true;
        }

        boolean step() throws IOException {
            while (at >= rows.size()) {
                if (!load()) return false;
            }
            current = rows.get(at++);
            return true;
        }

        public boolean next() throws IOException { return step(); }
        public InternalRow get() { return current; }

        public RecordStatus nextWithTimeout(Long timeoutMs) throws IOException {
            long until = System.currentTimeMillis() + timeoutMs;
            while (!step()) {
                if (System.currentTimeMillis() >= until) {
                    return RecordStatus.newStatusWithoutArrivalTime(false);
                }
                try {
                    Thread.sleep(POLL_MS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return RecordStatus.newStatusWithoutArrivalTime(false);
                }
            }
            return RecordStatus.newStatusWithoutArrivalTime(true);
        }

        public PartitionOffset getOffset() {
            return at >= rows.size() ? new SpoolOffset(seq, 0, where.path)
                                     : new SpoolOffset(seq - 1, at, where.path);
        }

        public void close() { alloc.close(); }
    }
}
