package pd

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strconv"

	"github.com/infergate/infergate/spec"
)

// randUint63 is a uniform integer in [0, 2^63-1] from crypto/rand, used for
// SGLang bootstrap rooms and TRT-LLM disagg request ids: they must not
// collide across gateway replicas, so no seeded PRNG.
func randUint63() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux ≥ 3.17
	return binary.BigEndian.Uint64(b[:]) &^ (1 << 63)
}

// hex32 returns 32 lowercase hex characters (128 random bits).
func hex32() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// isHex32 reports whether s is exactly 32 lowercase hex characters.
func isHex32(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// nixlAddr is the ip:port a vLLM NIXL side channel listens on.
func nixlAddr(ep spec.Endpoint) string {
	port := ep.NixlPort
	if port == 0 {
		port = ep.Addr.Port()
	}
	return ep.Addr.Addr().String() + ":" + strconv.Itoa(int(port))
}

// vllmRequestID is the X-Request-Id vLLM's NIXL proxy protocol expects: the
// engines parse the peer's side-channel address out of it. suffix is the
// request's own 32-hex id so logs across gateway and engines correlate.
func vllmRequestID(prefill, decode spec.Endpoint, suffix string) string {
	return "___prefill_addr_" + nixlAddr(prefill) + "___decode_addr_" + nixlAddr(decode) + "_" + suffix
}

// idSuffix reuses the datapath's id when it already has the receipt shape.
func idSuffix(requestID string) string {
	if isHex32(requestID) {
		return requestID
	}
	return hex32()
}
