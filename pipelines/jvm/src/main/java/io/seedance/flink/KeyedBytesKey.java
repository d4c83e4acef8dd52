package io.seedance.flink;

import java.util.Arrays;
import org.apache.flink.api.common.serialization.SerializationSchema;

/**
 * {@link KeyedLineKey} for records that are UTF-8 bytes already ({@code key + "\n" +
 * value}): the Kafka record's key is what comes before the first line break, so every
 * version of what one key stands for lands in one partition, in order. Bytes without a line
 * break have no key (null). {@link KeyedBytesValue} is the value.
 */
public final class KeyedBytesKey implements SerializationSchema<byte[]> {
    private static final long serialVersionUID = 1L;

    @Override
    public byte[] serialize(byte[] element) {
        int at = KeyedBytesValue.separator(element);
        return at < 0 ? null : Arrays.copyOfRange(element, 0, at);
    }
}
