package rmqbroker;

import static rmqshared.HarnessSupport.print;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.broker.transaction.queue.MessageQueueOpContext;
import org.apache.rocketmq.broker.transaction.queue.TransactionalMessageServiceImpl;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import rmqshared.HarnessSupport;
import rmqshared.Json;

/**
 * Transactional messages through a real 5.x broker: a TransactionMQProducer sends half messages
 * (SendMessageProcessor, TransactionalMessageBridge.parseHalfMessageInner), ends them
 * (EndTransactionProcessor: the real message, an op entry queued for
 * TransactionalOpBatchService) and answers the broker's check-back
 * (TransactionalMessageServiceImpl.check: a copy of the half with TRANSACTION_CHECK_TIMES, or a
 * discard to TRANS_CHECK_MAX_TIME_TOPIC).
 *
 * <pre>
 *   tx-run STORE PLAN.jsonl      start the broker on STORE; for each PLAN line (a message as
 *                                the other commands describe it, with "seq" in its properties,
 *                                "local": COMMIT | ROLLBACK | UNKNOW, "checks": the answers to
 *                                the broker's successive checks, then UNKNOW) one
 *                                sendMessageInTransaction, waiting until the broker queued its
 *                                op entry (COMMIT, ROLLBACK); then --check-rounds N rounds of the
 *                                broker's own check (TransactionalMessageServiceImpl.check, run
 *                                here one round at a time): each round starts once every op
 *                                entry is written, and the producer's answers to it are let
 *                                through one at a time, in copy order, each once its op entry is
 *                                queued; waits until every op entry is written; shuts down
 *   tx-await STORE PLAN.jsonl TOPICS
 *                                start the broker on STORE with its check service running
 *                                (--tx-check-interval-ms, --tx-timeout-ms) and a producer of
 *                                group --producer-group answering checks from PLAN (by "seq";
 *                                --default-check for others); wait until --expect-ends checks were
 *                                answered COMMIT or ROLLBACK and as many op entries more were
 *                                written, then --linger-ms; read the comma-separated TOPICS from
 *                                offset 0 with synchronous pulls (QueueReader); shut down
 * </pre>
 *
 * Broker settings: --tx-check-interval-ms (transactionCheckInterval; tx-run defaults to one
 * hour so that only its own rounds check), --tx-timeout-ms (transactionTimeOut),
 * --tx-check-max (transactionCheckMax), --tx-op-max-size (transactionOpMsgMaxSize),
 * --tx-op-interval-ms (transactionOpBatchInterval). Lines printed: "txSent" per send, "txCheck"
 * per check the producer received, "txRound" per round, "txDone", "consumed" per message read.
 */
final class TransactionCommands {
    static final String OP_TOPIC = TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC;
    static final String HALF_TOPIC = TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC;
    static final String CHECK_MAX_TOPIC = TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC;

    private final BrokerHarness h;
    private TransactionMQProducer producer;
    private ExecutorService checkThreads;
    /** Plans by "seq". */
    private final Map<String, Plan> plans = new ConcurrentHashMap<>();
    /** tx-run: checks the producer received, held until the harness lets their answer through. */
    private final LinkedBlockingQueue<HeldCheck> held = new LinkedBlockingQueue<>();
    private volatile boolean holdChecks;
    private final AtomicLong endAnswers = new AtomicLong();
    private String defaultCheck = "UNKNOW";
    // A plan's states are checked when it is loaded (a typo fails the command, not a send).

    private static final class Plan {
        final String local;
        final List<String> checks = new ArrayList<>();
        int asked;

        Plan(String local) {
            this.local = local;
        }
    }

    private static final class HeldCheck {
        final long queueOffset;
        final String answer;
        final CountDownLatch release = new CountDownLatch(1);

        HeldCheck(long queueOffset, String answer) {
            this.queueOffset = queueOffset;
            this.answer = answer;
        }
    }

    TransactionCommands(BrokerHarness h) {
        this.h = h;
    }

