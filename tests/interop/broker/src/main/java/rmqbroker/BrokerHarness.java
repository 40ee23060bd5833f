package rmqbroker;

import static rmqshared.HarnessSupport.print;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.offset.ConsumerOffsetManager;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.admin.TopicStatsTable;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import rmqshared.HarnessSupport;
import rmqshared.HarnessSupport.Args;
import rmqshared.Json;

/**
 * A real Apache RocketMQ name server and broker in this JVM, on 127.0.0.1 only, serving an
 * existing store folder to real clients, for rmqstore's broker round trip (tests/interop). Commands
 * (options first):
 *
 * <pre>
 *   serve STORE TOPICS [MESSAGES.jsonl]
 *       start the name server and a broker on STORE; read every message of the comma-separated
 *       TOPICS with synchronous pulls (from offset 0, committing what it read; see QueueReader), look each
 *       one up with DefaultMQAdminExt (viewMessage by offset message id, queryMessage by key,
 *       queryMessageByUniqKey by UNIQ_KEY) and print the topic stats; then, with
 *       MESSAGES.jsonl, send every described message with a DefaultMQProducer (a "bodies" entry
 *       is one batch send); shut everything down cleanly
 *   load-offsets DIR...
 *       RocketMQ's own ConfigManager.load of DIR/consumerOffset.json (with its .bak fallback),
 *       one line per DIR: what ConsumerOffsetManager holds afterwards
 *   send STORE MESSAGES.jsonl, await-delivery STORE N
 *       scheduled messages (delay levels, timer messages) through the broker: see
 *       {@link ScheduledSends}
 *   tx-run STORE PLAN.jsonl, tx-await STORE PLAN.jsonl TOPICS
 *       transactional messages through the broker and a TransactionMQProducer (half, commit,
 *       rollback, the broker's check-back): see {@link TransactionCommands}
 * </pre>
 *
 * Options: --namesrv-port P, --broker-port P (the broker also listens on P-2), --ha-port P,
 * --commitlog-size B, --cq-size B, --hash-slots N, --index-num N, --delay-levels "1s 2s",
 * --timer-precision-ms MS, --timeout-s S (the JVM halts
 * after S seconds whatever it is doing; default 240). Every listening socket is bound to
 * 127.0.0.1 (the name server's and both broker remoting servers' bindAddress, and the HA socket
 * through {@link LoopbackHAService}); the broker registers 127.0.0.1 as its address. Every output
 * line is one JSON object with a "kind".
 */
public final class BrokerHarness {
    static final String LOOPBACK = "127.0.0.1";
    static final String CLUSTER = "RmqInteropCluster";
    static final String BROKER = "rmq-interop-broker";

    final Args args;
    private NamesrvController namesrv;
    BrokerController broker;
    DefaultMQAdminExt admin;
    private DefaultMQProducer producer;

    private BrokerHarness(Args args) {
        this.args = args;
    }

