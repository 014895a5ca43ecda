// Package docexamples runs the copy-paste shell examples of README.md,
// docs/*.md and deploy/*/README.md, as written, so they stay true.
//
// A fenced ```sh block is an example when the line before it is
//
//	<!-- example: loopback; expect: TEXT; expect: TEXT -->
//
// The test builds the binary and runs each example with bash (errexit,
// pipefail) in its own network, mount and PID namespaces: a loopback-only
// network where every 127.0.0.0/8 and 10.0.0.0/8 address is local (the
// docs' addresses and the API's 127.0.0.1:11111 collide with nothing on the
// machine), empty /var/lib and /tmp, /etc writable without touching the
// machine's (an overlay), HOME a fresh directory, infergate (and bin/infergate)
// the binary just built, bin/otlp-sink (a stand-in OTLP trace receiver,
// ./otlpsink), configs/ a copy of the repository's (all staged
// on a fresh /mnt first: the checkout may itself live under /tmp). When the block ends its
// background processes (daemons, fake engines) die with the namespace. The
// output must hold every expected TEXT.
//
// Blocks of one document whose markers name the same session
// (<!-- example: loopback; session: NAME; … -->) run in order in one
// namespace, as a reader following the document in one shell would: the
// first can start a daemon that the next ones use.
//
// A ```sh block that cannot run here (it needs a checkout and minutes of
// benchmarks, a cluster, …) says so instead, on the line before it:
//
//	<!-- example: none; needs: WHAT IT NEEDS -->
//
// and the test fails on a shell block that does neither.
package docexamples
