package rmqinterop;

import static rmqshared.HarnessSupport.print;

import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import rmqshared.HarnessSupport;

/**
 * Delay levels through RocketMQ 4.9.x's own {@code ScheduleMessageService}, which lives in its
 * store jar and is started by {@code DefaultMessageStore.start} (handleScheduleMessageService,
 * unless the broker role is SLAVE) and stopped, with its {@code config/delayOffset.json}
 * persisted, by {@code DefaultMessageStore.shutdown}:
 *
 * <pre>
 *   deliver STORE          load + start the store; RocketMQ's service delivers every due delayed
 *                          message until each schedule queue's progress reaches its max (or
 *                          --deliver-count N were delivered, or --timeout-ms passed); shut down
 *   bench-deliver STORE N  N messages of delay level 1 written (the service stopped), the store
 *                          reopened once they are all due: the service's delivery rate
 * </pre>
 *
 * The service is reached through reflection: 5.x stores have none (it moved into the broker).
 */
final class ScheduleCommands {
    static final String SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";

    private final Harness h;

    ScheduleCommands(Harness h) {
        this.h = h;
    }

    /** The store's ScheduleMessageService (4.9.x), or null (5.x). */
    static Object scheduleService(DefaultMessageStore store) throws Exception {
        Method get;
        try {
            get = DefaultMessageStore.class.getMethod("getScheduleMessageService");
        } catch (NoSuchMethodException absentIn5x) {
            return null;
        }
        return get.invoke(store);
    }

    /** Stops the schedule service (it persists delayOffset.json); nothing is delivered after. */
    static void stopScheduleService(DefaultMessageStore store) throws Exception {
        Object svc = scheduleService(store);
        if (svc != null) {
            svc.getClass().getMethod("shutdown").invoke(svc);
        }
    }

    private static Object requireService(DefaultMessageStore store) throws Exception {
        Object svc = scheduleService(store);
        if (svc == null) {
            throw new IllegalStateException("this RocketMQ store has no ScheduleMessageService (5.x: the broker has it)");
        }
        return svc;
    }

    /** Level -> the service's progress (offsetTable, through buildRunningStats); absent levels left out. */
    static Map<Integer, Long> progress(Object svc) throws Exception {
        HashMap<String, String> stats = new HashMap<>();
        svc.getClass().getMethod("buildRunningStats", HashMap.class).invoke(svc, stats);
        Map<Integer, Long> out = new TreeMap<>();
        for (Map.Entry<String, String> e : stats.entrySet()) {
            String k = e.getKey();
            int us = k.lastIndexOf('_');
            if (k.startsWith("scheduleMessageOffset_")) {
                out.put(Integer.parseInt(k.substring(us + 1)), Long.parseLong(e.getValue().split(",")[0]));
            }
        }
        return out;
    }

    static int maxDelayLevel(Object svc) throws Exception {
        return (Integer) svc.getClass().getMethod("getMaxDelayLevel").invoke(svc);
    }

    /** Per level: the service's offset (0 when it has none) and the schedule queue's max offset. */
    private Map<String, Object> levels(Object svc) throws Exception {
        Map<Integer, Long> p = progress(svc);
        Map<String, Object> out = new LinkedHashMap<>();
        for (int level = 1; level <= maxDelayLevel(svc); level++) {
            Map<String, Object> l = new LinkedHashMap<>();
            l.put("offset", p.getOrDefault(level, 0L));
            l.put("inTable", p.containsKey(level));
            l.put("maxOffset", h.store.getMaxOffsetInQueue(SCHEDULE_TOPIC, level - 1));
            out.put(String.valueOf(level), l);
        }
        return out;
    }

