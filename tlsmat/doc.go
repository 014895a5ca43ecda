// Package tlsmat owns infergate's TLS material: loading and validating
// certificates in LoxiLB's layout (<cert-root>/<hostname>/server.crt,
// server.key, optional rootCA.crt; the default certificate sits in
// <cert-root> itself), the SNI certificate store behind LoxiLB's
// /netlox/v1/sni/certificates API, hot reload of rotated files, and the
// crypto/tls configurations built from a rule's TLS fields: the server side
// of a VIP (SNI selection, versions, ciphers, ALPN, client-certificate
// authentication, HSTS) and the client side toward engines.
//
// Contract:
//   - Material is validated when it is loaded (parse, key/cert match, validity
//     window, CA bundles that hold a certificate) and a failure is a
//     *MaterialError naming the hostname, the file and the reason, so the
//     API can refuse a rule before anything is served.
//   - A certificate in use is swapped atomically when its files change; new
//     handshakes get the new one, established connections are untouched. A
//     new file that does not load keeps the old certificate serving and is
//     logged and counted (infergate_tls_cert_reload_failures_total).
//   - No key material is ever logged, listed or marshalled; Secret redacts.
//   - Only crypto/tls and crypto/x509 do cryptography.
package tlsmat
