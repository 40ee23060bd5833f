package rmqinterop;

import static rmqshared.HarnessSupport.print;

import java.net.InetSocketAddress;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.timer.TimerCheckpoint;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.store.timer.TimerMetrics;
import rmqshared.HarnessSupport;

/**
 * Timer messages through RocketMQ 5.x's own {@link TimerMessageStore} (store jar), set up as
 * {@code BrokerController.initializeMessageStore} does (checkpoint {@code config/timercheck},
 * metrics {@code config/timermetrics}, the store's setTimerMessageStore), loaded after the store
 * and started after it ({@code start(true)}: a master that dequeues):
 *
 * <pre>
 *   timer-deliver STORE --expect N   load the timerwheel, timerlog/ and timercheck on STORE, start;
 *                                    wait until N messages arrived in real queues (at most
 *                                    --timeout-ms); print them; shut down (timercheck flushed)
 *   bench-timer-enqueue STORE N      N timer messages (random delays of 60 s to 24 h) in
 *                                    rmq_sys_wheel_timer, then the timer store's enqueue into the
 *                                    wheel and log timed from start to the last one committed
 * </pre>
 *
 * Options: --timer-precision-ms (default 1000), --timer-log-size B (default 100 MiB). Compiled
 * only in the default (5.x) profile.
 */
final class TimerCommands {
    private final Harness h;
    private TimerMessageStore timer;
    private TimerCheckpoint checkpoint;

    TimerCommands(Harness h) {
        this.h = h;
    }

    int run(List<String> rest) throws Exception {
        switch (rest.get(0)) {
            case "timer-deliver":
                return deliver();
            case "bench-timer-enqueue":
                return benchEnqueue(Integer.parseInt(rest.get(2)));
            default:
                throw new IllegalArgumentException(rest.get(0));
        }
    }

    private MessageStoreConfig config() {
        MessageStoreConfig cfg = new MessageStoreConfig();
        cfg.setTimerWheelEnable(true);
        cfg.setTimerPrecisionMs((int) h.args.opt("timer-precision-ms", 1000));
        cfg.setMappedFileSizeTimerLog((int) h.args.opt("timer-log-size", 100L * 1024 * 1024));
        return cfg;
    }

    /** The store and its timer store, both loaded (the store first, as the broker does). */
    private void load() throws Exception {
        MessageStoreConfig cfg = config();
        h.load(cfg);
        checkpoint = new TimerCheckpoint(Paths.get(h.root, "config", "timercheck").toString());
        TimerMetrics metrics = new TimerMetrics(Paths.get(h.root, "config", "timermetrics").toString());
        timer = new TimerMessageStore(h.store, cfg, checkpoint, metrics, null);
        h.store.setTimerMessageStore(timer);
        if (!timer.load()) {
            throw new IllegalStateException("TimerMessageStore.load() returned false for " + h.root);
        }
    }

    private void shutdown() {
        timer.shutdown(); // the broker shuts the timer store down first
        h.close();
    }

