package io.seedance.flink;

import java.time.Duration;
import org.apache.flink.api.common.eventtime.BoundedOutOfOrdernessWatermarks;
import org.apache.flink.api.common.eventtime.TimestampAssigner;
import org.apache.flink.api.common.eventtime.TimestampAssignerSupplier;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkGeneratorSupplier;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;

/**
 * Per-partition watermarks for framed records ({@link FramedOtlpDeserializer}): bounded
 * out-of-orderness over each record's event time, and idleness that does not take a
 * partition whose reader is behind for a quiet one.
 *
 * <p>Flink's own idleness declares a partition idle after a spell of processing time
 * without records, whatever the reason. While a source catches up on a backlog, a partition
 * can go without records for a while only because its reader is busy emitting another
 * partition's large fetch (a zstd batch decompresses into a whole partition's worth);
 * declared idle, it lets the watermark run ahead of data that is waiting. Here a partition
 * is idle after {@code idleness} without records only if its last record was read within
 * {@code idleness} of the broker taking it (the record's Kafka timestamp: the reader was
 * at the head, so the silence is the producers'); a partition last read behind the head is
 * idle only after {@code backlogIdleness} (a reader that never comes back must not hold
 * time back for ever). Events that still come behind the watermark correct, within the
 * job's correction horizon.
 */
public final class LagAwareWatermarks implements WatermarkStrategy<byte[]> {
    private static final long serialVersionUID = 1L;
    static final int KAFKA_TIMESTAMP_AT = 14;

    private final long outOfOrdernessMs;
    private final long idlenessMs;
    private final long backlogIdlenessMs;

    public LagAwareWatermarks(long outOfOrdernessMs, long idlenessMs, long backlogIdlenessMs) {
        this.outOfOrdernessMs = outOfOrdernessMs;
        this.idlenessMs = idlenessMs;
        this.backlogIdlenessMs = Math.max(backlogIdlenessMs, idlenessMs);
    }

    @Override
    public WatermarkGenerator<byte[]> createWatermarkGenerator(
            WatermarkGeneratorSupplier.Context context) {
        return new Generator(
                new BoundedOutOfOrdernessWatermarks<>(Duration.ofMillis(outOfOrdernessMs)),
                idlenessMs, backlogIdlenessMs);
    }

    @Override
    public TimestampAssigner<byte[]> createTimestampAssigner(
            TimestampAssignerSupplier.Context context) {
        return new FramedEventTime();
    }

    static long kafkaTimestamp(byte[] element) {
        long time = 0;
        for (int i = 0; i < 8; i++) {
            time = (time << 8) | (element[KAFKA_TIMESTAMP_AT + i] & 0xFFL);
        }
        return time;
    }

    /** One partition's generator. */
    public static final class Generator implements WatermarkGenerator<byte[]> {
        private final WatermarkGenerator<byte[]> watermarks;
        private final long idlenessMs;
        private final long backlogIdlenessMs;
        private long lastRecordAt = -1; // wall clock, ms
        private long lastReadLagMs = 0; // how far behind the broker the last record was read

        Generator(WatermarkGenerator<byte[]> watermarks, long idlenessMs, long backlogIdlenessMs) {
            this.watermarks = watermarks;
            this.idlenessMs = idlenessMs;
            this.backlogIdlenessMs = backlogIdlenessMs;
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
            long appended = kafkaTimestamp(event);
            lastRecordAt = nowMs;
            lastReadLagMs = appended > 0 ? Math.max(0, nowMs - appended) : 0;
        }

        /** Whether the partition counts as idle at {@code nowMs}. */
        public boolean idleAt(long nowMs) {
            if (lastRecordAt < 0) { // nothing read yet: as Flink's idleness, from the start
                lastRecordAt = nowMs;
            }
            long limit = lastReadLagMs <= idlenessMs ? idlenessMs : backlogIdlenessMs;
            return nowMs - lastRecordAt >= limit;
        }
    }
}
