package io.seedance.flink;

import java.nio.charset.StandardCharsets;

/**
 * The newest event time in one OTLP message — a trace request's newest span start, a metrics
 * request's newest data point — as otlp_proto or otlp_json, read without a protobuf or JSON
 * library: all the source needs to stamp a Kafka record with its event time, so that
 * watermarks are generated per partition where the records are read.
 *
 * <p>Only times inside [minMs, maxMs] count (the range the decoders accept; a clock far off
 * would otherwise drag the watermark with it). Anything unreadable gives {@link #NONE}: a
 * message without a time does not move the watermark, and the decoder dead-letters it.
 */
public final class OtlpEventTime {
    public static final long NONE = Long.MIN_VALUE;
    private static final long NS_PER_MS = 1_000_000L;

    /** Where a signal's times are: the fields to descend at each depth, the time's field. */
    public enum Signal {
        // request.resource_spans(1).scope_spans(2).spans(2).start_time_unix_nano(7)
        TRACES(new int[][] {{1}, {2}, {2}}, 7, "startTimeUnixNano", "start_time_unix_nano"),
        // request.resource_metrics(1).scope_metrics(2).metrics(2).{gauge(5), sum(7),
        // histogram(9), exponential_histogram(10), summary(11)}.data_points(1).time_unix_nano(3)
        METRICS(new int[][] {{1}, {2}, {2}, {5, 7, 9, 10, 11}, {1}}, 3, "timeUnixNano",
                "time_unix_nano");

        final int[][] path;
        final int timeField;
        final byte[][] jsonKeys;

        Signal(int[][] path, int timeField, String camel, String snake) {
            this.path = path;
            this.timeField = timeField;
            this.jsonKeys = new byte[][] {
                ("\"" + camel + "\"").getBytes(StandardCharsets.US_ASCII),
                ("\"" + snake + "\"").getBytes(StandardCharsets.US_ASCII),
            };
        }
    }

    private OtlpEventTime() {}

    /** The newest span start (a trace request's event time). */
    public static long newestStartMs(byte[] value, long minMs, long maxMs) {
        return newestMs(value, Signal.TRACES, minMs, maxMs);
    }

    public static long newestMs(byte[] value, Signal signal, long minMs, long maxMs) {
        if (value == null || value.length == 0) {
            return NONE;
        }
        if (looksLikeJson(value)) {
            long fromJson = json(value, signal, minMs, maxMs);
            // "\n{" also opens a protobuf request whose first resource is 123 bytes long
            return fromJson != NONE || value[0] != 0x0A ? fromJson
                    : proto(value, signal, minMs, maxMs);
        }
        return proto(value, signal, minMs, maxMs);
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

    // --- protobuf

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

    private static long proto(byte[] value, Signal signal, long minMs, long maxMs) {
        try {
            return walk(new Wire(value), value.length, 0, signal, minMs, maxMs);
        } catch (Malformed e) {
            return NONE;
        }
    }

    /** The newest time under the message ending at `end`, at `depth` of the signal's path. */
    private static long walk(Wire wire, int end, int depth, Signal signal, long minMs,
                             long maxMs) throws Malformed {
        boolean leaf = depth == signal.path.length;
        long newest = NONE;
        long time = NONE;
        while (wire.at < end) {
            long tag = wire.varint(end);
            int field = (int) (tag >>> 3);
            int wireType = (int) (tag & 7);
            if (leaf && field == signal.timeField && wireType == 1 && tag >>> 3 == field) {
                time = wire.fixed64(end); // the last one wins, as protobuf parsers do
            } else if (!leaf && wireType == 2 && tag >>> 3 == field
                    && contains(signal.path[depth], field)) {
                newest = Math.max(newest, walk(wire, wire.lengthEnd(end), depth + 1, signal,
                        minMs, maxMs));
            } else {
                wire.skip(wireType, end);
            }
        }
        if (leaf) {
            return inRange(time == NONE ? NONE : Long.divideUnsigned(time, NS_PER_MS), minMs,
                    maxMs);
        }
        return newest;
    }

    private static boolean contains(int[] fields, int field) {
        for (int f : fields) {
            if (f == field) {
                return true;
            }
        }
        return false;
    }

    private static long inRange(long ms, long minMs, long maxMs) {
        return ms != NONE && ms >= minMs && ms <= maxMs ? ms : NONE;
    }

    // --- JSON: every time key of the signal ("startTimeUnixNano" or "start_time_unix_nano"
    // for traces) that holds an integer

    private static long json(byte[] value, Signal signal, long minMs, long maxMs) {
        long newest = NONE;
        for (byte[] key : signal.jsonKeys) {
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
