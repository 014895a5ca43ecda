package tlsmat

import (
	"crypto/tls"
	"crypto/x509"
	"time"
)

// Why per-site session tickets: crypto/tls encrypts session tickets with
// the keys of the listener's config, which every site (rule) on a VIP:port
// shares. A resumed handshake re-verifies the client's chain against the
// site's client CAs but runs none of the site's own checks (VerifyPeer-
// Certificate: the name pattern, the CRL). So a client holding a
// certificate that rule A's name pattern accepts could take A's ticket to
// an SNI naming rule B, whose pattern refuses it, and resume into B. Each
// site therefore seals its tickets with keys of its own (rotated by
// crypto/tls as its automatic keys are): another site's ticket does not
// open, and the client falls back to a full handshake under the site's own
// policy.
//
// A ticket also outlives changes of the site's own trust: a certificate
// revoked by a reloaded CRL could resume its session for the ticket's
// lifetime (up to 7 days). resumedClientCheck therefore runs the site's
// checks, against the trust in force now, on every resumed handshake too.

// withSessionTickets makes cfg seal and open session tickets with keys
// only this site uses (keys is a config kept for its ticket keys alone).
func withSessionTickets(cfg, keys *tls.Config) {
	cfg.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		return keys.EncryptTicket(cs, ss)
	}
	cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		// Another site's ticket (or garbage) does not decrypt: nil, nil
		// means "no resumption", a full handshake follows.
		return keys.DecryptTicket(identity, cs)
	}
}

// resumedClientCheck is a VerifyConnection that re-checks the client
// certificate of a resumed session against pool and the site's policy
// (CRL, name pattern), as a full handshake would; full handshakes were
// verified already and pass through.
func resumedClientCheck(pool *x509.CertPool, policy func([][]byte, [][]*x509.Certificate) error, now func() time.Time) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if !cs.DidResume || len(cs.PeerCertificates) == 0 {
			return nil
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots: pool, Intermediates: inter, CurrentTime: now(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		if err != nil {
			return &errClientRejected{reason: "resumed session's certificate no longer verifies: " + err.Error()}
		}
		return policy(nil, chains)
	}
}
