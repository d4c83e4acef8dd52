package io.seedance.flink;

import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;

/**
 * Passes records and watermarks through and never announces its output IDLE, so that the
 * operator it feeds always waits for this input's watermark.
 *
 * <p>Flink leaves an idle input out of the watermark of the operator it feeds. Behind a
 * key-by every subtask reads all upstream subtasks, so all of them are idle or active
 * together, and an idle announcement there says nothing the watermark needs; but it breaks
 * the order an operator relies on when it emits records before passing a watermark on: an
 * input that was idle comes back only when its first record or status arrives, and by then
 * the other inputs may have moved the watermark past what it brings. At a drain, the
 * attribution subtask whose output was idle sent its last closed journeys after the fit
 * had seen the final watermark from the other (the CI loss of one order's shapley and
 * markov credits); the duplicate check's withdrawals, emitted before it passes the
 * watermark that would step the copies, could likewise arrive after it.
 *
 * <p>Chained behind such an operator, this one drops IDLE and passes everything else. It
 * holds no state.
 */
public final class StayActive<T> extends AbstractStreamOperator<T>
        implements OneInputStreamOperator<T, T> {
    private static final long serialVersionUID = 1L;

    @Override
    public void processElement(StreamRecord<T> element) {
        output.collect(element);
    }

    @Override
    public void processWatermarkStatus(WatermarkStatus status) throws Exception {
        if (status.isActive()) {
            super.processWatermarkStatus(status);
        }
    }
}
