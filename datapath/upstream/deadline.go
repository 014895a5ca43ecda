package upstream

import "github.com/infergate/infergate/datapath/sockio"

// setDeadline bounds the exchange's next reads (lazily, see sockio) and
// writes by m (NoDeadline: no bound).
func (pc *conn) setDeadline(m sockio.Mono) {
	_ = pc.sock.SetReadDeadlineAt(m)
	_ = pc.sock.SetWriteDeadlineAt(m)
}