    /** The transaction settings of the options on the broker's config. */
    static void configure(BrokerConfig bc, HarnessSupport.Args args) {
        // tx-run checks in rounds of its own: the broker's service waits an hour unless told.
        long interval = !args.rest.isEmpty() && args.rest.get(0).equals("tx-run") ? 3_600_000L
            : bc.getTransactionCheckInterval();
        bc.setTransactionCheckInterval(args.opt("tx-check-interval-ms", interval));
        bc.setTransactionTimeOut(args.opt("tx-timeout-ms", bc.getTransactionTimeOut()));
        bc.setTransactionCheckMax((int) args.opt("tx-check-max", bc.getTransactionCheckMax()));
        bc.setTransactionOpMsgMaxSize((int) args.opt("tx-op-max-size", bc.getTransactionOpMsgMaxSize()));
        bc.setTransactionOpBatchInterval((int) args.opt("tx-op-interval-ms", bc.getTransactionOpBatchInterval()));
    }

    private DefaultMessageStore store() {
        return (DefaultMessageStore) h.broker.getMessageStore();
    }

    private TransactionalMessageServiceImpl service() {
        return (TransactionalMessageServiceImpl) h.broker.getTransactionalMessageService();
    }

    /** COMMIT, ROLLBACK or UNKNOW (the client's own spelling of unknown). */
    private static LocalTransactionState state(String s) {
        switch (s) {
            case "COMMIT":
                return LocalTransactionState.COMMIT_MESSAGE;
            case "ROLLBACK":
                return LocalTransactionState.ROLLBACK_MESSAGE;
            case "UNKNOW":
                return LocalTransactionState.UNKNOW;
            default:
                throw new IllegalArgumentException("a transaction state is COMMIT, ROLLBACK or UNKNOW: " + s);
        }
    }

    // -- plans and the producer ----------------------------------------------------------

    @SuppressWarnings("unchecked")
    private List<Map<String, Object>> loadPlans(Path file) throws Exception {
        List<Map<String, Object>> described = Json.readObjects(file);
        for (Map<String, Object> d : described) {
            Map<String, Object> props = (Map<String, Object>) d.get("properties");
            String seq = props == null ? (String) d.get("seq") : (String) props.get("seq");
            if (seq == null) {
                throw new IllegalArgumentException("a plan line without seq: " + d);
            }
            Plan p = new Plan(d.get("local") == null ? "UNKNOW" : (String) d.get("local"));
            Object checks = d.get("checks");
            if (checks != null) {
                for (Object c : (List<Object>) checks) {
                    p.checks.add((String) c);
                }
            }
            state(p.local);
            p.checks.forEach(TransactionCommands::state);
            plans.put(seq, p);
        }
        return described;
    }

