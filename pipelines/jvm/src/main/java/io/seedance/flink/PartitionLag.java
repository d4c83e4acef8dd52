package io.seedance.flink;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.PartitionInfo;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.TopicPartition;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Per JVM and per (consumer group, topic): how far this JVM's readers have read each
 * partition (the deserializer reports every record's offset) and where each partition's log
 * ends (a consumer of its own asks the broker every second), so that a watermark generator
 * can tell a quiet partition from one with records not read yet ({@link LagAwareWatermarks}).
 *
 * <p>A partition nothing has been read from yet has records to read when its end is past
 * where reading starts: the group's committed offset ({@code committed}), the log's start
 * ({@code earliest}), or its end when the job started ({@code latest}). Readers in another
 * JVM (a cluster with several TaskManagers) are not seen here: their partitions look unread,
 * which only keeps this JVM's unread partitions from going idle early (never the reverse).
 */
public final class PartitionLag {
    private static final Map<String, PartitionLag> BY_KEY = new ConcurrentHashMap<>();
    private static final long POLL_MS = 1_000;
    // a poller nobody asked for this long stops (the job ended, or its sources were
    // rescheduled): it would otherwise hold the job's class loader and poll for ever
    private static final long UNUSED_MS = 30_000;
    // a partition's watermark reported longer ago than this holds no other: its generator
    // is gone (a live one reports every watermark period; a long Python call in the same
    // task may delay that by seconds, not by this much)
    static final long REPORTED_WITHIN_MS = 30_000;
    // how long after records come back (a producer's return) its writes to the other
    // partitions are taken to have landed: an answer asked sooner may miss them
    static final long RETURN_SETTLE_MS = 1_000;

    private final Map<Integer, Long> nextToRead = new ConcurrentHashMap<>();
    private final Map<Integer, Long> lastSeen = new ConcurrentHashMap<>(); // wall clock, ms
    // each partition's own watermark and when its generator reported it (wall clock, ms)
    private final Map<Integer, long[]> watermarks = new ConcurrentHashMap<>();
    private volatile Map<Integer, Long> ends; // null until the first answer
    private volatile Map<Integer, Long> starts;
    // when the answer in ends/starts was asked for (wall clock, ms): it shows at least what
    // was written before then
    private volatile long answerAskedAt = Long.MIN_VALUE;
    // the latest time a partition's records came back after a silence of the idleness
    private volatile long resumedAt = Long.MIN_VALUE;
    private volatile boolean watched;
    private volatile long askedAt = System.currentTimeMillis();
    private String topic; // what the poller asks about (set by the first watch)
    private Properties client;
    private String startingMode;

    private PartitionLag() {}

    static String key(String group, String topic) {
        return group + "\u0000" + topic;
    }

    public static PartitionLag of(String group, String topic) {
        return BY_KEY.computeIfAbsent(key(group, topic), k -> new PartitionLag());
    }

    /** A record at {@code offset} of {@code partition} was read. */
    public void read(int partition, long offset) {
        nextToRead.merge(partition, offset + 1, Math::max);
    }

    /** A record of {@code partition} was read at {@code nowMs} (its generator's clock). */
    public void seen(int partition, long nowMs) {
        lastSeen.put(partition, nowMs);
    }

    /** {@code partition}'s own watermark at {@code nowMs} (its generator's, before any
     * hold; a live generator reports every watermark period while not idle). */
    public void watermark(int partition, long watermark, long nowMs) {
        watermarks.put(partition, new long[] {watermark, nowMs});
    }

    /**
     * Whether a partition last read at {@code lastReadMs} (or first asked about then)
     * counts as idle at {@code nowMs}: silent for {@code idlenessMs} and read up to its end
     * by a broker answer asked after its last record and at least RETURN_SETTLE_MS after
     * the topic's records last came back ({@link #resumed}: what was said before may miss
     * what the returning producer wrote here); or silent for {@code backlogIdlenessMs},
     * whatever is known (counted from its own last record, so that returns elsewhere never
     * keep a partition that stopped from going idle). A partition not read from yet
     * ({@code partition} < 0): idle when no partition nothing was read from here has
     * records.
     */
    public boolean quiet(int partition, long lastReadMs, long nowMs, long idlenessMs,
                         long backlogIdlenessMs) {
        long silent = nowMs - lastReadMs;
        if (silent >= backlogIdlenessMs) {
            return true;
        }
        long fresh = resumedAt == Long.MIN_VALUE ? lastReadMs
                : Math.max(lastReadMs, resumedAt + RETURN_SETTLE_MS);
        if (silent < idlenessMs || !answeredSince(fresh)) {
            return false;
        }
        Boolean unread = partition < 0 ? unreadBeyondTheRead() : hasUnread(partition);
        return unread != null && !unread;
    }

    /** The least own watermark of the partitions read here, other than {@code partition},
     * that are not idle at {@code nowMs} (Long.MAX_VALUE: none). A report older than
     * REPORTED_WITHIN_MS is left out: its generator is gone (a failed or finished task; its
     * partition may be read in another JVM now). */
    public long heldBy(int partition, long nowMs, long idlenessMs, long backlogIdlenessMs) {
        long least = Long.MAX_VALUE;
        for (Map.Entry<Integer, long[]> other : watermarks.entrySet()) {
            int p = other.getKey();
            long[] report = other.getValue();
            Long read = lastSeen.get(p);
            if (p == partition || read == null || report[0] >= least
                    || nowMs - report[1] > REPORTED_WITHIN_MS) {
                continue;
            }
            if (!quiet(p, read, nowMs, idlenessMs, backlogIdlenessMs)) {
                least = report[0];
            }
        }
        return least;
    }

    /** A partition's records came back at {@code nowMs} after a silence: until the broker
     * answers again, a quiet partition may hold records written meanwhile. */
    public void resumed(long nowMs) {
        if (nowMs > resumedAt) {
            resumedAt = nowMs;
        }
    }

    /** Whether the ends known now were asked for at or after {@code timeMs}. */
    public boolean answeredSince(long timeMs) {
        return answerAskedAt >= timeMs;
    }

    /** A generator still wants to know (the poller stops when none asks for a while, and
     * starts again when one does). */
    public void asked(long nowMs) {
        askedAt = nowMs;
        if (!watched && topic != null) {
            watch(topic, client, startingMode);
        }
    }

    /** Whether {@code partition} (read from here before) has records not read yet; null
     * while its end is not known. */
    public Boolean hasUnread(int partition) {
        Map<Integer, Long> known = ends;
        Long end = known == null ? null : known.get(partition);
        Long next = nextToRead.get(partition);
        if (end == null || next == null) {
            return null;
        }
        return end > next;
    }

    /** Whether some partition nothing has been read from here yet has records to read; null
     * while that is not known. */
    public Boolean unreadBeyondTheRead() {
        Map<Integer, Long> known = ends;
        Map<Integer, Long> from = starts;
        if (known == null || from == null) {
            return null;
        }
        for (Map.Entry<Integer, Long> end : known.entrySet()) {
            if (nextToRead.containsKey(end.getKey())) {
                continue;
            }
            Long start = from.get(end.getKey());
            if (start == null || end.getValue() > start) {
                return true;
            }
        }
        return false;
    }

    /** Test hook: the log ends and starts as if the broker had answered so, each as
     * "partition:offset,...", to a question asked at {@code askedAtMs}. */
    public void known(String endOffsets, String startOffsets, long askedAtMs) {
        starts = parse(startOffsets);
        ends = parse(endOffsets);
        answerAskedAt = askedAtMs;
    }

    /** As {@link #known(String, String, long)}, asked later than any time a test uses. */
    public void known(String endOffsets, String startOffsets) {
        known(endOffsets, startOffsets, Long.MAX_VALUE);
    }

    private static Map<Integer, Long> parse(String offsets) {
        Map<Integer, Long> out = new HashMap<>();
        for (String pair : offsets.split(",")) {
            String[] parts = pair.split(":");
            out.put(Integer.parseInt(parts[0].trim()), Long.parseLong(parts[1].trim()));
        }
        return out;
    }

    /** Start asking the broker for the topic's ends (once per JVM, group and topic). */
    public synchronized void watch(String topic, Properties client, String startingMode) {
        askedAt = System.currentTimeMillis();
        if (watched) {
            return;
        }
        this.topic = topic;
        this.client = client;
        this.startingMode = startingMode;
        watched = true;
        Thread poller = new Thread(() -> poll(topic, client, startingMode),
                "seedance-partition-lag-" + topic);
        poller.setDaemon(true);
        poller.start();
    }

    private void poll(String topic, Properties client, String startingMode) {
        Properties props = new Properties();
        props.putAll(client);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        props.put("client.id", "seedance-partition-lag-" + topic);
        while (true) {
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
                while (System.currentTimeMillis() - askedAt < UNUSED_MS) {
                    refresh(consumer, topic, startingMode);
                    Thread.sleep(POLL_MS);
                }
                synchronized (this) {
                    watched = false;
                    ends = null; // a later job asks afresh
                }
                return;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            } catch (RuntimeException e) {
                // a broker away for a while: nothing is known meanwhile, so nothing is idle
                // but by the backlog idleness; ask again
                ends = null;
                try {
                    Thread.sleep(5 * POLL_MS);
                } catch (InterruptedException stop) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }

    private void refresh(KafkaConsumer<byte[], byte[]> consumer, String topic,
                         String startingMode) {
        long asked = System.currentTimeMillis();
        List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(10));
        Set<TopicPartition> partitions = new HashSet<>();
        for (PartitionInfo info : infos) {
            partitions.add(new TopicPartition(topic, info.partition()));
        }
        Map<Integer, Long> end = byPartition(consumer.endOffsets(partitions,
                Duration.ofSeconds(10)));
        Map<Integer, Long> start;
        if ("latest".equals(startingMode)) {
            start = starts == null ? end : starts;
        } else {
            start = byPartition(consumer.beginningOffsets(partitions, Duration.ofSeconds(10)));
            if ("committed".equals(startingMode)) {
                Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(partitions,
                        Duration.ofSeconds(10));
                for (Map.Entry<TopicPartition, OffsetAndMetadata> c : committed.entrySet()) {
                    if (c.getValue() != null) { // none committed: the job starts at the start
                        start.put(c.getKey().partition(), c.getValue().offset());
                    }
                }
            }
        }
        starts = start;
        ends = end;
        answerAskedAt = asked;
    }

    private static Map<Integer, Long> byPartition(Map<TopicPartition, Long> offsets) {
        Map<Integer, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, Long> o : offsets.entrySet()) {
            out.put(o.getKey().partition(), o.getValue());
        }
        return out;
    }
}
