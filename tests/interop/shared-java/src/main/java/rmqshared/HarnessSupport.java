package rmqshared;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.MessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * What both interop harnesses do alike (rmqinterop.Harness, RocketMQ's store on its own, and
 * rmqbroker.BrokerHarness, a broker with clients): their options, running a command and halting,
 * their JSON lines on standard output, the store settings they take from the options, the
 * message fields they print, waiting for dispatch. Compiled into each harness against that
 * harness's RocketMQ version.
 */
public final class HarnessSupport {
    /**
     * File descriptor 1, whatever System.out is (the broker harness sends RocketMQ's prints to
     * stderr), flushed at every line; the JSON is ASCII.
     */
    private static final PrintStream OUT =
        new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.US_ASCII);

    private HarnessSupport() {
    }

    /**
     * Runs a command, then {@code after} whatever happened, and halts the JVM with the command's
     * exit code (3, after the stack trace, when it throws): RocketMQ's threads are not all
     * daemons, so the JVM leaves without waiting for them.
     */
    public static void runAndHalt(Callable<Integer> command, Runnable after) {
        int rc;
        try {
            rc = command.call();
        } catch (Throwable t) {
            t.printStackTrace();
            rc = 3;
        } finally {
            after.run();
        }
        Runtime.getRuntime().halt(rc);
    }

    /** Prints one JSON object as a line of standard output. */
    public static void print(Map<String, Object> line) {
        OUT.println(Json.write(line));
    }

    /** A query's answer as one line: kind, topic, what was looked up, the commitlog offsets. */
    public static void printOffsets(String kind, String topic, String field, String value, List<Object> offsets) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", kind);
        o.put("topic", topic);
        o.put(field, value);
        o.put("offsets", offsets);
        print(o);
    }

    /** The command line: options ({@code --name value}, anywhere) and the other arguments in order. */
    public static final class Args {
        private final Map<String, String> opts = new LinkedHashMap<>();
        /** The arguments that are not options, in order (the command first). */
        public final List<String> rest = new ArrayList<>();

        public static Args parse(String[] args) {
            Args a = new Args();
            for (int i = 0; i < args.length; i++) {
                if (args[i].startsWith("--")) {
                    a.opts.put(args[i].substring(2), args[++i]);
                } else {
                    a.rest.add(args[i]);
                }
            }
            return a;
        }

        public long opt(String name, long dflt) {
            String v = opts.get(name);
            return v == null ? dflt : Long.parseLong(v);
        }

        public String opt(String name, String dflt) {
            return opts.getOrDefault(name, dflt);
        }
    }

    /**
     * The store folder and the sizes of --commitlog-size, --cq-size, --hash-slots and --index-num
     * (RocketMQ's defaults without them), and no compaction store (5.x only): only the commitlog,
     * consume queues and index files.
     */
    public static void configureStore(MessageStoreConfig cfg, String root, Args args) throws Exception {
        cfg.setStorePathRootDir(root);
        cfg.setStorePathCommitLog(Paths.get(root, "commitlog").toString());
        cfg.setMappedFileSizeCommitLog((int) args.opt("commitlog-size", 1024L * 1024 * 1024));
        cfg.setMappedFileSizeConsumeQueue((int) args.opt("cq-size", 300_000L * 20));
        cfg.setMaxHashSlotNum((int) args.opt("hash-slots", 5_000_000));
        cfg.setMaxIndexNum((int) args.opt("index-num", 20_000_000));
        try {
            MessageStoreConfig.class.getMethod("setEnableCompaction", boolean.class).invoke(cfg, false);
        } catch (NoSuchMethodException absentIn4x) {
            // 4.9.x has no compaction store
        }
    }

    /** Waits until the store has dispatched everything its commitlog holds (at most 60 s). */
    public static void waitDispatched(MessageStore store) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60_000;
        while (store.dispatchBehindBytes() > 0) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("dispatch still behind by " + store.dispatchBehindBytes());
            }
            Thread.sleep(5);
        }
    }

    /** ip:port, an IPv6 address in brackets. */
    public static String hostText(SocketAddress addr) {
        InetSocketAddress a = (InetSocketAddress) addr;
        String ip = a.getAddress().getHostAddress();
        return (ip.contains(":") ? "[" + ip + "]" : ip) + ":" + a.getPort();
    }

    /** The fields of a message both harnesses print (each adds its own), properties sorted. */
    public static Map<String, Object> describe(MessageExt m) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("topic", m.getTopic());
        o.put("queueId", (long) m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("storeSize", (long) m.getStoreSize());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("sysFlag", (long) m.getSysFlag());
        o.put("flag", (long) m.getFlag());
        o.put("bodyCRC", (long) m.getBodyCRC());
        o.put("reconsumeTimes", (long) m.getReconsumeTimes());
        o.put("bornHost", hostText(m.getBornHost()));
        o.put("storeHost", hostText(m.getStoreHost()));
        o.put("msgId", m.getMsgId());
        Map<String, Object> props = new TreeMap<>();
        if (m.getProperties() != null) {
            props.putAll(m.getProperties());
        }
        o.put("properties", props);
        o.put("body", m.getBody() == null ? new byte[0] : m.getBody());
        return o;
    }

    /** The message's KEYS, split at KEY_SEPARATOR, empty ones left out. */
    public static List<String> keys(MessageExt m) {
        List<String> out = new ArrayList<>();
        String keys = m.getKeys();
        if (keys != null) {
            for (String k : keys.split(MessageConst.KEY_SEPARATOR)) {
                if (!k.isEmpty()) {
                    out.add(k);
                }
            }
        }
        return out;
    }
}