    private final TransactionListener listener = new TransactionListener() {
        @Override
        public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
            return state(plans.get(msg.getUserProperty("seq")).local);
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            String seq = msg.getUserProperty("seq");
            Plan p = seq == null ? null : plans.get(seq);
            String answer;
            int asked;
            if (p == null) {
                answer = defaultCheck;
                asked = 0;
            } else {
                synchronized (p) {
                    asked = p.asked++;
                    answer = asked < p.checks.size() ? p.checks.get(asked) : "UNKNOW";
                }
            }
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("kind", "txCheck");
            o.put("seq", seq);
            o.put("planned", p != null);
            o.put("asked", (long) asked);
            o.put("answer", answer);
            o.put("topic", msg.getTopic());
            o.put("queueId", (long) msg.getQueueId());
            o.put("transactionId", msg.getTransactionId());
            o.put("uniqKey", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            o.put("halfQueueOffset", msg.getQueueOffset());
            o.put("halfOffset", msg.getCommitLogOffset());
            o.put("checkTimes", msg.getProperty(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES));
            o.put("producerGroup", msg.getProperty(MessageConst.PROPERTY_PRODUCER_GROUP));
            print(o);
            if (holdChecks) {
                HeldCheck c = new HeldCheck(msg.getQueueOffset(), answer);
                held.add(c);
                try {
                    if (!c.release.await(120, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("check answer never let through");
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            if (!answer.equals("UNKNOW")) {
                endAnswers.incrementAndGet();
            }
            return state(answer);
        }
    };

    private void startProducer(String group, Iterable<String> topics) throws Exception {
        producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(BrokerHarness.LOOPBACK + ":" + h.args.opt("namesrv-port", 9876));
        producer.setInstanceName("interop-tx-producer");
        producer.setSendMsgTimeout(15_000);
        producer.setTransactionListener(listener);
        // Answers held by tx-run each keep a thread: more threads than checks in a round.
        checkThreads = Executors.newFixedThreadPool(64);
        producer.setExecutorService(checkThreads);
        producer.start();
        for (String topic : topics) {
            long deadline = System.currentTimeMillis() + 30_000;
            while (true) {
                try {
                    // Routes the client itself holds (its heartbeats go to their brokers).
                    producer.getDefaultMQProducerImpl().getMqClientFactory().updateTopicRouteInfoFromNameServer(topic);
                    if (!producer.fetchPublishMessageQueues(topic).isEmpty()) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("no route for " + topic);
                }
                Thread.sleep(200);
            }
        }
        // The broker asks a group's registered channel (ProducerManager): heartbeat now and wait.
        producer.getDefaultMQProducerImpl().getMqClientFactory().sendHeartbeatToAllBrokerWithLock();
        long deadline = System.currentTimeMillis() + 30_000;
        while (h.broker.getProducerManager().getAvailableChannel(group) == null) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the producer group " + group + " never registered");
            }
            Thread.sleep(50);
            producer.getDefaultMQProducerImpl().getMqClientFactory().sendHeartbeatToAllBrokerWithLock();
        }
    }

    /** Real topics the plan names, created with --queues queues (default 2) when unknown. */
    private List<String> createTopics(List<Map<String, Object>> described, String extra) throws Exception {
        h.admin = new DefaultMQAdminExt(15_000);
        h.admin.setNamesrvAddr(BrokerHarness.LOOPBACK + ":" + h.args.opt("namesrv-port", 9876));
        h.admin.setInstanceName("interop-admin");
        h.admin.start();
        Map<String, Integer> needed = new TreeMap<>();
        int queues = (int) h.args.opt("queues", 2);
        for (Map<String, Object> d : described) {
            if (d.get("topic") != null) {
                needed.put((String) d.get("topic"), queues);
            }
        }
        for (String t : extra.split(",")) {
            if (!t.isEmpty()) {
                needed.put(t, queues);
            }
        }
        String addr = BrokerHarness.LOOPBACK + ":" + h.args.opt("broker-port", 10911);
        for (Map.Entry<String, Integer> e : needed.entrySet()) {
            TopicConfig have = h.broker.getTopicConfigManager().getTopicConfigTable().get(e.getKey());
            if (have == null) {
                h.admin.createAndUpdateTopicConfig(addr, new TopicConfig(e.getKey(), e.getValue(), e.getValue()));
            }
        }
        return new ArrayList<>(needed.keySet());
    }

    // -- what the store holds ------------------------------------------------------------

    /** Every message of a queue from offset 0, decoded as the broker's bridge decodes them. */
    private List<MessageExt> readQueue(String topic, int qid) throws Exception {
        List<MessageExt> out = new ArrayList<>();
        long offset = store().getMinOffsetInQueue(topic, qid);
        long max = store().getMaxOffsetInQueue(topic, qid);
        while (offset < max) {
            GetMessageResult r = store().getMessage("interop-tx", topic, qid, offset, 32, null);
            if (r == null || r.getMessageBufferList().isEmpty()) {
                break;
            }
            try {
                for (ByteBuffer buf : r.getMessageBufferList()) {
                    out.add(MessageDecoder.decode(buf.slice(), true, false, false));
                }
                offset = r.getNextBeginOffset();
            } finally {
                r.release();
            }
        }
        return out;
    }

    /** Half queue offsets the written op messages name (comma-separated bodies). */
    private long opEntriesWritten() throws Exception {
        long n = 0;
        for (MessageExt m : readQueue(OP_TOPIC, 0)) {
            for (String s : new String(m.getBody(), StandardCharsets.UTF_8).split(",")) {
                if (!s.isEmpty()) {
                    n++;
                }
            }
        }
        return n;
    }

    /** Op entries queued in the broker's TransactionalOpBatchService context, not yet written. */
    private long opEntriesQueued() {
        long n = 0;
        for (MessageQueueOpContext c : service().getDeleteContext().values()) {
            n += c.getContextQueue().size();
        }
        return n;
    }

    /** Written or queued (a batch taken from the queue and not yet written counts in neither). */
    private long opEntries() throws Exception {
        return opEntriesQueued() + opEntriesWritten();
    }

    private void waitFor(String what, long timeoutMs, Check c) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!c.ok()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(5);
        }
    }

