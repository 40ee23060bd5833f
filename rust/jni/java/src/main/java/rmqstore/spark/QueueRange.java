package rmqstore.spark;

import java.io.Serializable;

/** Offsets [start, end) of one queue. */
final class QueueRange implements Serializable {
  private static final long serialVersionUID = 1L;

  final String topic;
  final int queueId;
  final long start;
  final long end;

  QueueRange(String topic, int queueId, long start, long end) {
    this.topic = topic;
    this.queueId = queueId;
    this.start = start;
    this.end = end;
  }

  long size() {
    return end - start;
  }

  @Override
  public String toString() {
    return topic + "/" + queueId + "[" + start + ", " + end + ")";
  }
}
