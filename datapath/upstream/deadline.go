package upstream

import "time"

// setDeadline bounds the exchange's next reads (lazily, see sockio) and
// writes by t (zero: no bound).
func (pc *conn) setDeadline(t time.Time) {
	_ = pc.sock.SetReadDeadline(t)
	_ = pc.sock.SetWriteDeadline(t)
}
