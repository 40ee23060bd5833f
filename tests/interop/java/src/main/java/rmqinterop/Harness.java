package rmqinterop;

import static rmqshared.HarnessSupport.print;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import rmqshared.HarnessSupport;
import rmqshared.HarnessSupport.Args;
import rmqshared.Json;

/**
 * Drives Apache RocketMQ's own {@link DefaultMessageStore} from the command line, for
 * rmqstore's interop tests (tests/interop). Commands (options first, then the command):
 *
 * <pre>
 *   write  STORE MESSAGES.jsonl   put every described message, wait for dispatch, shut down
 *   write-forever STORE           put numbered messages until killed (prints each put result)
 *   read   STORE                  load + start an existing store, dump it as JSON lines
 *   clean  STORE                  load + start, RocketMQ's own expired-file deletion (manual
 *                                 trigger, the clean services' rounds run at once), shut down
 *   bench  STORE N SIZE           time N puts of SIZE-byte bodies, print messages/s
 *   deliver STORE, bench-deliver STORE N          4.9.x delay levels ({@link ScheduleCommands})
 *   timer-deliver STORE, bench-timer-enqueue STORE N   5.x timer messages (TimerCommands)
 * </pre>
 *
 * Options: --commitlog-size B, --cq-size B, --hash-slots N, --index-num N, --store-host IP:PORT,
 * --flush ASYNC_FLUSH|SYNC_FLUSH. Every output line is one JSON object with a "kind".
 *
 * <p>The same source builds against rocketmq-store 5.x (default profile) and 4.9.x (profile
 * rmq4): the few places where their APIs differ (the store's constructor, the package of
 * MessageExtBrokerInner, 5.x-only settings) go through reflection.
 */
public final class Harness {
    final Args args;
    final String root;
    DefaultMessageStore store;
    InetSocketAddress storeHost;

