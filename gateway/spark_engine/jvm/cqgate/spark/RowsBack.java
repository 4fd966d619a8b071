package cqgate.spark;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * A real-time query's rows back to the server that started it: a connection a task, which
 * begins with a line (the query's token, the partition, the epoch) and goes on as an Arrow
 * stream of the query's rows, a batch within a millisecond of its first row, or every 4,096.
 */
public class RowsBack extends ForeachWriter<Row> {
    static final int ROWS = 4096;
    static final long QUIET_NS = 1_000_000L;
    final String host; final int port; final String token; final String schemaJson;
    transient Socket socket; transient OutputStream out;
    transient ArrowWriter arrow; transient ArrowStreamWriter stream;
    transient ExpressionEncoder.Serializer<Row> serializer;
    transient int count; transient Thread flusher; transient volatile boolean closed;
    transient IOException failed;

    public RowsBack(String host, int port, String token, String schemaJson) {
        this.host = host; this.port = port; this.token = token; this.schemaJson = schemaJson;
    }

    public boolean open(long partitionId, long epochId) {
        try {
            StructType schema = (StructType) DataType.fromJson(schemaJson);
            serializer = ExpressionEncoder.apply(schema).createSerializer();
            socket = new Socket(host, port);
            socket.setTcpNoDelay(true);
            out = new BufferedOutputStream(socket.getOutputStream(), 1 << 16);
            out.write((token + " " + partitionId + " " + epochId + "\n").getBytes(StandardCharsets.UTF_8));
            arrow = ArrowWriter.create(schema, "UTC", true, false);
            stream = new ArrowStreamWriter(arrow.root(), null, out);
            stream.start();
            out.flush();
        } catch (IOException e) {
            throw new RuntimeException("cannot reach the server for a real-time query's rows", e);
        }
        flusher = new Thread(this::flushing, "cqgate-rows-back");
        flusher.setDaemon(true);
        flusher.start();
        return true;
    }

    void flushing() {
        while (!closed) {
            try { Thread.sleep(1); } catch (InterruptedException e) { return; }
            synchronized (this) {
                if (count > 0 && !closed) send();
            }
        }
    }

    synchronized void send() {
        try {
            arrow.finish();
            stream.writeBatch();
            out.flush();
        } catch (IOException e) {
            failed = e;
        }
        arrow.reset();
        count = 0;
    }

    public synchronized void process(Row row) {
        if (failed != null) throw new RuntimeException("the server closed a real-time query's rows", failed);
        arrow.write(serializer.apply(row));
        if (++count >= ROWS) send();
    }

    public void close(Throwable error) {
        synchronized (this) {
            if (count > 0 && error == null) send();
            closed = true;
        }
        if (flusher != null) flusher.interrupt();
        try {
            if (stream != null) stream.end();
            if (socket != null) socket.close();
        } catch (IOException e) {
            // the server is gone: nothing left to tell it
        }
        if (arrow != null) arrow.root().close();
    }
}
