package io.seedance.flink;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.flink.util.Collector;

/**
 * Each Kafka record of an OTLP spans topic as one byte array: a fixed header, then the value
 * as it came. The header carries what the Python decoder cannot learn from the value alone:
 * where the record came from (partition, offset: a dead letter names them), whether the value
 * was null (a tombstone is dead-lettered, not dropped), the record's own event time (its newest
 * span start, which {@link FramedEventTime} hands to the per-partition watermark generators) and
 * the newest event time of its partition before it (kept in the layout; lateness is decided by
 * the record's Kafka timestamp, which the header also carries: udfs/journeys/arrival.py).
 * Trace records' event time is their newest span start, metrics records' their newest data
 * point.
 *
 * <p>Header, big-endian ({@value #HEADER_BYTES} bytes): version (1 byte), flags (1 byte: 1 =
 * null value), partition (int32), offset (int64), Kafka timestamp (int64), event time ms
 * (int64), partition's newest event time ms before this record (int64); {@link
 * OtlpEventTime#NONE} where there is none.
 *
 * <p>With a consumer group, each record's offset is reported to {@link PartitionLag}, so that
 * the watermarks never take a partition with records still to read for an idle one.
 */
public final class FramedOtlpDeserializer implements KafkaRecordDeserializationSchema<byte[]> {
    private static final long serialVersionUID = 1L;
    public static final byte VERSION = 1;
    public static final int HEADER_BYTES = 38;
    public static final int EVENT_TIME_AT = 22;
    private static final long MIN_MS = 946_684_800_000L; // 2000-01-01T00:00:00Z
    private static final String NO_SIGNAL = "NONE";
    private static final String ARRIVAL = "ARRIVAL";

    private final long maxFutureMs;
    private final OtlpEventTime.Signal signal;
    private final boolean byArrival; // the record's Kafka timestamp is its event time
    private final String group; // null: read positions are not reported (PartitionLag)
    private transient Map<Integer, Long> newestByPartition;
    private transient PartitionLag lag;

    /** Trace records: @param maxFutureMs start times further ahead of this clock are not
     * event time */
    public FramedOtlpDeserializer(long maxFutureMs) {
        this(maxFutureMs, "TRACES");
    }

    /** @param signal TRACES or METRICS: where a record's event time is; NONE: the record
     * is no OTLP (a JSON row), framed for its place alone, without event time; ARRIVAL: no
     * OTLP either, its Kafka timestamp is its event time (a change stream's commit time) */
    public FramedOtlpDeserializer(long maxFutureMs, String signal) {
        this(maxFutureMs, signal, null);
    }

    /** @param group the source's consumer group: each record's offset is reported to
     * {@link PartitionLag} under it, for the watermarks' idleness */
    public FramedOtlpDeserializer(long maxFutureMs, String signal, String group) {
        this.maxFutureMs = maxFutureMs;
        this.byArrival = ARRIVAL.equals(signal);
        this.signal = NO_SIGNAL.equals(signal) || byArrival ? null
                : OtlpEventTime.Signal.valueOf(signal);
        this.group = group;
    }

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<byte[]> out) {
        if (newestByPartition == null) {
            newestByPartition = new HashMap<>();
        }
        if (group != null) {
            if (lag == null) {
                lag = PartitionLag.of(group, record.topic());
            }
            lag.read(record.partition(), record.offset());
        }
        byte[] value = record.value();
        // spans further ahead than that of the clock, or of the record's arrival where it
        // has one, are no event time: what runs ahead of its arrival cannot drag the
        // watermark further (udfs/journeys/arrival.py correction_reach_ms counts on it)
        long now = System.currentTimeMillis();
        long arrival = record.timestamp();
        long maxMs = (arrival > 0 ? Math.min(now, arrival) : now) + maxFutureMs;
        long eventTime = byArrival ? (arrival >= MIN_MS ? Math.min(arrival, maxMs)
                : OtlpEventTime.NONE)
                : signal == null ? OtlpEventTime.NONE : OtlpEventTime.newestMs(value, signal,
                        MIN_MS, maxMs);
        Long before = newestByPartition.get(record.partition());
        long newestBefore = before == null ? OtlpEventTime.NONE : before;
        if (eventTime > newestBefore) {
            newestByPartition.put(record.partition(), eventTime);
        }
        int length = value == null ? 0 : value.length;
        ByteBuffer framed = ByteBuffer.allocate(HEADER_BYTES + length);
        framed.put(VERSION).put((byte) (value == null ? 1 : 0)).putInt(record.partition())
                .putLong(record.offset()).putLong(record.timestamp()).putLong(eventTime)
                .putLong(newestBefore);
        if (value != null) {
            framed.put(value);
        }
        out.collect(framed.array());
    }

    @Override
    public TypeInformation<byte[]> getProducedType() {
        return PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;
    }
}
