//go:build !linux

package enginestats

import (
	"errors"
	"net"
)

// rawIO is off outside Linux: a getter reads and writes through net.Conn
// and the scheduler never finishes a scrape itself (see rawio_linux.go).
const rawIO = false

func detach(net.Conn) (int, error) { return -1, errors.ErrUnsupported }
