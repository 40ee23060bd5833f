package rmqpeers;

import java.nio.file.Path;
import java.util.Map;
import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.queue.ExcerptAppender;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.impl.single.SingleChronicleQueue;
import net.openhft.chronicle.queue.impl.single.SingleChronicleQueueBuilder;
import net.openhft.chronicle.wire.DocumentContext;

/**
 * Chronicle Queue (open source), one round of issue 20's peer figures: a single-threaded
 * appender writing each body as one excerpt ({@code writingDocument}, the body's bytes copied
 * into the mapped queue file), then a tailer reading every excerpt from the start
 * ({@code readingDocument}), copying each body into a reusable {@code byte[]} as a consumer
 * would. Chronicle has no batch append: an excerpt is one document.
 *
 * <p>The queue: binary wire, the builder's default roll cycle and block size, no fsync (the
 * open-source queue leaves flushing to the OS), no checksum of the excerpts. Prints one JSON line
 * {@code {"peer": "chronicle", "put_128": msg/s, "read_128": msg/s, ...}}.
 */
public final class ChronicleBench {
    private ChronicleBench() {}

    public static void main(String[] argv) {
        Args args = Args.parse("ChronicleBench", argv);
        Map<String, Object> rates = Args.rates();
        for (int size : new int[] {128, 1024}) {
            // Warm-up: the same phases on a queue of their own, untimed.
            if (args.warmup > 0) {
                Path warm = Args.fresh(args.dir, "chronicle-warm-");
                try {
                    round(warm, size, args.warmup);
                } finally {
                    Args.remove(warm);
                }
            }
            Path folder = Args.fresh(args.dir, "chronicle-");
            try {
                double[] r = round(folder, size, args.count(size));
                rates.put("put_" + size, r[0]);
                rates.put("read_" + size, r[1]);
            } finally {
                Args.remove(folder);
            }
        }
        System.out.println(Args.json("chronicle", rates));
    }

    /** Appends {@code n} bodies of {@code size} bytes, then reads them all: {put, read} msg/s. */
    static double[] round(Path folder, int size, int n) {
        byte[] body = Args.body(size);
        try (SingleChronicleQueue queue = SingleChronicleQueueBuilder.binary(folder).build()) {
            long putNanos;
            try (ExcerptAppender appender = queue.createAppender()) {
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    try (DocumentContext dc = appender.writingDocument()) {
                        dc.wire().bytes().write(body);
                    }
                }
                putNanos = System.nanoTime() - t0;
            }
            byte[] into = new byte[Math.max(size, 4096)];
            long readNanos;
            long got = 0;
            long bytes = 0;
            long check = 0;
            try (ExcerptTailer tailer = queue.createTailer()) {
                long t0 = System.nanoTime();
                while (true) {
                    try (DocumentContext dc = tailer.readingDocument()) {
                        if (!dc.isPresent()) {
                            break;
                        }
                        Bytes<?> b = dc.wire().bytes();
                        int len = (int) b.readRemaining();
                        b.read(into, 0, len);
                        check += into[len - 1];
                        bytes += len;
                        got++;
                    }
                }
                readNanos = System.nanoTime() - t0;
            }
            Args.expect("chronicle read", got, n, bytes, (long) n * size);
            if (check != (long) n * body[size - 1]) {
                throw new IllegalStateException("chronicle read: bodies differ from those written");
            }
            return new double[] {Args.rate(n, putNanos), Args.rate(n, readNanos)};
        }
    }
}
