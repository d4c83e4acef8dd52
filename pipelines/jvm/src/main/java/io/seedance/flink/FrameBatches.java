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
 */
public final class FrameBatches extends AbstractStreamOperator<byte[]>
        implements OneInputStreamOperator<byte[], byte[]>, BoundedOneInput {
    private static final long serialVersionUID = 1L;
    static final byte GROUP = 2;

    private final int maxRecords;
    private final long maxBytes;
    private final long lingerMs;

    private transient List<byte[]> records;
    private transient long bytes;
    private transient long newestTimestamp;
    private transient boolean timestamped;
    private transient long generation;

    public FrameBatches(int maxRecords, long maxBytes, long lingerMs) {
        if (maxRecords < 1 || maxBytes < 1 || lingerMs < 0) {
            throw new IllegalArgumentException("maxRecords and maxBytes must be positive, "
                    + "lingerMs at least 0");
        }
        this.maxRecords = maxRecords;
        this.maxBytes = maxBytes;
        this.lingerMs = lingerMs;
    }

    @Override
    public void open() throws Exception {
        super.open();
        records = new ArrayList<>();
        newestTimestamp = Long.MIN_VALUE;
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
        flush();
        super.processWatermark(mark);
    }

    @Override
    public void processWatermarkStatus(WatermarkStatus status) throws Exception {
        flush();
        super.processWatermarkStatus(status);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flush();
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() {
        flush();
    }

    @Override
    public void finish() throws Exception {
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
