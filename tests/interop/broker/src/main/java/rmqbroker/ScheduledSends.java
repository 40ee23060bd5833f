package rmqbroker;

import static rmqshared.HarnessSupport.print;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import rmqshared.HarnessSupport;

/**
 * Scheduled messages through a real 5.x broker: its put hook (HookUtils.handleScheduleMessage:
 * delay levels to SCHEDULE_TOPIC_XXXX, timer messages to rmq_sys_wheel_timer), its
 * ScheduleMessageService (config/delayOffset.json) and its TimerMessageStore (timerwheel,
 * timerlog/, config/timercheck):
 *
 * <pre>
 *   send STORE MESSAGES.jsonl     a producer sends every message (fields delayLevel, delayMs,
 *                                 delaySec, deliverTimeMs use the client's setters); with
 *                                 --no-deliver 1 the broker's schedule service is stopped first,
 *                                 so delay-level messages stay pending; with --await N waits
 *                                 until N messages arrived in real queues; waits until the
 *                                 timer store enqueued every timer message; shuts down
 *   await-delivery STORE N        start the broker on STORE; wait until N messages arrived in
 *                                 real queues (--timeout-ms, default 60 s; then --linger-ms more);
 *                                 print them; shut down; print delayOffset.json and timercheck
 * </pre>
 */
final class ScheduledSends {
    private final BrokerHarness h;

    ScheduledSends(BrokerHarness h) {
        this.h = h;
    }

    private DefaultMessageStore store() {
        return (DefaultMessageStore) h.broker.getMessageStore();
    }

