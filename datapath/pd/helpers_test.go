package pd

import (
	"errors"
	"net/netip"

	"github.com/infergate/infergate/spec"
)

var errTest = errors.New("test error")

func ep(addr string, nixl uint16) spec.Endpoint {
	a := netip.MustParseAddrPort(addr)
	return spec.Endpoint{ID: addr, Addr: a, NixlPort: nixl}
}
