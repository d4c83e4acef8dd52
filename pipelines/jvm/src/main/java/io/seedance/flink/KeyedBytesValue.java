package io.seedance.flink;

import java.util.Arrays;
import org.apache.flink.api.common.serialization.SerializationSchema;

/** The value of a keyed byte record ({@link KeyedBytesKey}): what follows the first line
 * break, or all of it when there is none. */
public final class KeyedBytesValue implements SerializationSchema<byte[]> {
    private static final long serialVersionUID = 1L;

    @Override
    public byte[] serialize(byte[] element) {
        int at = separator(element);
        return at < 0 ? element : Arrays.copyOfRange(element, at + 1, element.length);
    }

    static int separator(byte[] element) {
        for (int i = 0; i < element.length; i++) {
            if (element[i] == '\n') {
                return i;
            }
        }
        return -1;
    }
}
