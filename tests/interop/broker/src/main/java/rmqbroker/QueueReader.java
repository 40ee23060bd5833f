package rmqbroker;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.store.RemoteBrokerOffsetStore;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Reads queues through the broker from a given offset, one synchronous pull at a time on the
 * calling thread, and commits a group's offsets to the broker with a synchronous request.
 *
 * <p>Why not DefaultLitePullConsumer with {@code seek}: the lite consumer starts a pull task per
 * queue as soon as queues are assigned, and {@code seek} interrupts a task that may be in the
 * middle of a request. RocketMQ's remoting client (5.5.1, {@code NettyRemotingClient.invokeSync})
 * reports the interrupt as a RemotingSendRequestException and closes the channel to the broker,
 * which every request in flight shares; the next seek's {@code minOffset} then failed with "send
 * request failed". The race only showed on a loaded machine (the broker log of such a run has
 * "Caused by: java.lang.InterruptedException" under "An error occurred in pull message process").
 * Here nothing runs in the background and nothing is interrupted.
 */
final class QueueReader implements AutoCloseable {
    private static final int BATCH = 32;
    private static final long PULL_TIMEOUT_MS = 15_000;

    private final DefaultMQPullConsumer consumer;

    QueueReader(String namesrvAddr, String group) throws Exception {
        consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrvAddr);
        consumer.setInstanceName(group);
        consumer.start();
    }

    /** The topic's queues as the name server routes them. */
    List<MessageQueue> queues(String topic) throws Exception {
        return new ArrayList<>(consumer.fetchSubscribeMessageQueues(topic));
    }

    /**
     * Every message of {@code mq} from {@code from} up to {@code until} (exclusive), in queue
     * order; waits (until {@code deadline}, epoch ms) for messages not dispatched yet.
     */
    List<MessageExt> read(MessageQueue mq, long from, long until, long deadline) throws Exception {
        List<MessageExt> out = new ArrayList<>();
        long next = from;
        while (next < until) {
            PullResult r = consumer.pull(mq, "*", next, BATCH, PULL_TIMEOUT_MS);
            switch (r.getPullStatus()) {
                case FOUND:
                    for (MessageExt m : r.getMsgFoundList()) {
                        if (m.getQueueOffset() < until) {
                            out.add(m);
                        }
                    }
                    next = r.getNextBeginOffset();
                    break;
                case NO_NEW_MSG:
                case NO_MATCHED_MSG:
                    if (r.getNextBeginOffset() > next) {
                        next = r.getNextBeginOffset();
                        break;
                    }
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("the broker served " + mq + " only up to offset " + next
                            + " of " + until + " (" + r.getPullStatus() + ")");
                    }
                    Thread.sleep(50);
                    break;
                default:
                    throw new IllegalStateException("pull of " + mq + " at offset " + next + ": " + r.getPullStatus()
                        + " (min " + r.getMinOffset() + ", max " + r.getMaxOffset() + ", next " + r.getNextBeginOffset() + ")");
            }
        }
        return out;
    }

    /** Stores each offset as the group's committed offset, one synchronous request per queue. */
    void commit(Map<MessageQueue, Long> offsets) throws Exception {
        RemoteBrokerOffsetStore store = (RemoteBrokerOffsetStore) consumer.getOffsetStore();
        for (Map.Entry<MessageQueue, Long> e : offsets.entrySet()) {
            consumer.updateConsumeOffset(e.getKey(), e.getValue());
            store.updateConsumeOffsetToBroker(e.getKey(), e.getValue(), false);
        }
    }

    @Override
    public void close() {
        consumer.shutdown();
    }
}
