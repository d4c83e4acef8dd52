package io.seedance.flink;

import java.nio.charset.StandardCharsets;

/**
 * The newest span start time in one OTLP trace message (an ExportTraceServiceRequest as
 * otlp_proto or otlp_json), read without a protobuf or JSON library: all the source needs to
 * stamp a Kafka record with its event time, so that watermarks are generated per partition
 * where the records are read.
 *
 * <p>Only start times inside [minMs, maxMs] count (the range the decoders accept; a clock far
 * off would otherwise drag the watermark with it). Anything unreadable gives {@link #NONE}: a
 * message without a time does not move the watermark, and the decoder dead-letters it.
 */
public final class OtlpEventTime {
    public static final long NONE = Long.MIN_VALUE;
    private static final long NS_PER_MS = 1_000_000L;

    private OtlpEventTime() {}

    public static long newestStartMs(byte[] value, long minMs, long maxMs) {
        if (value == null || value.length == 0) {
            return NONE;
        }
        if (looksLikeJson(value)) {
            long fromJson = json(value, minMs, maxMs);
            // "\n{" also opens a protobuf request whose first resource is 123 bytes long
            return fromJson != NONE || value[0] != 0x0A ? fromJson : proto(value, minMs, maxMs);
        }
        return proto(value, minMs, maxMs);
    }

    static boolean looksLikeJson(byte[] value) {
        for (byte b : value) {
            if (b == ' ' || b == '\t' || b == '\r' || b == '\n') {
                continue;
            }
            return b == '{' || b == '[';
        }
        return false;
    }

    // --- protobuf: request.resource_spans(1).scope_spans(2).spans(2).start_time_unix_nano(7)

    private static final class Malformed extends Exception {
        private static final long serialVersionUID = 1L;

        Malformed() {
            super(null, null, false, false);
        }
    }

    private static final class Wire {
        final byte[] b;
        int at;

        Wire(byte[] b) {
            this.b = b;
        }

        long varint(int end) throws Malformed {
            long result = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (at >= end) {
                    throw new Malformed();
                }
                byte next = b[at++];
                result |= (long) (next & 0x7F) << shift;
                if (next >= 0) {
                    return result;
                }
            }
            throw new Malformed();
        }

        long fixed64(int end) throws Malformed {
            if (end - at < 8) {
                throw new Malformed();
            }
            long result = 0;
            for (int i = 7; i >= 0; i--) {
                result = (result << 8) | (b[at + i] & 0xFFL);
            }
            at += 8;
            return result;
        }

        /** The end of a length-delimited field that starts here. */
        int lengthEnd(int end) throws Malformed {
            long length = varint(end);
            if (length < 0 || length > end - at) {
                throw new Malformed();
            }
            return at + (int) length;
        }

        void skip(int wireType, int end) throws Malformed {
            switch (wireType) {
                case 0 -> varint(end);
                case 1 -> at = checkedAdvance(8, end);
                case 2 -> at = lengthEnd(end);
                case 5 -> at = checkedAdvance(4, end);
                default -> throw new Malformed(); // groups and unknown wire types
            }
        }

        private int checkedAdvance(int n, int end) throws Malformed {
            if (end - at < n) {
                throw new Malformed();
            }
            return at + n;
        }
    }

    private static long proto(byte[] value, long minMs, long maxMs) {
        Wire wire = new Wire(value);
        long newest = NONE;
        try {
            while (wire.at < value.length) {
                long tag = wire.varint(value.length);
                if (tag == ((1 << 3) | 2)) {
                    newest = Math.max(newest, resourceSpans(wire, wire.lengthEnd(value.length),
                            minMs, maxMs));
                } else {
                    wire.skip((int) (tag & 7), value.length);
                }
            }
        } catch (Malformed e) {
            return NONE;
        }
        return newest;
    }

    private static long resourceSpans(Wire wire, int end, long minMs, long maxMs)
            throws Malformed {
        long newest = NONE;
        while (wire.at < end) {
            long tag = wire.varint(end);
            if (tag == ((2 << 3) | 2)) {
                newest = Math.max(newest, scopeSpans(wire, wire.lengthEnd(end), minMs, maxMs));
            } else {
                wire.skip((int) (tag & 7), end);
            }
        }
        return newest;
    }

    private static long scopeSpans(Wire wire, int end, long minMs, long maxMs)
            throws Malformed {
        long newest = NONE;
        while (wire.at < end) {
            long tag = wire.varint(end);
            if (tag == ((2 << 3) | 2)) {
                newest = Math.max(newest, span(wire, wire.lengthEnd(end), minMs, maxMs));
            } else {
                wire.skip((int) (tag & 7), end);
            }
        }
        return newest;
    }

    private static long span(Wire wire, int end, long minMs, long maxMs) throws Malformed {
        long start = NONE;
        while (wire.at < end) {
            long tag = wire.varint(end);
            if (tag == ((7 << 3) | 1)) {
                start = wire.fixed64(end); // the last one wins, as protobuf parsers do
            } else {
                wire.skip((int) (tag & 7), end);
            }
        }
        return inRange(start == NONE ? NONE : Long.divideUnsigned(start, NS_PER_MS), minMs,
                maxMs);
    }

    private static long inRange(long ms, long minMs, long maxMs) {
        return ms != NONE && ms >= minMs && ms <= maxMs ? ms : NONE;
    }

    // --- JSON: every "startTimeUnixNano" (or "start_time_unix_nano") that holds an integer

    private static final byte[][] KEYS = {
        "\"startTimeUnixNano\"".getBytes(StandardCharsets.US_ASCII),
        "\"start_time_unix_nano\"".getBytes(StandardCharsets.US_ASCII),
    };

    private static long json(byte[] value, long minMs, long maxMs) {
        long newest = NONE;
        for (byte[] key : KEYS) {
            for (int at = indexOf(value, key, 0); at >= 0; at = indexOf(value, key, at + 1)) {
                newest = Math.max(newest, inRange(integerAfterColon(value,
                        at + key.length), minMs, maxMs));
            }
        }
        return newest;
    }

    /** An integer (bare or quoted, as OTLP/JSON writes 64-bit numbers) after ":", in ms. */
    private static long integerAfterColon(byte[] b, int at) {
        at = skipSpace(b, at);
        if (at >= b.length || b[at] != ':') {
            return NONE;
        }
        at = skipSpace(b, at + 1);
        boolean quoted = at < b.length && b[at] == '"';
        if (quoted) {
            at++;
        }
        long ns = 0;
        int digits = 0;
        while (at < b.length && b[at] >= '0' && b[at] <= '9') {
            if (++digits > 19) {
                return NONE;
            }
            ns = ns * 10 + (b[at++] - '0');
        }
        if (digits == 0 || (quoted ? at >= b.length || b[at] != '"'
                : at < b.length && (b[at] == '.' || b[at] == 'e' || b[at] == 'E'))) {
            return NONE;
        }
        return ns / NS_PER_MS;
    }

    private static int skipSpace(byte[] b, int at) {
        while (at < b.length && (b[at] == ' ' || b[at] == '\t' || b[at] == '\r' || b[at] == '\n')) {
            at++;
        }
        return at;
    }

    private static int indexOf(byte[] haystack, byte[] needle, int from) {
        outer:
        for (int i = from; i <= haystack.length - needle.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (haystack[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return i;
        }
        return -1;
    }
}
