package io.seedance.flink;

import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.serialization.SerializationSchema;

/** The value of a keyed row ({@link KeyedLineKey}): what follows the first line break, or
 * the whole string when it has none. */
public final class KeyedLineValue implements SerializationSchema<String> {
    private static final long serialVersionUID = 1L;

    @Override
    public byte[] serialize(String element) {
        return element.substring(element.indexOf('\n') + 1).getBytes(StandardCharsets.UTF_8);
    }
}
