package io.seedance.flink;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;

/**
 * Groups consecutive framed records (FramedOtlpDeserializer's) into one element, so that the
 * Python decoder behind it is called once per group and sends one batch per user bucket
 * per group, not one per record and bucket: what crosses into Python and on to the
 * journeys no longer multiplies with the bucket count.
 *
 * <p>A group is closed when it holds {@code maxRecords} records or {@code maxBytes} bytes,
 * {@code lingerMs} after its first record, and always before a watermark, an idleness
 * change, a checkpoint barrier ({@link #prepareSnapshotPreBarrier}) and the end of input:
 * a record never passes a watermark it came before, and nothing is held in this operator
 * when state is snapshotted, so it keeps no state. A group of one record goes on as the
 * record itself.
 *
 * <p>The group's form: a byte {@code 2}, the number of records (int), then each record as
 * its length (int) and its bytes (pipelines/codec/frame.py {@code unframe_all} reads it).
 * Its timestamp is the newest of its records'.
 *
 * <p>Watermarks go on at most once per {@code minStepMs} of processing time: one that comes
 * sooner is held (a newer one replaces it) and goes on when the interval is over, before
 * an idleness change and at the end; the final watermark goes on at once. Each watermark
 * that goes on is a step of every user bucket of the journeys behind (a Python call per
 * bucket with something due), so with many buckets per subtask the steps are spaced to
 * keep their cost a small share of the work; records pass a held watermark, which is the
 * same as a source that sends its watermarks less often.
 */
public final class FrameBatches extends AbstractStreamOperator<byte[]>
        implements OneInputStreamOperator<byte[], byte[]>, BoundedOneInput {
    private static final long serialVersionUID = 1L;
    static final byte GROUP = 2;

    private final int maxRecords;
    private final long maxBytes;
    private final long lingerMs;
    private final long minStepMs;

    private transient List<byte[]> records;
    private transient long bytes;
    private transient long newestTimestamp;
    private transient boolean timestamped;
    private transient long generation;
    private transient Watermark held;
    private transient long forwardedAt;
    private transient boolean stepTimer;

    public FrameBatches(int maxRecords, long maxBytes, long lingerMs) {
        this(maxRecords, maxBytes, lingerMs, 0);
    }

    public FrameBatches(int maxRecords, long maxBytes, long lingerMs, long minStepMs) {
        if (maxRecords < 1 || maxBytes < 1 || lingerMs < 0 || minStepMs < 0) {
            throw new IllegalArgumentException("maxRecords and maxBytes must be positive, "
                    + "lingerMs and minStepMs at least 0");
        }
        this.maxRecords = maxRecords;
        this.maxBytes = maxBytes;
        this.lingerMs = lingerMs;
        this.minStepMs = minStepMs;
    }

    @Override
    public void open() throws Exception {
        super.open();
        records = new ArrayList<>();
        newestTimestamp = Long.MIN_VALUE;
        forwardedAt = Long.MIN_VALUE / 2;
    }

    @Override
    public void processElement(StreamRecord<byte[]> element) {
        byte[] value = element.getValue();
        if (records.isEmpty() && lingerMs > 0) {
            long group = generation;
            getProcessingTimeService().registerTimer(
                    getProcessingTimeService().getCurrentProcessingTime() + lingerMs,
                    time -> {
                        if (generation == group) {
                            flush();
                        }
                    });
        }
        records.add(value);
        bytes += value.length;
        if (element.hasTimestamp()) {
            timestamped = true;
            newestTimestamp = Math.max(newestTimestamp, element.getTimestamp());
        }
        if (records.size() >= maxRecords || bytes >= maxBytes || lingerMs == 0) {
            flush();
        }
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
        long now = getProcessingTimeService().getCurrentProcessingTime();
        if (minStepMs == 0 || mark.getTimestamp() == Long.MAX_VALUE
                || now - forwardedAt >= minStepMs) {
            forward(mark, now);
            return;
        }
        held = mark;
        if (!stepTimer) {
            stepTimer = true;
            getProcessingTimeService().registerTimer(forwardedAt + minStepMs, time -> {
                stepTimer = false;
                if (held != null) {
                    forward(held, getProcessingTimeService().getCurrentProcessingTime());
                }
            });
        }
    }

    /** The records before it, then the watermark. */
    private void forward(Watermark mark, long now) throws Exception {
        flush();
        held = null;
        forwardedAt = now;
        super.processWatermark(mark);
    }

    private void forwardHeld() throws Exception {
        if (held != null) {
            forward(held, getProcessingTimeService().getCurrentProcessingTime());
        }
    }

    @Override
    public void processWatermarkStatus(WatermarkStatus status) throws Exception {
        forwardHeld();
        flush();
        super.processWatermarkStatus(status);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flush();
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        forwardHeld();
        flush();
    }

    @Override
    public void finish() throws Exception {
        forwardHeld();
        flush();
        super.finish();
    }

    private void flush() {
        if (records == null || records.isEmpty()) {
            return;
        }
        byte[] out;
        if (records.size() == 1) {
            out = records.get(0);
        } else {
            ByteBuffer group = ByteBuffer.allocate(
                    1 + Integer.BYTES + records.size() * Integer.BYTES + (int) bytes);
            group.put(GROUP).putInt(records.size());
            for (byte[] record : records) {
                group.putInt(record.length).put(record);
            }
            out = group.array();
        }
        StreamRecord<byte[]> element = timestamped
                ? new StreamRecord<>(out, newestTimestamp) : new StreamRecord<>(out);
        records.clear();
        bytes = 0;
        newestTimestamp = Long.MIN_VALUE;
        timestamped = false;
        generation++;
        output.collect(element);
    }
}
