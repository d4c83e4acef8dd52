package io.seedance.flink;

import java.util.Properties;
import org.apache.flink.api.common.eventtime.TimestampAssigner;
import org.apache.flink.api.common.eventtime.TimestampAssignerSupplier;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkGeneratorSupplier;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;

/**
 * Per-partition watermarks for framed records ({@link FramedOtlpDeserializer}): bounded
 * out-of-orderness over each record's event time, and idleness that never takes a partition
 * with records not read yet for a quiet one.
 *
 * <p>Flink's own idleness declares a partition idle after a spell of processing time
 * without records, whatever the reason. In a catch-up a partition goes without records only
 * because its reader is busy elsewhere (a zstd batch decompresses into most of a partition),
 * and one nothing has been read from yet is silent from the start: declared idle, they let
 * the watermark run ahead of data that is waiting. Here a partition silent for
 * {@code idleness} is idle only once everything in it has been read ({@link PartitionLag}:
 * the end offsets the broker reports against what the readers in this JVM have read; a
 * partition nothing was read from, only when no such partition has records to read). Where
 * that cannot be known (no answer from the broker), a partition is idle after {@code
 * backlogIdleness} of silence: a reader that never comes back must not hold time back for
 * ever. When records come back after a silence of the idleness (a producer that paused),
 * the other partitions count as idle only by a broker answer asked a second or more after
 * that: the producer may have written to them too.
 *
 * <p>Flink takes the minimum over partitions within a source subtask only. Across subtasks
 * an input that was idle comes back behind the watermark without holding it (it counts
 * again once it catches up), so a partition's watermark here goes no further than that of
 * any other partition of the topic read in this JVM that is not idle ({@link
 * PartitionLag#heldBy}). Readers in another JVM are not seen.
 *
 * <p>Which events count never depends on this (udfs/journeys/arrival.py); it decides how
 * far the watermark can run ahead, so what the journeys must keep to correct.
 */
public final class LagAwareWatermarks implements WatermarkStrategy<byte[]> {
    private static final long serialVersionUID = 1L;
    static final int PARTITION_AT = 2;
    // an idleness at least this long is never (a bounded run's: see otlp_event_time)
    static final long NEVER_IDLE_MS = 365L * 86_400_000;

    private final long outOfOrdernessMs;
    private final long idlenessMs;
    private final long backlogIdlenessMs;
    private final String group;
    private final String topic;
    private final Properties client;
    private final String startingMode;

    /** Without a broker to ask (tests of the timing alone): idle only after the backlog
     * idleness. */
    public LagAwareWatermarks(long outOfOrdernessMs, long idlenessMs, long backlogIdlenessMs) {
        this(outOfOrdernessMs, idlenessMs, backlogIdlenessMs, null, null, null, null);
    }

    /**
     * @param group the source's consumer group, @param topic its topic, @param client the
     * Kafka client settings (bootstrap servers, security) to ask the broker for the ends of
     * the topic's partitions with, @param startingMode where the source starts reading a
     * partition it has no offset for: earliest, latest or committed
     */
    public LagAwareWatermarks(long outOfOrdernessMs, long idlenessMs, long backlogIdlenessMs,
                              String group, String topic, Properties client,
                              String startingMode) {
        this.outOfOrdernessMs = outOfOrdernessMs;
        this.idlenessMs = idlenessMs;
        this.backlogIdlenessMs = Math.max(backlogIdlenessMs, idlenessMs);
        this.group = group;
        this.topic = topic;
        this.client = client;
        this.startingMode = startingMode;
    }

    @Override
    public WatermarkGenerator<byte[]> createWatermarkGenerator(
            WatermarkGeneratorSupplier.Context context) {
        PartitionLag lag = null;
        if (topic != null) {
            lag = PartitionLag.of(group, topic);
            lag.watch(topic, client, startingMode);
        }
        return new Generator(outOfOrdernessMs, idlenessMs, backlogIdlenessMs, lag);
    }

