package zmqsub

import (
	"encoding/binary"
	"fmt"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/sirupsen/logrus"
)

// Replay results (metric label).
const (
	replayOK      = "ok"      // every buffered batch from the requested seq arrived
	replayPartial = "partial" // the engine's buffer started later than requested
	replayError   = "error"   // no answer, timeout or protocol error
)

// replayFrom runs the on-connect replay: from seq 0 on the first connect
// (a complete rebuild marks the inventory trusted), else from the next
// expected seq.
func (x *rankSub) replayFrom(first bool) {
	from, ok := x.s.sink.NextSeq(x.endpoint, x.rank)
	if first || !ok {
		from = 0
	}
	firstSeq, n, err := x.replayRange(from)
	if err == nil && n > 0 && from == 0 && firstSeq == 0 {
		if err := x.s.sink.MarkRebuilt(x.endpoint, x.rank); err != nil {
			x.log.WithError(err).Warn("zmqsub: mark rebuilt")
		}
	}
}

// replayRange asks the engine's ROUTER for every buffered batch with
// seq >= from (request: [empty, from as 8 bytes BE] over a DEALER), applies
// them in order and stops at the end marker (seq frame -1 or empty
// payload). Live messages then skip seqs the replay already applied.
func (x *rankSub) replayRange(from uint64) (firstSeq uint64, n int, err error) {
	result := replayError
	defer func() {
		if m := x.s.opts.Metrics; m != nil {
			m.Replays.WithLabelValues(x.s.opts.Rule, x.endpoint, result).Inc()
		}
		l := x.log.WithFields(logrus.Fields{"from": from, "batches": n, "result": result})
		if err != nil {
			l = l.WithError(err)
		}
		l.Info("zmqsub: replay finished")
	}()
	dealer, err := x.s.newSocket(zmq.DEALER)
	if err != nil {
		return 0, 0, err
	}
	defer dealer.Close()
	if err := dealer.Connect(x.replay); err != nil {
		return 0, 0, fmt.Errorf("zmqsub: connect replay %s: %w", x.replay, err)
	}
	if _, err := dealer.SendMessage([]byte{}, binary.BigEndian.AppendUint64(nil, from)); err != nil {
		return 0, 0, fmt.Errorf("zmqsub: replay request: %w", err)
	}
	poller := zmq.NewPoller()
	poller.Add(dealer, zmq.POLLIN)
	deadline := time.Now().Add(x.s.opts.ReplayTimeout)
	var last uint64
	for !x.s.stop.Load() {
		left := time.Until(deadline)
		if left <= 0 {
			return firstSeq, n, fmt.Errorf("zmqsub: replay from %s timed out after %d batches", x.replay, n)
		}
		polled, err := poller.Poll(min(left, x.s.opts.PollInterval))
		if err != nil {
			return firstSeq, n, fmt.Errorf("zmqsub: replay poll: %w", err)
		}
		if len(polled) == 0 {
			continue
		}
		msg, err := dealer.RecvMessageBytes(0)
		if err != nil {
			return firstSeq, n, fmt.Errorf("zmqsub: replay recv: %w", err)
		}
		// DEALER sees [empty, seq, payload]; tolerate a missing delimiter.
		if len(msg) > 0 && len(msg[0]) == 0 {
			msg = msg[1:]
		}
		if len(msg) != 2 || len(msg[0]) < 8 || int64(binary.BigEndian.Uint64(msg[0])) < 0 || len(msg[1]) == 0 {
			if n > 0 {
				x.dupFloor, x.hasDupFloor = last, true
			}
			switch {
			case n == 0 && from > 0:
				result = replayPartial // nothing newer buffered; the live stream decides
			case n > 0 && firstSeq > from:
				result = replayPartial
			default:
				result = replayOK
			}
			return firstSeq, n, nil
		}
		seq := binary.BigEndian.Uint64(msg[0])
		if n == 0 {
			firstSeq = seq
		}
		n++
		last = seq
		x.handle([][]byte{nil, msg[0], msg[1]}, true)
	}
	return firstSeq, n, fmt.Errorf("zmqsub: replay interrupted by close")
}
