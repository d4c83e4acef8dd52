package io.seedance.flink;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.serialization.SerializationSchema;

/**
 * A keyed result row travels as one string, {@code key + "\n" + value}; this is the Kafka
 * record's key: the part before the first line break (the row's identity, a JSON array), so
 * every version of one row lands in one partition, in order, and a reader that keeps the
 * latest row per key sees the newest. JSON escapes line breaks, so the first one is the
 * separator. A string without one has no key (null: the producer spreads it).
 * {@link KeyedLineValue} is the value.
 */
public final class KeyedLineKey implements SerializationSchema<String> {
    private static final long serialVersionUID = 1L;

    @Override
    public byte[] serialize(String element) {
        int at = element.indexOf('\n');
        return at < 0 ? null : element.substring(0, at).getBytes(StandardCharsets.UTF_8);
    }
}
