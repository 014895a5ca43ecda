// Package docexamples runs the copy-paste shell examples of README.md and
// docs/*.md, as written, so they stay true.
//
// A fenced ```sh block is an example when the line before it is
//
//	<!-- example: loopback; expect: TEXT; expect: TEXT -->
//
// The test builds the binary and runs each example with bash (errexit,
// pipefail) in its own network, mount and PID namespaces: a loopback-only
// network where every 127.0.0.0/8 address is local (the docs' addresses
// and the API's 127.0.0.1:11111 collide with nothing on the machine), empty
// /var/lib and /tmp, HOME a fresh directory, infergate (and bin/infergate)
// the binary just built, configs/ a copy of the repository's (both staged
// on a fresh /mnt first: the checkout may itself live under /tmp). When the block ends its
// background processes (daemons, fake engines) die with the namespace. The
// output must hold every expected TEXT.
package docexamples