    private void printProgress(String when, Object svc) throws Exception {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "scheduleProgress");
        o.put("when", when);
        o.put("levels", levels(svc));
        print(o);
    }

    /** Every delivered message so far: the levels' progress minus where they started. */
    private static long delivered(Map<Integer, Long> start, Map<Integer, Long> now) {
        long n = 0;
        for (Map.Entry<Integer, Long> e : now.entrySet()) {
            n += e.getValue() - start.getOrDefault(e.getKey(), 0L);
        }
        return n;
    }

    /** Every level's progress at its schedule queue's max offset. */
    private boolean allDelivered(Object svc) throws Exception {
        Map<Integer, Long> p = progress(svc);
        for (int level = 1; level <= maxDelayLevel(svc); level++) {
            if (p.getOrDefault(level, 0L) < h.store.getMaxOffsetInQueue(SCHEDULE_TOPIC, level - 1)) {
                return false;
            }
        }
        return true;
    }

    /** (topic, queue) -> max offset, every queue but the schedule topic's. */
    private Map<String, Map<Integer, Long>> realQueueMaxima() throws Exception {
        Map<String, Map<Integer, Long>> out = new TreeMap<>();
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : h.store.getConsumeQueueTable().entrySet()) {
            if (t.getKey().equals(SCHEDULE_TOPIC)) {
                continue;
            }
            Map<Integer, Long> q = new TreeMap<>();
            for (Integer qid : t.getValue().keySet()) {
                q.put(qid, h.store.getMaxOffsetInQueue(t.getKey(), qid));
            }
            out.put(t.getKey(), q);
        }
        return out;
    }

    /** Prints every message of every real queue past the offsets it had before (kind "delivered"). */
    static long printNewMessages(DefaultMessageStore store, Map<String, Map<Integer, Long>> before, String skipTopic,
        String kind) throws Exception {
        long n = 0;
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : new TreeMap<>(store.getConsumeQueueTable()).entrySet()) {
            String topic = t.getKey();
            if (topic.equals(skipTopic) || topic.equals(SCHEDULE_TOPIC)) {
                continue;
            }
            for (Integer qid : new TreeMap<>(t.getValue()).keySet()) {
                long from = before.getOrDefault(topic, Map.of()).getOrDefault(qid, 0L);
                long max = store.getMaxOffsetInQueue(topic, qid);
                long offset = Math.max(from, store.getMinOffsetInQueue(topic, qid));
                while (offset < max) {
                    GetMessageResult r = store.getMessage("interop-deliver", topic, qid, offset, 32, null);
                    if (r == null || r.getMessageBufferList().isEmpty()) {
                        throw new IllegalStateException("getMessage stopped at " + topic + "/" + qid + "@" + offset);
                    }
                    try {
                        for (ByteBuffer buf : r.getMessageBufferList()) {
                            MessageExt m = Harness.decode(buf.slice());
                            Map<String, Object> o = Harness.describe(m);
                            o.put("kind", kind);
                            print(o);
                            n++;
                        }
                        offset = r.getNextBeginOffset();
                    } finally {
                        r.release();
                    }
                }
            }
        }
        return n;
    }

    static String delayOffsetJson(String root) throws Exception {
        Path p = Paths.get(root, "config", "delayOffset.json");
        return Files.exists(p) ? new String(Files.readAllBytes(p), StandardCharsets.UTF_8) : null;
    }

    int deliver() throws Exception {
        h.load(new MessageStoreConfig());
        Object svc = requireService(h.store);
        Map<Integer, Long> start = progress(svc); // load() read delayOffset.json (corrected to the queues)
        printProgress("loaded", svc);
        Map<String, Map<Integer, Long>> before = realQueueMaxima();
        long want = h.args.opt("deliver-count", -1);
        long deadline = System.currentTimeMillis() + h.args.opt("timeout-ms", 60_000);
        h.store.start(); // starts the schedule service (handleScheduleMessageService)
        boolean done;
        while (true) {
            done = want >= 0 ? delivered(start, progress(svc)) >= want : allDelivered(svc);
            if (done || System.currentTimeMillis() > deadline) {
                break;
            }
            Thread.sleep(5);
        }
        if (h.args.opt("stop-service-first", 0) != 0) {
            stopScheduleService(h.store);
        }
        HarnessSupport.waitDispatched(h.store);
        printProgress(done ? "delivered" : "timedOut", svc);
        long n = printNewMessages(h.store, before, null, "delivered");
        h.close(); // persists delayOffset.json
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "delayOffset");
        o.put("json", delayOffsetJson(h.root));
        o.put("deliveredMessages", n);
        print(o);
        return done ? 0 : 1;
    }

    int benchDeliver(int n) throws Exception {
        // 1: the backlog, written with the service stopped (delay level 1 of --delay-levels).
        h.load(new MessageStoreConfig());
        h.store.start();
        stopScheduleService(h.store);
        int size = (int) h.args.opt("body-size", 100);
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'd');
        InetSocketAddress bornHost = Harness.parseHost("10.0.0.1:4000");
        long wrote = System.nanoTime();
        for (int i = 0; i < n; i++) {
            Map<String, String> props = new LinkedHashMap<>();
            props.put(MessageConst.PROPERTY_TAGS, "TagA");
            props.put(MessageConst.PROPERTY_DELAY_TIME_LEVEL, "1");
            PutMessageResult r = h.putInner("BenchTopic", i & 3, 0, body, props, System.currentTimeMillis(), bornHost);
            if (!r.isOk()) {
                throw new IllegalStateException("put " + i + ": " + r.getPutMessageStatus());
            }
        }
        long lastPut = System.currentTimeMillis();
        HarnessSupport.waitDispatched(h.store);
        double writeSeconds = (System.nanoTime() - wrote) / 1e9;
        h.store.shutdown();
        // 2: everything due (level 1's delay has passed since the last put): reopen and time.
        h.load(new MessageStoreConfig());
        Object svc = requireService(h.store);
        long due = h.store.getMaxOffsetInQueue(SCHEDULE_TOPIC, 0);
        if (due != n) {
            throw new IllegalStateException("schedule queue holds " + due + ", not " + n);
        }
        long delay = (Long) ((Map<?, ?>) readField(svc, "delayLevelTable")).get(1);
        long wait = lastPut + delay + 50 - System.currentTimeMillis();
        if (wait > 0) {
            Thread.sleep(wait);
        }
        long deadline = System.currentTimeMillis() + h.args.opt("timeout-ms", 600_000);
        long t0 = System.nanoTime();
        h.store.start();
        long first = 0;
        while (true) {
            long p = progress(svc).getOrDefault(1, 0L);
            if (first == 0 && p > 0) {
                first = System.nanoTime();
            }
            if (p >= n && h.store.dispatchBehindBytes() <= 0) {
                break;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("delivered " + p + " of " + n + " before the timeout");
            }
            Thread.sleep(1);
        }
        long t1 = System.nanoTime();
        long inQueues = 0;
        for (int q = 0; q < 4; q++) {
            inQueues += h.store.getMaxOffsetInQueue("BenchTopic", q);
        }
        h.store.shutdown();
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "benchDeliver");
        o.put("messages", (long) n);
        o.put("bodySize", (long) size);
        o.put("backlogWriteSeconds", writeSeconds);
        o.put("inRealQueues", inQueues);
        o.put("secondsFromStart", (t1 - t0) / 1e9);
        o.put("secondsFromFirstDelivery", (t1 - first) / 1e9);
        // From the first delivery seen: the service's fixed first delay (1 s) is not counted.
        o.put("messagesPerSecond", n / ((t1 - first) / 1e9));
        print(o);
        return 0;
    }

    private static Object readField(Object o, String name) throws Exception {
        java.lang.reflect.Field f = o.getClass().getDeclaredField(name);
        f.setAccessible(true);
        return f.get(o);
    }
}