    private Map<String, Object> state(String when) throws Exception {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "timerState");
        o.put("when", when);
        o.put("queueOffset", timer.getQueueOffset());
        o.put("commitQueueOffset", timer.getCommitQueueOffset());
        o.put("currReadTimeMs", timer.getCurrReadTimeMs());
        o.put("congestNum", timer.getAllCongestNum());
        o.put("timerQueueMax", h.store.getMaxOffsetInQueue(TimerMessageStore.TIMER_TOPIC, 0));
        return o;
    }

    private Map<String, Object> checkpointLine() {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "timerCheckpoint");
        o.put("lastReadTimeMs", checkpoint.getLastReadTimeMs());
        o.put("lastTimerLogFlushPos", checkpoint.getLastTimerLogFlushPos());
        o.put("lastTimerQueueOffset", checkpoint.getLastTimerQueueOffset());
        o.put("masterTimerQueueOffset", checkpoint.getMasterTimerQueueOffset());
        return o;
    }

    /** (topic, queue) -> max offset of every queue but the system topics'. */
    private Map<String, Map<Integer, Long>> realQueueMaxima() throws Exception {
        Map<String, Map<Integer, Long>> out = new TreeMap<>();
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : h.store.getConsumeQueueTable().entrySet()) {
            Map<Integer, Long> q = new TreeMap<>();
            for (Integer qid : t.getValue().keySet()) {
                q.put(qid, h.store.getMaxOffsetInQueue(t.getKey(), qid));
            }
            out.put(t.getKey(), q);
        }
        return out;
    }

    private long arrived(Map<String, Map<Integer, Long>> before) throws Exception {
        long n = 0;
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : h.store.getConsumeQueueTable().entrySet()) {
            String topic = t.getKey();
            if (topic.equals(TimerMessageStore.TIMER_TOPIC) || topic.equals(ScheduleCommands.SCHEDULE_TOPIC)) {
                continue;
            }
            for (Integer qid : t.getValue().keySet()) {
                n += h.store.getMaxOffsetInQueue(topic, qid)
                    - before.getOrDefault(topic, Map.of()).getOrDefault(qid, 0L);
            }
        }
        return n;
    }

    private int deliver() throws Exception {
        long expect = h.args.opt("expect", -1);
        if (expect < 0) {
            throw new IllegalArgumentException("timer-deliver needs --expect N");
        }
        load();
        print(checkpointLine());
        Map<String, Map<Integer, Long>> before = realQueueMaxima();
        h.store.start();
        timer.start(true);
        print(state("started"));
        long deadline = System.currentTimeMillis() + h.args.opt("timeout-ms", 60_000);
        boolean done;
        while (true) {
            done = arrived(before) >= expect;
            if (done || System.currentTimeMillis() > deadline) {
                break;
            }
            Thread.sleep(5);
        }
        // Anything more the timer store would deliver (duplicates) gets a moment to show.
        Thread.sleep(h.args.opt("linger-ms", 0));
        HarnessSupport.waitDispatched(h.store);
        print(state(done ? "delivered" : "timedOut"));
        long n = ScheduleCommands.printNewMessages(h.store, before, TimerMessageStore.TIMER_TOPIC, "delivered");
        shutdown();
        print(checkpointLine());
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "timerDelivered");
        o.put("deliveredMessages", n);
        print(o);
        return done ? 0 : 1;
    }

    private int benchEnqueue(int n) throws Exception {
        // 1: the messages as HookUtils.transformTimerMessage leaves them, in rmq_sys_wheel_timer.
        h.load(config());
        h.store.start();
        int precision = (int) h.args.opt("timer-precision-ms", 1000);
        int size = (int) h.args.opt("body-size", 100);
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 't');
        InetSocketAddress bornHost = Harness.parseHost("10.0.0.1:4000");
        Random random = new Random(h.args.opt("seed", 17));
        long now = System.currentTimeMillis();
        for (int i = 0; i < n; i++) {
            long deliverMs = (now + 60_000 + (long) (random.nextDouble() * 86_340_000L)) / precision * precision;
            Map<String, String> props = new LinkedHashMap<>();
            props.put(MessageConst.PROPERTY_TAGS, "TagA");
            props.put(MessageConst.PROPERTY_TIMER_OUT_MS, Long.toString(deliverMs));
            props.put(MessageConst.PROPERTY_REAL_TOPIC, "BenchTopic");
            props.put(MessageConst.PROPERTY_REAL_QUEUE_ID, Integer.toString(i & 3));
            PutMessageResult r = h.putInner(TimerMessageStore.TIMER_TOPIC, 0, 0, body, props,
                System.currentTimeMillis(), bornHost);
            if (!r.isOk()) {
                throw new IllegalStateException("put " + i + ": " + r.getPutMessageStatus());
            }
        }
        HarnessSupport.waitDispatched(h.store);
        h.store.shutdown();
        // 2: the timer store reads them from the queue into timerlog and timerwheel.
        load();
        h.store.start();
        long deadline = System.currentTimeMillis() + h.args.opt("timeout-ms", 600_000);
        long t0 = System.nanoTime();
        timer.start(true);
        while (timer.getCommitQueueOffset() < n) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("enqueued " + timer.getCommitQueueOffset() + " of " + n);
            }
            Thread.sleep(1);
        }
        long t1 = System.nanoTime();
        print(state("enqueued"));
        shutdown();
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "benchTimerEnqueue");
        o.put("messages", (long) n);
        o.put("bodySize", (long) size);
        o.put("precisionMs", (long) precision);
        o.put("seconds", (t1 - t0) / 1e9);
        o.put("messagesPerSecond", n / ((t1 - t0) / 1e9));
        print(o);
        return 0;
    }
}