    private Harness(Args args, String root) {
        this.args = args;
        this.root = root;
    }

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        if (args.rest.size() < 2) {
            System.err.println("usage: Harness [options] write|write-forever|read|clean|bench|deliver|bench-deliver"
                + "|timer-deliver|bench-timer-enqueue STORE ...");
            System.exit(2);
        }
        Harness h = new Harness(args, args.rest.get(1));
        HarnessSupport.runAndHalt(() -> h.run(args.rest), () -> { });
    }

    private int run(List<String> rest) throws Exception {
        int rc;
        switch (rest.get(0)) {
            case "write":
                rc = write(Paths.get(rest.get(2)));
                break;
            case "write-forever":
                rc = writeForever();
                break;
            case "read":
                rc = read();
                break;
            case "clean":
                rc = clean();
                break;
            case "bench":
                rc = bench(Integer.parseInt(rest.get(2)), Integer.parseInt(rest.get(3)));
                break;
            case "deliver":
                rc = new ScheduleCommands(this).deliver();
                break;
            case "bench-deliver":
                rc = new ScheduleCommands(this).benchDeliver(Integer.parseInt(rest.get(2)));
                break;
            case "timer-deliver":
            case "bench-timer-enqueue":
                rc = timerCommand(rest);
                break;
            default:
                System.err.println("unknown command " + rest.get(0));
                rc = 2;
        }
        return rc;
    }

    /** TimerCommands is 5.x only (the rmq4 profile does not compile it). */
    private int timerCommand(List<String> rest) throws Exception {
        Class<?> c;
        try {
            c = Class.forName("rmqinterop.TimerCommands");
        } catch (ClassNotFoundException e) {
            System.err.println(rest.get(0) + ": this RocketMQ has no TimerMessageStore");
            return 2;
        }
        Object t = c.getDeclaredConstructor(Harness.class).newInstance(this);
        return (Integer) c.getDeclaredMethod("run", List.class).invoke(t, rest);
    }

    static InetSocketAddress parseHost(String hostPort) throws Exception {
        int colon = hostPort.lastIndexOf(':');
        String host = hostPort.substring(0, colon);
        if (host.startsWith("[")) {
            host = host.substring(1, host.length() - 1);
        }
        return new InetSocketAddress(InetAddress.getByName(host), Integer.parseInt(hostPort.substring(colon + 1)));
    }

    private void open() throws Exception {
        load(new MessageStoreConfig());
        store.start();
        if (args.opt("no-deliver", 0) != 0) {
            ScheduleCommands.stopScheduleService(store);
        }
    }

    /**
     * A store on the folder with the options' settings (--delay-levels sets messageDelayLevel),
     * loaded (RocketMQ's recovery) but not started.
     */
    void load(MessageStoreConfig cfg) throws Exception {
        HarnessSupport.configureStore(cfg, root, args);
        cfg.setFlushDiskType(FlushDiskType.valueOf(args.opt("flush", "ASYNC_FLUSH")));
        cfg.setHaListenPort(0); // no fixed HA port
        String levels = args.opt("delay-levels", null);
        if (levels != null) {
            cfg.setMessageDelayLevel(levels);
        }
        storeHost = parseHost(args.opt("store-host", "127.0.0.1:10911"));
        BrokerConfig broker = new BrokerConfig();
        BrokerStatsManager stats = new BrokerStatsManager(broker.getBrokerClusterName(), true);
        store = newStore(cfg, stats, broker);
        if (!store.load()) {
            throw new IllegalStateException("DefaultMessageStore.load() returned false for " + root);
        }
    }

    /** 5.x: (config, stats, listener, brokerConfig, topicConfigTable); 4.9.x: the first four. */
    private static DefaultMessageStore newStore(MessageStoreConfig cfg, BrokerStatsManager stats, BrokerConfig broker)
        throws Exception {
        for (java.lang.reflect.Constructor<?> c : DefaultMessageStore.class.getConstructors()) {
            Class<?>[] p = c.getParameterTypes();
            if (p.length == 5 && p[0] == MessageStoreConfig.class && p[4] == ConcurrentMap.class) {
                return (DefaultMessageStore) c.newInstance(cfg, stats, null, broker, new ConcurrentHashMap<>());
            }
            if (p.length == 4 && p[0] == MessageStoreConfig.class && p[3] == BrokerConfig.class) {
                return (DefaultMessageStore) c.newInstance(cfg, stats, null, broker);
            }
        }
        throw new IllegalStateException("no known DefaultMessageStore constructor");
    }

    /** MessageExtBrokerInner: org.apache.rocketmq.common.message in 5.x, .store in 4.9.x. */
    private static final Class<?> INNER;
    private static final java.lang.reflect.Method PUT_MESSAGE;
    private static final java.lang.reflect.Method SET_PROPERTIES_STRING;
    private static final java.lang.reflect.Method SET_TAGS_CODE;

    static {
        Class<?> inner;
        try {
            inner = Class.forName("org.apache.rocketmq.common.message.MessageExtBrokerInner");
        } catch (ClassNotFoundException e) {
            try {
                inner = Class.forName("org.apache.rocketmq.store.MessageExtBrokerInner");
            } catch (ClassNotFoundException e2) {
                throw new ExceptionInInitializerError(e2);
            }
        }
        INNER = inner;
        try {
            PUT_MESSAGE = DefaultMessageStore.class.getMethod("putMessage", INNER);
            SET_PROPERTIES_STRING = INNER.getMethod("setPropertiesString", String.class);
            SET_TAGS_CODE = INNER.getMethod("setTagsCode", long.class);
        } catch (NoSuchMethodException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** A MessageExtBrokerInner with every field the store needs, put with putMessage. */
    PutMessageResult putInner(String topic, int queueId, int flag, byte[] body, Map<String, String> props,
        long born, InetSocketAddress bornHost) throws Exception {
        MessageExt m = (MessageExt) INNER.getConstructor().newInstance();
        m.setTopic(topic);
        m.setQueueId(queueId);
        m.setFlag(flag);
        m.setBody(body);
        MessageAccessor.setProperties(m, new java.util.HashMap<>(props));
        SET_PROPERTIES_STRING.invoke(m, propertiesString(props));
        String tags = props.get(MessageConst.PROPERTY_TAGS);
        SET_TAGS_CODE.invoke(m, tags == null || tags.isEmpty() ? 0L : (long) tags.hashCode());
        m.setBornTimestamp(born);
        m.setBornHost(bornHost);
        m.setStoreHost(storeHost);
        m.setSysFlag(0);
        m.setReconsumeTimes(0);
        return (PutMessageResult) PUT_MESSAGE.invoke(store, m);
    }

    void close() {
        store.shutdown();
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "closed");
        o.put("abortFileLeft", Files.exists(Paths.get(root, "abort")));
        print(o);
    }

    // -- write ---------------------------------------------------------------------------

    /** name\1value\2 for every entry, in the given order (MessageDecoder's format). */
    static String propertiesString(Map<String, String> props) {
        StringBuilder b = new StringBuilder();
        for (Map.Entry<String, String> e : props.entrySet()) {
            b.append(e.getKey()).append(MessageDecoder.NAME_VALUE_SEPARATOR)
                .append(e.getValue()).append(MessageDecoder.PROPERTY_SEPARATOR);
        }
        return b.toString();
    }

    /** TAGS, KEYS (space-joined), then the described properties, in that order. */
    @SuppressWarnings("unchecked")
    static Map<String, String> describedProperties(Map<String, Object> d) {
        Map<String, String> props = new LinkedHashMap<>();
        Object tags = d.get("tags");
        if (tags != null) {
            props.put(MessageConst.PROPERTY_TAGS, (String) tags);
        }
        Object keys = d.get("keys");
        if (keys instanceof List && !((List<Object>) keys).isEmpty()) {
            props.put(MessageConst.PROPERTY_KEYS, String.join(MessageConst.KEY_SEPARATOR, (List<String>) keys));
        }
        Object extra = d.get("properties");
        if (extra != null) {
            for (Map.Entry<String, Object> e : ((Map<String, Object>) extra).entrySet()) {
                props.put(e.getKey(), (String) e.getValue());
            }
        }
        return props;
    }

    private PutMessageResult putDescribed(Map<String, Object> d) throws Exception {
        String topic = (String) d.get("topic");
        int queueId = ((Long) d.get("queueId")).intValue();
        int flag = d.get("flag") == null ? 0 : ((Long) d.get("flag")).intValue();
        long born = (Long) d.get("bornTimestamp");
        InetSocketAddress bornHost = parseHost((String) d.get("bornHost"));
        Map<String, String> props = describedProperties(d);
        Object bodies = d.get("bodies");
        if (bodies != null) {
            List<Message> batch = new ArrayList<>();
            for (Object b64 : (List<?>) bodies) {
                Message m = new Message(topic, Base64.getDecoder().decode((String) b64));
                // The client constructor adds WAIT=true; the described properties are all there is.
                MessageAccessor.clearProperty(m, MessageConst.PROPERTY_WAIT_STORE_MSG_OK);
                m.setFlag(flag);
                for (Map.Entry<String, String> e : props.entrySet()) {
                    MessageAccessor.putProperty(m, e.getKey(), e.getValue());
                }
                batch.add(m);
            }
            MessageExtBatch b = new MessageExtBatch();
            b.setTopic(topic);
            b.setQueueId(queueId);
            b.setBody(MessageDecoder.encodeMessages(batch));
            b.setBornTimestamp(born);
            b.setBornHost(bornHost);
            b.setStoreHost(storeHost);
            b.setSysFlag(0);
            return store.putMessages(b);
        }
        return putInner(topic, queueId, flag, Base64.getDecoder().decode((String) d.get("body")), props, born,
            bornHost);
    }

    private static Map<String, Object> putLine(PutMessageResult r) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "put");
        o.put("status", r.getPutMessageStatus().name());
        if (r.getAppendMessageResult() != null) {
            o.put("wroteOffset", r.getAppendMessageResult().getWroteOffset());
            o.put("wroteBytes", r.getAppendMessageResult().getWroteBytes());
            o.put("queueOffset", r.getAppendMessageResult().getLogicsOffset());
            o.put("msgNum", (long) r.getAppendMessageResult().getMsgNum());
            o.put("msgId", r.getAppendMessageResult().getMsgId());
        }
        return o;
    }

    private int write(Path messages) throws Exception {
        open();
        int failed = 0;
        for (Map<String, Object> d : Json.readObjects(messages)) {
            if (d.containsKey("pauseMs")) { // a pause between puts (store times apart)
                Thread.sleep((Long) d.get("pauseMs"));
                continue;
            }
            PutMessageResult r = putDescribed(d);
            if (!r.isOk()) {
                failed++;
            }
            print(putLine(r));
        }
        HarnessSupport.waitDispatched(store);
        close();
        return failed == 0 ? 0 : 1;
    }

    /** Numbered messages, each with a key, until the process is killed. */
    private int writeForever() throws Exception {
        open();
        long delayMs = args.opt("delay-ms", 0);
        int bodySize = (int) args.opt("body-size", 100);
        int queues = (int) args.opt("queues", 4);
        for (long i = 0; ; i++) {
            Map<String, Object> d = new LinkedHashMap<>();
            d.put("topic", "KillTopic");
            d.put("queueId", i % queues);
            d.put("tags", "T" + (i % 3));
            d.put("keys", List.of("k" + i));
            byte[] body = new byte[bodySize];
            byte[] num = Long.toString(i).getBytes(StandardCharsets.US_ASCII);
            java.util.Arrays.fill(body, (byte) 'x');
            System.arraycopy(num, 0, body, 0, Math.min(num.length, bodySize));
            d.put("body", Base64.getEncoder().encodeToString(body));
            d.put("bornTimestamp", 1_700_000_000_000L + i);
            d.put("bornHost", "10.0.0.1:4000");
            Map<String, Object> o = putLine(putDescribed(d));
            o.put("seq", i);
            print(o);
            if (delayMs > 0) {
                Thread.sleep(delayMs);
            }
        }
    }

    // -- read ----------------------------------------------------------------------------

    /** The shared message fields and the prepared transaction offset. */
    static Map<String, Object> describe(MessageExt m) {
        Map<String, Object> o = HarnessSupport.describe(m);
        o.put("preparedTransactionOffset", m.getPreparedTransactionOffset());
        return o;
    }

    static MessageExt decode(ByteBuffer buf) {
        MessageExt m = MessageDecoder.decode(buf, true, false, false);
        if (m == null) {
            throw new IllegalStateException("MessageDecoder.decode failed");
        }
        return m;
    }

    private int read() throws Exception {
        open();
        HarnessSupport.waitDispatched(store);
        Map<String, Object> info = new LinkedHashMap<>();
        info.put("kind", "info");
        info.put("minPhyOffset", store.getMinPhyOffset());
        info.put("maxPhyOffset", store.getMaxPhyOffset());
        info.put("dispatchBehindBytes", store.dispatchBehindBytes());
        print(info);
        Map<String, Map<Long, Long>> queues = new TreeMap<>();
        for (Map.Entry<String, ? extends Map<Integer, ?>> t : store.getConsumeQueueTable().entrySet()) {
            Map<Long, Long> q = new TreeMap<>();
            for (Integer qid : t.getValue().keySet()) {
                q.put((long) qid, 0L);
            }
            queues.put(t.getKey(), q);
        }
        LinkedHashSet<String> keys = new LinkedHashSet<>();
        LinkedHashSet<String> tags = new LinkedHashSet<>();
        for (Map.Entry<String, Map<Long, Long>> t : queues.entrySet()) {
            String topic = t.getKey();
            for (Long qidL : t.getValue().keySet()) {
                int qid = qidL.intValue();
                long min = store.getMinOffsetInQueue(topic, qid);
                long max = store.getMaxOffsetInQueue(topic, qid);
                Map<String, Object> qo = new LinkedHashMap<>();
                qo.put("kind", "queue");
                qo.put("topic", topic);
                qo.put("queueId", (long) qid);
                qo.put("minOffset", min);
                qo.put("maxOffset", max);
                print(qo);
                long offset = min;
                while (offset < max) {
                    GetMessageResult r = store.getMessage("interop", topic, qid, offset, 32, null);
                    if (r == null || r.getMessageBufferList().isEmpty()) {
                        Map<String, Object> e = new LinkedHashMap<>();
                        e.put("kind", "getMessageStopped");
                        e.put("topic", topic);
                        e.put("queueId", (long) qid);
                        e.put("offset", offset);
                        e.put("status", r == null ? "null" : r.getStatus().name());
                        print(e);
                        break;
                    }
                    try {
                        for (ByteBuffer buf : r.getMessageBufferList()) {
                            MessageExt m = decode(buf.slice());
                            Map<String, Object> o = describe(m);
                            o.put("kind", "msg");
                            print(o);
                            String uniq = m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
                            if (uniq != null && !uniq.isEmpty()) {
                                keys.add(topic + "\u0000" + uniq);
                            }
                            String tg = m.getTags();
                            if (tg != null && !tg.isEmpty()) {
                                tags.add(topic + "\u0000" + tg);
                            }
                            for (String k : HarnessSupport.keys(m)) {
                                keys.add(topic + "\u0000" + k);
                            }
                            MessageExt looked = store.lookMessageByOffset(m.getCommitLogOffset());
                            Map<String, Object> lo = looked == null ? new LinkedHashMap<>() : describe(looked);
                            lo.put("kind", "look");
                            lo.put("offset", m.getCommitLogOffset());
                            print(lo);
                        }
                        offset = r.getNextBeginOffset();
                    } finally {
                        r.release();
                    }
                }
            }
        }
        for (String tk : keys) {
            String topic = tk.substring(0, tk.indexOf('\u0000'));
            String key = tk.substring(tk.indexOf('\u0000') + 1);
            printQuery("query", topic, "key", key, store.queryMessage(topic, key, 64, 0, Long.MAX_VALUE));
        }
        // 5.4+: queryMessage with index type "T" looks up the topic#T#tags entries.
        java.lang.reflect.Method typedQuery = null;
        try {
            typedQuery = DefaultMessageStore.class.getMethod("queryMessage", String.class, String.class,
                int.class, long.class, long.class, String.class, String.class);
        } catch (NoSuchMethodException absentBefore54) {
            // 4.9.x and 5.3: no typed index entries.
        }
        for (String tt : typedQuery == null ? new LinkedHashSet<String>() : tags) {
            String topic = tt.substring(0, tt.indexOf('\u0000'));
            String tag = tt.substring(tt.indexOf('\u0000') + 1);
            printQuery("tagQuery", topic, "tag", tag,
                (QueryMessageResult) typedQuery.invoke(store, topic, tag, 64, 0L, Long.MAX_VALUE, "T", null));
        }
        close();
        return 0;
    }

    /** One line of a query's answer: the commitlog offsets of the messages it returned. */
    private static void printQuery(String kind, String topic, String field, String value, QueryMessageResult q)
        throws Exception {
        List<Object> offsets = new ArrayList<>();
        try {
            for (ByteBuffer buf : q.getMessageBufferList()) {
                offsets.add(decode(buf.slice()).getCommitLogOffset());
            }
        } finally {
            q.release();
        }
        HarnessSupport.printOffsets(kind, topic, field, value, offsets);
    }

    // -- clean ---------------------------------------------------------------------------

    /**
     * RocketMQ deletes the store's expired files itself: fileReservedTime (--file-reserved-hours,
     * default 72) against each segment's modification time, triggered by
     * executeDeleteFilesManually (the next 20 rounds delete whatever expired, whatever the hour).
     * The rounds the store's scheduler would run after a minute run at once, through the private
     * methods the scheduler calls: DefaultMessageStore.cleanFilesPeriodically (commitlog; 4.9.x
     * also consume queues and index) and, in 5.x, ConsumeQueueStore.cleanQueueFilesPeriodically
     * (consume queues and index; the store's getQueueStore). Rounds go on until one removes
     * nothing. Prints the commitlog's min offset before and after and the number of rounds;
     * then shuts the store down.
     */
    private int clean() throws Exception {
        MessageStoreConfig cfg = new MessageStoreConfig();
        cfg.setFileReservedTime((int) args.opt("file-reserved-hours", 72));
        cfg.setDeleteCommitLogFilesInterval(0);
        cfg.setDeleteConsumeQueueFilesInterval(0);
        // Only expiry deletes: a nearly full disk of the test machine must not make a round
        // delete at once (cleanAtOnce = cleanFileForciblyEnable && cleanImmediately).
        cfg.setCleanFileForciblyEnable(false);
        load(cfg);
        store.start();
        HarnessSupport.waitDispatched(store);
        java.lang.reflect.Method commitLogRound = DefaultMessageStore.class.getDeclaredMethod("cleanFilesPeriodically");
        commitLogRound.setAccessible(true);
        Object queues = null;
        java.lang.reflect.Method queueRound = null;
        try {
            queues = DefaultMessageStore.class.getMethod("getQueueStore").invoke(store);
            for (Class<?> c = queues.getClass(); c != null && queueRound == null; c = c.getSuperclass()) {
                try {
                    queueRound = c.getDeclaredMethod("cleanQueueFilesPeriodically");
                } catch (NoSuchMethodException notHere) {
                    // a superclass may declare it
                }
            }
            if (queueRound == null) {
                throw new IllegalStateException("no cleanQueueFilesPeriodically on " + queues.getClass());
            }
            queueRound.setAccessible(true);
        } catch (NoSuchMethodException absentIn4) {
            // 4.9.x: cleanFilesPeriodically runs the consume queue cleaner too.
        }
        long before = store.getMinPhyOffset();
        store.executeDeleteFilesManually();
        int rounds = 0;
        long min = before;
        while (rounds < 20) {
            commitLogRound.invoke(store);
            if (queueRound != null) {
                queueRound.invoke(queues);
            }
            rounds++;
            long now = store.getMinPhyOffset();
            if (now == min) {
                break;
            }
            min = now;
        }
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "cleaned");
        o.put("minPhyOffsetBefore", before);
        o.put("minPhyOffsetAfter", store.getMinPhyOffset());
        o.put("rounds", (long) rounds);
        print(o);
        close();
        return 0;
    }

    // -- bench ---------------------------------------------------------------------------

    private int bench(int n, int size) throws Exception {
        open();
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'b');
        Map<String, String> props = new LinkedHashMap<>();
        props.put(MessageConst.PROPERTY_TAGS, "TagA");
        InetSocketAddress bornHost = parseHost("10.0.0.1:4000");
        int warm = (int) args.opt("warmup", Math.min(n, 20_000));
        long start = 0;
        for (int i = -warm; i < n; i++) {
            if (i == 0) {
                start = System.nanoTime();
            }
            PutMessageResult r = putInner("BenchTopic", i & 3, 0, body, props, System.currentTimeMillis(), bornHost);
            if (!r.isOk()) {
                throw new IllegalStateException("put " + i + ": " + r.getPutMessageStatus());
            }
        }
        long ns = System.nanoTime() - start;
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "bench");
        o.put("messages", (long) n);
        o.put("bodySize", (long) size);
        o.put("warmup", (long) warm);
        o.put("seconds", ns / 1e9);
        o.put("messagesPerSecond", n / (ns / 1e9));
        print(o);
        return 0;
    }
}
