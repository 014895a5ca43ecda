package metrics

import "github.com/prometheus/client_golang/prometheus"

// TLS covers HTTPS VIPs (tlsmat): handshakes, the certificates in use and
// their reloads, and TLS legs to engines. Label "listener" is the VIP:port,
// "hostname" the certificate's SNI name ("default" for the VIP default).
type TLS struct {
	// Handshakes counts server handshakes by result (ok, failed,
	// client_cert_rejected, rate_limited) and negotiated version ("none"
	// on failure).
	Handshakes *prometheus.CounterVec // infergate_tls_handshakes_total{listener,result,version}
	// CertExpiry is seconds until the certificate in use expires.
	CertExpiry *prometheus.GaugeVec // infergate_tls_cert_expiry_seconds{hostname}
	// Reloads counts certificates swapped in after their files changed.
	Reloads *prometheus.CounterVec // infergate_tls_cert_reloads_total{hostname}
	// ReloadFailures counts changed files that did not load (the old
	// certificate keeps serving).
	ReloadFailures *prometheus.CounterVec // infergate_tls_cert_reload_failures_total{hostname}
	// BackendHandshakes counts TLS handshakes to engines by result.
	BackendHandshakes *prometheus.CounterVec // infergate_tls_backend_handshakes_total{result}
	// Misdirected counts requests answered 421 because the rule they
	// matched is not served by the TLS site their handshake ran under.
	Misdirected *prometheus.CounterVec // infergate_tls_misdirected_requests_total{listener,reason}
}

// NewTLS builds the TLS metric set and registers it on reg.
func NewTLS(reg prometheus.Registerer) *TLS {
	t := &TLS{
		Handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tls_handshakes_total",
			Help: "TLS handshakes on HTTPS VIPs by result (ok, failed, client_cert_rejected, rate_limited) and negotiated version.",
		}, []string{"listener", "result", "version"}),
		CertExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_tls_cert_expiry_seconds",
			Help: "Seconds until the certificate in use for a hostname expires (negative once expired).",
		}, []string{"hostname"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tls_cert_reloads_total",
			Help: "Certificates reloaded after their files changed.",
		}, []string{"hostname"}),
		ReloadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tls_cert_reload_failures_total",
			Help: "Changed certificate files that failed to load; the previous certificate keeps serving.",
		}, []string{"hostname"}),
		BackendHandshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tls_backend_handshakes_total",
			Help: "TLS handshakes from the gateway to engines (security 2) by result (ok, failed).",
		}, []string{"result"}),
		Misdirected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tls_misdirected_requests_total",
			Help: "Requests answered 421 misdirected_request: the matched rule's TLS site (certificate, client-certificate policy) is not the one the handshake chose by SNI, by listener and reason (certificate, client_cert_policy, no_handshake).",
		}, []string{"listener", "reason"}),
	}
	reg.MustRegister(t.Handshakes, t.CertExpiry, t.Reloads, t.ReloadFailures, t.BackendHandshakes, t.Misdirected)
	return t
}