    int send(String root, Path messages) throws Exception {
        h.init(root);
        h.startBroker();
        if (h.args.opt("no-deliver", 0) != 0) {
            // Only the delay-level service: a timer store that does not dequeue does not
            // checkpoint its queue offset either (prepareTimerCheckPoint), so it would read its
            // queue again after a restart.
            h.broker.getScheduleMessageService().stop();
        }
        h.admin = new DefaultMQAdminExt(15_000);
        h.admin.setNamesrvAddr(BrokerHarness.LOOPBACK + ":" + h.args.opt("namesrv-port", 9876));
        h.admin.setInstanceName("interop-admin");
        h.admin.start();
        Map<String, Map<Integer, Long>> before = maxima();
        h.produce(messages, false);
        long await = h.args.opt("await", 0);
        long until = System.currentTimeMillis() + h.args.opt("timeout-ms", 60_000);
        while (count(before, maxima()) < await) {
            if (System.currentTimeMillis() > until) {
                throw new IllegalStateException("fewer than " + await + " messages were delivered");
            }
            Thread.sleep(5);
        }
        TimerMessageStore timer = h.broker.getTimerMessageStore();
        long deadline = System.currentTimeMillis() + 30_000;
        while (timer.getCommitQueueOffset() < store().getMaxOffsetInQueue(TimerMessageStore.TIMER_TOPIC, 0)) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the timer store did not enqueue every timer message");
            }
            Thread.sleep(5);
        }
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "pending");
        Map<String, Object> levels = new TreeMap<>();
        for (int q = 0; q < 64; q++) {
            long max = store().getMaxOffsetInQueue(TopicValidator.RMQ_SYS_SCHEDULE_TOPIC, q);
            if (max > 0) {
                levels.put(String.valueOf(q + 1), max);
            }
        }
        o.put("scheduleQueues", levels);
        o.put("timerQueueMax", store().getMaxOffsetInQueue(TimerMessageStore.TIMER_TOPIC, 0));
        o.put("timerCommitQueueOffset", timer.getCommitQueueOffset());
        o.put("nowMs", System.currentTimeMillis()); // what is delivered after this, a restart delivered
        print(o);
        h.stopAll();
        printFiles(root);
        return 0;
    }

    private static boolean systemTopic(String topic) {
        return topic.equals(TopicValidator.RMQ_SYS_SCHEDULE_TOPIC) || topic.equals(TimerMessageStore.TIMER_TOPIC)
            || TopicValidator.isSystemTopic(topic);
    }

    private Map<String, Map<Integer, Long>> maxima() throws Exception {
        Map<String, Map<Integer, Long>> out = new TreeMap<>();
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : store().getConsumeQueueTable().entrySet()) {
            if (systemTopic(t.getKey())) {
                continue;
            }
            Map<Integer, Long> q = new TreeMap<>();
            for (Integer qid : t.getValue().keySet()) {
                q.put(qid, store().getMaxOffsetInQueue(t.getKey(), qid));
            }
            out.put(t.getKey(), q);
        }
        return out;
    }

    private static long count(Map<String, Map<Integer, Long>> before, Map<String, Map<Integer, Long>> now) {
        long n = 0;
        for (Map.Entry<String, Map<Integer, Long>> t : now.entrySet()) {
            for (Map.Entry<Integer, Long> q : t.getValue().entrySet()) {
                n += q.getValue() - before.getOrDefault(t.getKey(), Map.of()).getOrDefault(q.getKey(), 0L);
            }
        }
        return n;
    }

    int awaitDelivery(String root, long expect) throws Exception {
        h.init(root); // loaded and recovered, nothing delivered yet
        Map<String, Map<Integer, Long>> before = maxima();
        h.startBroker();
        long deadline = System.currentTimeMillis() + h.args.opt("timeout-ms", 60_000);
        boolean done;
        while (true) {
            done = count(before, maxima()) >= expect;
            if (done || System.currentTimeMillis() > deadline) {
                break;
            }
            Thread.sleep(5);
        }
        Thread.sleep(h.args.opt("linger-ms", 0));
        HarnessSupport.waitDispatched(store());
        Map<String, Map<Integer, Long>> after = maxima();
        long n = 0;
        for (Map.Entry<String, Map<Integer, Long>> t : after.entrySet()) {
            for (Map.Entry<Integer, Long> q : t.getValue().entrySet()) {
                long from = before.getOrDefault(t.getKey(), Map.of()).getOrDefault(q.getKey(), 0L);
                n += printRange(t.getKey(), q.getKey(), from, q.getValue());
            }
        }
        h.stopAll();
        printFiles(root);
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "awaited");
        o.put("done", done);
        o.put("deliveredMessages", n);
        print(o);
        return done ? 0 : 1;
    }

    private long printRange(String topic, int qid, long from, long to) throws Exception {
        long n = 0;
        long offset = from;
        while (offset < to) {
            GetMessageResult r = store().getMessage("interop-deliver", topic, qid, offset, 32, null);
            if (r == null || r.getMessageBufferList().isEmpty()) {
                throw new IllegalStateException("getMessage stopped at " + topic + "/" + qid + "@" + offset);
            }
            try {
                for (ByteBuffer buf : r.getMessageBufferList()) {
                    MessageExt m = MessageDecoder.decode(buf.slice(), true, false, false);
                    Map<String, Object> o = BrokerHarness.describe(m);
                    o.put("kind", "delivered");
                    print(o);
                    n++;
                }
                offset = r.getNextBeginOffset();
            } finally {
                r.release();
            }
        }
        return n;
    }

    /** config/delayOffset.json as RocketMQ left it and config/timercheck's seven longs. */
    private static void printFiles(String root) throws Exception {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "files");
        Path delay = Paths.get(root, "config", "delayOffset.json");
        o.put("delayOffset", Files.exists(delay) ? new String(Files.readAllBytes(delay), StandardCharsets.UTF_8) : null);
        Path check = Paths.get(root, "config", "timercheck");
        if (Files.exists(check)) {
            ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(check));
            List<Object> longs = new ArrayList<>();
            for (int i = 0; i < 7 && b.remaining() >= 8; i++) {
                longs.add(b.getLong());
            }
            o.put("timercheck", longs);
        }
        print(o);
    }
}