    interface Check {
        boolean ok() throws Exception;
    }

    private void waitOpsWritten(long expect) throws Exception {
        long wait = h.args.opt("tx-op-interval-ms", 3000) + 30_000;
        waitFor("every op entry written (" + expect + ")", wait, () -> {
            HarnessSupport.waitDispatched(store());
            return opEntriesQueued() == 0 && opEntriesWritten() >= expect;
        });
    }

    // -- tx-run --------------------------------------------------------------------------

    int run(String root, Path planFile) throws Exception {
        List<Map<String, Object>> described = loadPlans(planFile);
        h.init(root);
        h.startBroker();
        try {
            holdChecks = true;
            startProducer(h.args.opt("producer-group", "interop-tx-producer"), createTopics(described, ""));
            long ends = 0;
            for (Map<String, Object> d : described) {
                Message msg = BrokerHarness.message(d, Base64.getDecoder().decode((String) d.get("body")));
                String seq = msg.getUserProperty("seq");
                long before = opEntries();
                TransactionSendResult r = producer.sendMessageInTransaction(msg, null);
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("kind", "txSent");
                o.put("seq", seq);
                o.put("status", r.getSendStatus().name());
                o.put("localState", r.getLocalTransactionState().name());
                o.put("msgId", r.getMsgId());
                o.put("transactionId", r.getTransactionId());
                o.put("offsetMsgId", r.getOffsetMsgId());
                o.put("queueId", (long) r.getMessageQueue().getQueueId());
                o.put("halfQueueOffset", r.getQueueOffset());
                print(o);
                if (!state(plans.get(seq).local).equals(LocalTransactionState.UNKNOW)) {
                    ends++;
                    // Each end lands before the next send (the broker runs sends and ends on
                    // different executors): the order of the records is the order of the plan.
                    waitFor("the op entry of " + seq, 30_000, () -> opEntries() >= before + 1);
                }
                Object pause = d.get("pauseMs");
                if (pause != null) {
                    Thread.sleep((Long) pause);
                }
            }
            long rounds = h.args.opt("check-rounds", 0);
            long timeout = h.broker.getBrokerConfig().getTransactionTimeOut();
            int checkMax = h.broker.getBrokerConfig().getTransactionCheckMax();
            for (long round = 1; round <= rounds; round++) {
                waitOpsWritten(ends);
                Thread.sleep(timeout + 20); // every half old enough
                long halvesBefore = store().getMaxOffsetInQueue(HALF_TOPIC, 0);
                long discardsBefore = store().getMaxOffsetInQueue(CHECK_MAX_TOPIC, 0);
                service().check(timeout, checkMax, h.broker.getTransactionalMessageCheckListener());
                HarnessSupport.waitDispatched(store());
                long copies = store().getMaxOffsetInQueue(HALF_TOPIC, 0) - halvesBefore;
                waitFor(copies + " checks of round " + round, 30_000, () -> held.size() >= copies);
                List<HeldCheck> answers = new ArrayList<>();
                held.drainTo(answers);
                answers.sort(Comparator.comparingLong(c -> c.queueOffset));
                for (HeldCheck c : answers) {
                    long before = opEntries();
                    c.release.countDown();
                    if (!c.answer.equals("UNKNOW")) {
                        ends++;
                        waitFor("the op entry of check " + c.queueOffset, 30_000, () -> opEntries() >= before + 1);
                    }
                }
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("kind", "txRound");
                o.put("round", round);
                o.put("copies", copies);
                o.put("answers", (long) answers.size());
                o.put("discards", store().getMaxOffsetInQueue(CHECK_MAX_TOPIC, 0) - discardsBefore);
                print(o);
            }
            waitOpsWritten(ends);
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("kind", "txDone");
            o.put("ends", ends);
            o.put("halfMax", store().getMaxOffsetInQueue(HALF_TOPIC, 0));
            o.put("opMax", store().getMaxOffsetInQueue(OP_TOPIC, 0));
            o.put("opEntries", opEntriesWritten());
            o.put("discardMax", store().getMaxOffsetInQueue(CHECK_MAX_TOPIC, 0));
            print(o);
        } finally {
            shutdownClients();
        }
        h.stopAll();
        return 0;
    }

