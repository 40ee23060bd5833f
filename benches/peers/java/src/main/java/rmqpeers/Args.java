package rmqpeers;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.stream.Stream;

/**
 * What every peer program shares: its arguments, the message bodies, the JSON line of rates and
 * the clean-up of its folders.
 *
 * <p>Arguments: {@code DIR N128 N1K WARMUP}: the temp folder the program makes its fresh
 * folders under (and removes), the number of messages of 128 B and of 1 KiB bodies a timed
 * phase writes and reads, and the number of untimed messages of each phase first (the JIT's
 * warm-up, run on a queue of its own that is removed before the timed phases).
 */
final class Args {
    final Path dir;
    final int n128;
    final int n1k;
    final int warmup;

    private Args(Path dir, int n128, int n1k, int warmup) {
        this.dir = dir;
        this.n128 = n128;
        this.n1k = n1k;
        this.warmup = warmup;
    }

    static Args parse(String name, String[] args) {
        if (args.length != 4) {
            System.err.println("usage: " + name + " DIR N128 N1K WARMUP");
            System.exit(2);
        }
        Path dir = Path.of(args[0]);
        if (!Files.isDirectory(dir)) {
            System.err.println(name + ": " + dir + " is not a folder");
            System.exit(2);
        }
        return new Args(
                dir,
                Integer.parseInt(args[1]),
                Integer.parseInt(args[2]),
                Integer.parseInt(args[3]));
    }

    int count(int size) {
        return size == 128 ? n128 : n1k;
    }

    /** A body of {@code size} bytes, the same pattern every peer program writes. */
    static byte[] body(int size) {
        byte[] b = new byte[size];
        for (int i = 0; i < size; i++) {
            b[i] = (byte) ('a' + i % 26);
        }
        return b;
    }

    /** A fresh folder under the temp folder. */
    static Path fresh(Path dir, String name) {
        try {
            return Files.createTempDirectory(dir, name);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static void remove(Path folder) {
        if (!Files.exists(folder)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(folder)) {
            for (Path p : (Iterable<Path>) walk.sorted(Comparator.reverseOrder())::iterator) {
                Files.delete(p);
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Messages a second. */
    static double rate(long messages, long nanos) {
        return messages * 1e9 / Math.max(1, nanos);
    }

    /** One JSON line: {"peer": ..., key: rate, ...} (keys and peer names are plain ASCII). */
    static String json(String peer, Map<String, Object> rates) {
        StringBuilder sb = new StringBuilder("{\"peer\": \"").append(peer).append('"');
        for (Map.Entry<String, Object> e : rates.entrySet()) {
            sb.append(", \"").append(e.getKey()).append("\": ");
            Object v = e.getValue();
            if (v instanceof String) {
                sb.append('"').append(v).append('"');
            } else {
                sb.append(v);
            }
        }
        return sb.append('}').toString();
    }

    static Map<String, Object> rates() {
        return new LinkedHashMap<>();
    }

    /** The read a consumer would do saw every message and every body byte it was given. */
    static void expect(String what, long got, long want, long bytes, long wantBytes) {
        if (got != want || bytes != wantBytes) {
            throw new IllegalStateException(
                    what + ": read " + got + " messages / " + bytes + " bytes, wrote " + want
                            + " / " + wantBytes);
        }
    }
}
