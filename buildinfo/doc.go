// Package buildinfo says which build of infergate is running: the version
// and commit stamped at link time by the Makefile (-ldflags -X), or, for a
// plain `go build`/`go install`, the VCS stamps Go records in the binary.
// The CLI's `version`, the API's GET /version and the
// infergate_build_info metric all read it from here, so they never disagree.
package buildinfo