    // -- tx-await ------------------------------------------------------------------------

    int await(String root, Path planFile, String topics) throws Exception {
        List<Map<String, Object>> described = loadPlans(planFile);
        defaultCheck = h.args.opt("default-check", "UNKNOW");
        h.init(root);
        long opBefore = opEntriesWritten();
        h.startBroker();
        try {
            List<String> names = createTopics(described, topics);
            startProducer(h.args.opt("producer-group", "interop-tx-producer"), names);
            long expect = h.args.opt("expect-ends", 0);
            long timeout = h.args.opt("timeout-ms", 60_000);
            waitFor(expect + " ends through the broker's check", timeout,
                () -> endAnswers.get() >= expect && opEntries() >= opBefore + expect);
            Thread.sleep(h.args.opt("linger-ms", 0));
            waitOpsWritten(opBefore + endAnswers.get());
            Map<String, Object> done = new LinkedHashMap<>();
            done.put("kind", "txDone");
            done.put("ends", endAnswers.get());
            done.put("opEntriesBefore", opBefore);
            done.put("opEntries", opEntriesWritten());
            done.put("halfMax", store().getMaxOffsetInQueue(HALF_TOPIC, 0));
            done.put("discardMax", store().getMaxOffsetInQueue(CHECK_MAX_TOPIC, 0));
            print(done);
            consume(topics);
        } finally {
            shutdownClients();
        }
        h.stopAll();
        return 0;
    }

    /** Every message of the topics from offset 0, pulled through the broker. */
    private void consume(String topics) throws Exception {
        List<String> names = new ArrayList<>();
        for (String t : topics.split(",")) {
            if (!t.isEmpty()) {
                names.add(t);
            }
        }
        if (names.isEmpty()) {
            return;
        }
        HarnessSupport.waitDispatched(store());
        long deadline = System.currentTimeMillis() + 60_000;
        try (QueueReader reader = new QueueReader(BrokerHarness.LOOPBACK + ":" + h.args.opt("namesrv-port", 9876),
            "interop-tx-reader")) {
            for (String topic : names) {
                List<MessageQueue> queues = reader.queues(topic);
                Collections.sort(queues);
                for (MessageQueue mq : queues) {
                    long until = store().getMaxOffsetInQueue(topic, mq.getQueueId());
                    for (MessageExt m : reader.read(mq, 0, until, deadline)) {
                        Map<String, Object> o = BrokerHarness.describe(m);
                        o.put("kind", "consumed");
                        print(o);
                    }
                }
            }
        }
    }

    private void shutdownClients() {
        for (Runnable r : new Runnable[] {
            () -> { if (producer != null) producer.shutdown(); },
            () -> { if (checkThreads != null) checkThreads.shutdownNow(); },
        }) {
            try {
                r.run();
            } catch (Throwable t) {
                t.printStackTrace();
            }
        }
        producer = null;
        checkThreads = null;
        for (HeldCheck c : held) {
            c.release.countDown();
        }
    }
}
