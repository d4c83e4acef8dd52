package io.seedance.flink;

import org.apache.flink.api.common.eventtime.SerializableTimestampAssigner;

/**
 * The event time {@link FramedOtlpDeserializer} wrote into a record's header. A record with
 * none (unreadable, no span in range, null) gets Long.MIN_VALUE and so does not move its
 * partition's watermark.
 */
public final class FramedEventTime implements SerializableTimestampAssigner<byte[]> {
    private static final long serialVersionUID = 1L;

    @Override
    public long extractTimestamp(byte[] element, long recordTimestamp) {
        long time = 0;
        for (int i = 0; i < 8; i++) {
            time = (time << 8) | (element[FramedOtlpDeserializer.EVENT_TIME_AT + i] & 0xFFL);
        }
        return time;
    }
}
