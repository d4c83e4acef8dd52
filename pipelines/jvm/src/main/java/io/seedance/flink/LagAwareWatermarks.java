package io.seedance.flink;

import java.time.Duration;
import java.util.Properties;
import org.apache.flink.api.common.eventtime.BoundedOutOfOrdernessWatermarks;
import org.apache.flink.api.common.eventtime.TimestampAssigner;
import org.apache.flink.api.common.eventtime.TimestampAssignerSupplier;
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
 * ever. Which events count never depends on this (udfs/journeys/arrival.py); it decides how far the
 * watermark can run ahead, so what the journeys must keep to correct.
 */
public final class LagAwareWatermarks implements WatermarkStrategy<byte[]> {
    private static final long serialVersionUID = 1L;
    static final int PARTITION_AT = 2;

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
        return new Generator(
                new BoundedOutOfOrdernessWatermarks<>(Duration.ofMillis(outOfOrdernessMs)),
                idlenessMs, backlogIdlenessMs, lag);
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
        return new Generator(new BoundedOutOfOrdernessWatermarks<>(Duration.ZERO),
                idlenessMs, backlogIdlenessMs, lag);
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
        private final WatermarkGenerator<byte[]> watermarks;
        private final long idlenessMs;
        private final long backlogIdlenessMs;
        private final PartitionLag lag;
        private long lastRecordAt = -1; // wall clock, ms
        private int partition = -1; // known from its first record

        Generator(WatermarkGenerator<byte[]> watermarks, long idlenessMs,
                  long backlogIdlenessMs, PartitionLag lag) {
            this.watermarks = watermarks;
            this.idlenessMs = idlenessMs;
            this.backlogIdlenessMs = backlogIdlenessMs;
            this.lag = lag;
        }

        @Override
        public void onEvent(byte[] event, long eventTimestamp, WatermarkOutput output) {
            seen(event, System.currentTimeMillis());
            watermarks.onEvent(event, eventTimestamp, output);
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {
            if (idleAt(System.currentTimeMillis())) {
                output.markIdle(); // as Flink's own idleness: every period while silent
                return;
            }
            watermarks.onPeriodicEmit(output);
        }

        /** A record read at {@code nowMs} (wall clock). */
        public void seen(byte[] event, long nowMs) {
            lastRecordAt = nowMs;
            partition = partition(event);
        }

        /** Whether the partition counts as idle at {@code nowMs}. */
        public boolean idleAt(long nowMs) {
            if (lastRecordAt < 0) { // silence counts from the first question
                lastRecordAt = nowMs;
            }
            if (lag != null) {
                lag.asked(nowMs);
            }
            long silent = nowMs - lastRecordAt;
            if (silent >= backlogIdlenessMs) {
                return true;
            }
            if (silent < idlenessMs || lag == null) {
                return false;
            }
            Boolean unread = partition < 0 ? lag.unreadBeyondTheRead()
                    : lag.hasUnread(partition);
            return unread != null && !unread;
        }
    }
}
