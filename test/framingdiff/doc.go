// Package framingdiff is a differential test of request framing: the same
// request shapes go to real nginx and to infergate's plaintext front ends
// (datapath/h1 and net/http), each in front of its own raw-TCP recording
// engine, and infergate is held to nginx. Every shape nginx refuses,
// infergate refuses; whatever infergate forwards reaches its engine as
// exactly the requests the client sent (same count, same bodies). Shapes
// come from the published request-smuggling classes and from a seeded
// grammar-based generator over the request head and chunked body.
// docs/security.md describes the suite and lists where infergate is
// stricter than nginx.
package framingdiff
