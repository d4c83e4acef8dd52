package io.seedance.flink;

import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.BoundedOneInput;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;

/**
 * Passes a source's records, watermarks and idleness through unchanged, and makes sure the
 * final watermark of a drain (or of a bounded input's end) goes on even when the source
 * was idle.
 *
 * <p>At a drain, Flink's source task emits {@code MAX_WATERMARK} into its output, and an
 * output whose announced status is IDLE drops every watermark (Flink 2.2:
 * {@code SourceOperatorStreamTask.advanceToEndOfEventTime}, {@code ChainingOutput},
 * {@code RecordWriterOutput}). A job that has caught up with its input has its partitions
 * idle, so the drain's final watermark never reached the operators behind it: nothing it
 * would release (the last journeys, the last refit period) was committed. Records that
 * arrive later do not wake the output again unless they advance the watermark.
 *
 * <p>Chained right behind the source, this operator sees the end of input of a drain
 * ({@link #endInput}, called only when draining) and, if the final watermark did not come
 * through, announces ACTIVE and emits it itself, as the source task should have. A stop
 * without drain calls no {@code endInput} and emits nothing.
 */
public final class FinalWatermark<T> extends AbstractStreamOperator<T>
        implements OneInputStreamOperator<T, T>, BoundedOneInput {
    private static final long serialVersionUID = 1L;

    private transient boolean finalWatermarkPassed;

    @Override
    public void processElement(StreamRecord<T> element) {
        output.collect(element);
    }

    @Override
    public void processWatermark(Watermark mark) throws Exception {
        if (mark.getTimestamp() == Long.MAX_VALUE) {
            finalWatermarkPassed = true;
        }
        super.processWatermark(mark);
    }

    @Override
    public void endInput() {
        if (finalWatermarkPassed) {
            return;
        }
        finalWatermarkPassed = true;
        output.emitWatermarkStatus(WatermarkStatus.ACTIVE);
        output.emitWatermark(Watermark.MAX_WATERMARK);
    }
}