    @Override
    public TimestampAssigner<byte[]> createTimestampAssigner(
            TimestampAssignerSupplier.Context context) {
        return new FramedEventTime();
    }

    /** A partition's generator asking {@code lag} (tests drive it with a clock of their
     * own: {@link Generator#seen}, {@link Generator#idleAt}). */
    public static Generator generator(long idlenessMs, long backlogIdlenessMs,
                                      PartitionLag lag) {
        return new Generator(0, idlenessMs, backlogIdlenessMs, lag);
    }

    static int partition(byte[] element) {
        int p = 0;
        for (int i = 0; i < 4; i++) {
            p = (p << 8) | (element[PARTITION_AT + i] & 0xFF);
        }
        return p;
    }

    /** One partition's generator. */
    public static final class Generator implements WatermarkGenerator<byte[]> {
        private final long outOfOrdernessMs;
        private final long idlenessMs;
        private final long backlogIdlenessMs;
        private final PartitionLag lag;
        private long maxTimestamp;
        private long lastRecordAt = -1; // wall clock, ms
        private int partition = -1; // known from its first record

        Generator(long outOfOrdernessMs, long idlenessMs, long backlogIdlenessMs,
                  PartitionLag lag) {
            this.outOfOrdernessMs = outOfOrdernessMs;
            this.idlenessMs = idlenessMs;
            this.backlogIdlenessMs = backlogIdlenessMs;
            this.lag = lag;
            this.maxTimestamp = Long.MIN_VALUE + outOfOrdernessMs + 1;
        }

        @Override
        public void onEvent(byte[] event, long eventTimestamp, WatermarkOutput output) {
            seen(event, System.currentTimeMillis());
            maxTimestamp = Math.max(maxTimestamp, eventTimestamp);
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {
            long now = System.currentTimeMillis();
            if (idleAt(now)) {
                output.markIdle(); // as Flink's own idleness: every period while silent
                return;
            }
            output.emitWatermark(new Watermark(watermarkAt(now)));
        }

        /** This partition's own watermark (bounded out-of-orderness over what it read). */
        public long ownWatermark() {
            return maxTimestamp - outOfOrdernessMs - 1;
        }

        /** The watermark to emit at {@code nowMs}: its own, and no further than that of
         * any other partition of the topic read in this JVM that is not idle. Flink takes
         * the minimum within a subtask only; across subtasks, an input that was idle
         * comes back behind the watermark without holding it (it counts again only once
         * it catches up), so after a pause one subtask's partition could run the
         * watermark days ahead of records another subtask has still to read. */
        public long watermarkAt(long nowMs) {
            long own = ownWatermark();
            if (lag == null || partition < 0) {
                return own;
            }
            lag.watermark(partition, own, nowMs);
            if (idlenessMs >= NEVER_IDLE_MS) {
                return own; // bounded: no input is ever idle, Flink's minimum holds
            }
            return Math.min(own, lag.heldBy(partition, nowMs, idlenessMs, backlogIdlenessMs));
        }

        /** A record read at {@code nowMs} (wall clock). */
        public void seen(byte[] event, long nowMs) {
            partition = partition(event);
            if (lag != null) {
                // after a silence as long as the idleness, records again: the producers
                // are back, and what the broker said of the other partitions may be stale
                if (lastRecordAt >= 0 && nowMs - lastRecordAt >= idlenessMs) {
                    lag.resumed(nowMs);
                }
                lag.seen(partition, nowMs);
            }
            lastRecordAt = nowMs;
        }

        /** Whether the partition counts as idle at {@code nowMs}. */
        public boolean idleAt(long nowMs) {
            if (lastRecordAt < 0) { // silence counts from the first question
                lastRecordAt = nowMs;
            }
            if (lag == null) {
                return nowMs - lastRecordAt >= backlogIdlenessMs;
            }
            lag.asked(nowMs);
            return lag.quiet(partition, lastRecordAt, nowMs, idlenessMs, backlogIdlenessMs);
        }
    }
}