    public static void main(String[] argv) {
        // Only the harness's own lines go to stdout (some RocketMQ versions print to System.out).
        System.setOut(System.err);
        Args args = Args.parse(argv);
        BrokerHarness h = new BrokerHarness(args);
        long timeout = args.opt("timeout-s", 240);
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(timeout * 1000);
                System.err.println("broker harness: no result after " + timeout + " s, halting");
                Runtime.getRuntime().halt(4);
            } catch (InterruptedException ignored) {
                // finished in time
            }
        }, "harness-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        HarnessSupport.runAndHalt(() -> h.run(args.rest), h::stopAll);
    }

    private int run(List<String> rest) throws Exception {
        if (rest.isEmpty()) {
            System.err.println("usage: BrokerHarness [options] serve STORE TOPICS [MESSAGES.jsonl] | load-offsets DIR..."
                + " | send STORE MESSAGES.jsonl | await-delivery STORE N | tx-run STORE PLAN.jsonl"
                + " | tx-await STORE PLAN.jsonl TOPICS");
            return 2;
        }
        switch (rest.get(0)) {
            case "serve":
                return serve(rest.get(1), rest.get(2), rest.size() > 3 ? Paths.get(rest.get(3)) : null);
            case "send":
                return new ScheduledSends(this).send(rest.get(1), Paths.get(rest.get(2)));
            case "await-delivery":
                return new ScheduledSends(this).awaitDelivery(rest.get(1), Long.parseLong(rest.get(2)));
            case "tx-run":
                return new TransactionCommands(this).run(rest.get(1), Paths.get(rest.get(2)));
            case "tx-await":
                return new TransactionCommands(this).await(rest.get(1), Paths.get(rest.get(2)), rest.get(3));
            case "load-offsets":
                for (String dir : rest.subList(1, rest.size())) {
                    loadOffsets(dir);
                }
                return 0;
            default:
                System.err.println("unknown command " + rest.get(0));
                return 2;
        }
    }

    // -- name server and broker ----------------------------------------------------------

    private String namesrvAddr() {
        return LOOPBACK + ":" + args.opt("namesrv-port", 9876);
    }

    private String brokerAddr() {
        return LOOPBACK + ":" + args.opt("broker-port", 10911);
    }

    private void start(String root) throws Exception {
        init(root);
        startBroker();
    }

    /**
     * The name server started and the broker initialized on the store (loaded, recovered: its
     * queues can be read) but not started. --delay-levels sets messageDelayLevel and
     * --timer-precision-ms timerPrecisionMs.
     */
    void init(String root) throws Exception {
        Path home = Paths.get(System.getProperty("user.home"));
        NamesrvConfig nsConfig = new NamesrvConfig();
        nsConfig.setRocketmqHome(home.toString());
        nsConfig.setKvConfigPath(home.resolve("namesrv").resolve("kvConfig.json").toString());
        nsConfig.setConfigStorePath(home.resolve("namesrv").resolve("namesrv.properties").toString());
        NettyServerConfig nsServer = new NettyServerConfig();
        nsServer.setBindAddress(LOOPBACK);
        nsServer.setListenPort((int) args.opt("namesrv-port", 9876));
        namesrv = new NamesrvController(nsConfig, nsServer, new NettyClientConfig());
        if (!namesrv.initialize()) {
            throw new IllegalStateException("NamesrvController.initialize() returned false");
        }
        namesrv.start();

        BrokerConfig bc = new BrokerConfig();
        bc.setRocketmqHome(home.toString());
        bc.setNamesrvAddr(namesrvAddr());
        bc.setBrokerIP1(LOOPBACK);
        bc.setBrokerIP2(LOOPBACK);
        bc.setBrokerClusterName(CLUSTER);
        bc.setBrokerName(BROKER);
        bc.setBrokerId(0);
        bc.setAutoCreateTopicEnable(false);
        TransactionCommands.configure(bc, args);
        NettyServerConfig server = new NettyServerConfig();
        server.setBindAddress(LOOPBACK);
        server.setListenPort((int) args.opt("broker-port", 10911));
        MessageStoreConfig store = new MessageStoreConfig();
        HarnessSupport.configureStore(store, root, args);
        store.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        store.setHaListenPort((int) args.opt("ha-port", 10912));
        String levels = args.opt("delay-levels", null);
        if (levels != null) {
            store.setMessageDelayLevel(levels);
        }
        store.setTimerWheelEnable(true);
        store.setTimerPrecisionMs((int) args.opt("timer-precision-ms", 1000));
        broker = new BrokerController(bc, server, new NettyClientConfig(), store);
        if (!broker.initialize()) {
            throw new IllegalStateException("BrokerController.initialize() returned false for " + root);
        }
    }

    void startBroker() throws Exception {
        broker.start();
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "started");
        o.put("pid", ProcessHandle.current().pid());
        o.put("namesrv", namesrvAddr());
        o.put("broker", brokerAddr());
        o.put("storeHost", HarnessSupport.hostText(broker.getStoreHost()));
        print(o);
    }

    void stopAll() {
        for (Runnable r : new Runnable[] {
            () -> { if (producer != null) producer.shutdown(); },
            () -> { if (admin != null) admin.shutdown(); },
            () -> { if (broker != null) broker.shutdown(); },
            () -> { if (namesrv != null) namesrv.shutdown(); },
        }) {
            try {
                r.run();
            } catch (Throwable t) {
                t.printStackTrace();
            }
        }
        producer = null;
        admin = null;
        if (broker != null) {
            broker = null;
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("kind", "stopped");
            print(o);
        }
        namesrv = null;
    }

    // -- serve ---------------------------------------------------------------------------

    private int serve(String root, String topics, Path messages) throws Exception {
        start(root);
        admin = new DefaultMQAdminExt(15_000);
        admin.setNamesrvAddr(namesrvAddr());
        admin.setInstanceName("interop-admin");
        admin.start();
        List<String> names = new ArrayList<>();
        for (String t : topics.split(",")) {
            if (!t.isEmpty()) {
                names.add(t);
            }
        }
        waitForRoutes(names);
        readAll(names);
        if (messages != null) {
            produce(messages);
        }
        return 0;
    }

    /** Waits until the name server routes every topic (the broker registers a moment after it starts). */
    private void waitForRoutes(List<String> topics) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        for (String topic : topics) {
            while (true) {
                try {
                    admin.examineTopicRouteInfo(topic);
                    break;
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("the name server has no route for " + topic, e);
                    }
                    Thread.sleep(200);
                }
            }
        }
    }

    /** Stats, every message through a pull consumer, and admin lookups of each. */
    private void readAll(List<String> topics) throws Exception {
        Map<MessageQueue, Long> maxOffsets = new LinkedHashMap<>();
        for (String topic : topics) {
            TopicStatsTable stats = admin.examineTopicStats(topic);
            for (Map.Entry<MessageQueue, TopicOffset> e : new TreeMap<>(stats.getOffsetTable()).entrySet()) {
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("kind", "stats");
                o.put("topic", topic);
                o.put("queueId", (long) e.getKey().getQueueId());
                o.put("minOffset", e.getValue().getMinOffset());
                o.put("maxOffset", e.getValue().getMaxOffset());
                print(o);
                maxOffsets.put(e.getKey(), e.getValue().getMaxOffset());
            }
        }
        List<MessageExt> all = new ArrayList<>();
        Map<MessageQueue, Long> commit = new HashMap<>();
        long deadline = System.currentTimeMillis() + 120_000;
        try (QueueReader reader = new QueueReader(namesrvAddr(), "interop-reader")) {
            for (String topic : topics) {
                List<MessageQueue> queues = reader.queues(topic);
                Collections.sort(queues);
                for (MessageQueue mq : queues) {
                    long until = maxOffsets.getOrDefault(mq, 0L);
                    all.addAll(reader.read(mq, 0, until, deadline));
                    commit.put(mq, until);
                }
            }
            reader.commit(commit);
        }
        Map<String, Object> committed = new LinkedHashMap<>();
        committed.put("kind", "committed");
        committed.put("group", "interop-reader");
        Map<String, Object> table = new TreeMap<>();
        for (Map.Entry<MessageQueue, Long> e : commit.entrySet()) {
            table.put(e.getKey().getTopic() + "/" + e.getKey().getQueueId(), e.getValue());
        }
        committed.put("offsets", table);
        print(committed);
        LinkedHashSet<String> keys = new LinkedHashSet<>();
        LinkedHashSet<String> uniqKeys = new LinkedHashSet<>();
        for (MessageExt m : all) {
            Map<String, Object> o = describe(m);
            o.put("kind", "msg");
            print(o);
            String offsetMsgId = MessageDecoder.createMessageId(m.getStoreHost(), m.getCommitLogOffset());
            // By the offset message id only: viewMessage decodes any 32-hex id as an address.
            MessageExt viewed = admin.viewMessage(m.getTopic(), offsetMsgId);
            Map<String, Object> v = describe(viewed);
            v.put("kind", "view");
            v.put("offsetMsgId", offsetMsgId);
            print(v);
            for (String k : HarnessSupport.keys(m)) {
                keys.add(m.getTopic() + "\u0000" + k);
            }
            String uniq = m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
            if (uniq != null && !uniq.isEmpty()) {
                uniqKeys.add(m.getTopic() + "\u0000" + uniq);
            }
        }
        for (String tk : keys) {
            String topic = tk.substring(0, tk.indexOf('\u0000'));
            String key = tk.substring(tk.indexOf('\u0000') + 1);
            printQuery("query", topic, key, () -> admin.queryMessage(topic, key, 64, 0, Long.MAX_VALUE));
        }
        for (String tk : uniqKeys) {
            String topic = tk.substring(0, tk.indexOf('\u0000'));
            String key = tk.substring(tk.indexOf('\u0000') + 1);
            printQuery("uniqQuery", topic, key, () -> admin.queryMessageByUniqKey(null, topic, key, 64, 0, Long.MAX_VALUE));
        }
    }

    interface Query {
        QueryResult run() throws Exception;
    }

    /** One lookup's commitlog offsets; "no message" (a client exception) is an empty list. */
    private static void printQuery(String kind, String topic, String key, Query query) throws Exception {
        List<Object> offsets = new ArrayList<>();
        try {
            for (MessageExt m : query.run().getMessageList()) {
                offsets.add(m.getCommitLogOffset());
            }
        } catch (MQClientException e) {
            if (e.getResponseCode() != ResponseCode.NO_MESSAGE) {
                throw e;
            }
        }
        HarnessSupport.printOffsets(kind, topic, "key", key, offsets);
    }

    /** The shared message fields and, for what a client hands out, the offset message id. */
    static Map<String, Object> describe(MessageExt m) {
        Map<String, Object> o = HarnessSupport.describe(m);
        if (m instanceof MessageClientExt) {
            o.put("offsetMsgId", ((MessageClientExt) m).getOffsetMsgId());
        }
        return o;
    }

    // -- produce -------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    void produce(Path messages) throws Exception {
        produce(messages, true);
    }

    /** Sends the messages; with {@code lookups}, then looks each one up through the admin. */
    void produce(Path messages, boolean lookups) throws Exception {
        List<Map<String, Object>> described = Json.readObjects(messages);
        // Topics the broker does not know yet are created with enough queues.
        Map<String, Integer> needed = new TreeMap<>();
        for (Map<String, Object> d : described) {
            needed.merge((String) d.get("topic"), ((Long) d.get("queueId")).intValue() + 1, Math::max);
        }
        for (Map.Entry<String, Integer> e : needed.entrySet()) {
            ConcurrentMap<String, TopicConfig> known = broker.getTopicConfigManager().getTopicConfigTable();
            TopicConfig have = known.get(e.getKey());
            if (have == null || have.getWriteQueueNums() < e.getValue()) {
                admin.createAndUpdateTopicConfig(brokerAddr(), new TopicConfig(e.getKey(), e.getValue(), e.getValue()));
            }
        }
        producer = new DefaultMQProducer("interop-producer");
        producer.setNamesrvAddr(namesrvAddr());
        producer.setInstanceName("interop-producer");
        producer.setSendMsgTimeout(15_000);
        for (String topic : needed.keySet()) {
            long deadline = System.currentTimeMillis() + 30_000;
            while (true) {
                try {
                    if (producer.getDefaultMQProducerImpl().getServiceState()
                        != org.apache.rocketmq.common.ServiceState.RUNNING) {
                        producer.start();
                    }
                    if (producer.fetchPublishMessageQueues(topic).size() >= needed.get(topic)) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("no route with " + needed.get(topic) + " queues for " + topic);
                }
                Thread.sleep(200);
            }
        }
        List<String[]> sentIds = new ArrayList<>();
        for (Map<String, Object> d : described) {
            String topic = (String) d.get("topic");
            MessageQueue mq = new MessageQueue(topic, BROKER, ((Long) d.get("queueId")).intValue());
            SendResult r;
            Object bodies = d.get("bodies");
            if (bodies != null) {
                List<Message> batch = new ArrayList<>();
                for (Object b : (List<Object>) bodies) {
                    batch.add(message(d, Base64.getDecoder().decode((String) b)));
                }
                r = producer.send(batch, mq);
            } else {
                r = producer.send(message(d, Base64.getDecoder().decode((String) d.get("body"))), mq);
            }
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("kind", "sent");
            o.put("status", r.getSendStatus().name());
            o.put("msgId", r.getMsgId());
            o.put("offsetMsgId", r.getOffsetMsgId());
            o.put("queueId", (long) r.getMessageQueue().getQueueId());
            o.put("queueOffset", r.getQueueOffset());
            print(o);
            String[] ids = r.getMsgId().split(",");
            String[] offsetIds = r.getOffsetMsgId().split(",");
            for (int i = 0; i < ids.length; i++) {
                sentIds.add(new String[] {topic, ids[i], offsetIds[i]});
            }
        }
        if (!lookups) {
            return;
        }
        // What the broker answers for what was sent, once its index has it: each message viewed
        // by its offset message id, and every message id the sends returned or the records
        // hold, looked up through the index.
        HarnessSupport.waitDispatched(broker.getMessageStore());
        LinkedHashSet<String> uniq = new LinkedHashSet<>();
        for (String[] id : sentIds) {
            MessageExt viewed = admin.viewMessage(id[0], id[2]);
            Map<String, Object> v = describe(viewed);
            v.put("kind", "sentView");
            v.put("offsetMsgId", id[2]);
            print(v);
            uniq.add(id[0] + "\u0000" + id[1]);
            String stored = viewed.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
            if (stored != null) {
                uniq.add(id[0] + "\u0000" + stored);
            }
        }
        for (String tk : uniq) {
            String topic = tk.substring(0, tk.indexOf('\u0000'));
            String key = tk.substring(tk.indexOf('\u0000') + 1);
            printQuery("sentQuery", topic, key, () -> admin.queryMessageByUniqKey(null, topic, key, 64, 0, Long.MAX_VALUE));
        }
    }

    @SuppressWarnings("unchecked")
    static Message message(Map<String, Object> d, byte[] body) {
        Message m = new Message((String) d.get("topic"), body);
        Object tags = d.get("tags");
        if (tags != null) {
            m.setTags((String) tags);
        }
        Object keys = d.get("keys");
        if (keys instanceof List && !((List<Object>) keys).isEmpty()) {
            m.setKeys((Collection<String>) (Collection<?>) keys);
        }
        Object props = d.get("properties");
        if (props != null) {
            for (Map.Entry<String, Object> e : ((Map<String, Object>) props).entrySet()) {
                m.putUserProperty(e.getKey(), (String) e.getValue());
            }
        }
        Object flag = d.get("flag");
        if (flag != null) {
            m.setFlag(((Long) flag).intValue());
        }
        // Scheduled messages, through the client's own setters (properties DELAY,
        // TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS).
        if (d.get("delayLevel") != null) {
            m.setDelayTimeLevel(((Long) d.get("delayLevel")).intValue());
        }
        if (d.get("delayMs") != null) {
            m.setDelayTimeMs((Long) d.get("delayMs"));
        }
        if (d.get("delaySec") != null) {
            m.setDelayTimeSec((Long) d.get("delaySec"));
        }
        if (d.get("deliverTimeMs") != null) {
            m.setDeliverTimeMs((Long) d.get("deliverTimeMs"));
        }
        return m;
    }

    // -- load-offsets --------------------------------------------------------------------

    private static void loadOffsets(String dir) {
        ConsumerOffsetManager m = new ConsumerOffsetManager() {
            @Override
            public String configFilePath() {
                return Paths.get(dir, "consumerOffset.json").toString();
            }
        };
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("kind", "offsets");
        o.put("dir", dir);
        boolean ok;
        try {
            ok = m.load();
        } catch (Throwable t) {
            o.put("error", t.toString());
            print(o);
            return;
        }
        o.put("ok", ok);
        if (m.getOffsetTable() == null) {
            o.put("table", null);
        } else {
            Map<String, Object> table = new TreeMap<>();
            m.getOffsetTable().forEach((key, queues) -> {
                Map<String, Object> q = new TreeMap<>();
                queues.forEach((qid, off) -> q.put(String.valueOf(qid), off));
                table.put(key, q);
            });
            o.put("table", table);
        }
        o.put("fileLeft", Files.exists(Paths.get(dir, "consumerOffset.json")));
        print(o);
    }
}
