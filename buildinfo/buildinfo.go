package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Stamped by the linker (Makefile: -ldflags "-X …/buildinfo.version=…").
// They are variables only because -X can set nothing else; nothing in the
// program writes them.
var (
	version string
	commit  string
)

// Unknown is reported for a fact no stamp recorded (a test binary, a build
// outside a VCS checkout).
const Unknown = "unknown"

// devVersion is the version of a build without a release stamp.
const devVersion = "dev"

// shortCommit is how many hex digits of a VCS revision name a commit, as
// `git describe` prints them.
const shortCommit = 12

// Info identifies one build. The JSON names are GET /version's wire format.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
}

// Get returns this binary's build facts: linker stamps first, then the VCS
// stamps of debug.ReadBuildInfo, then Unknown/dev.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
}

// resolve applies the precedence to explicit inputs so it can be tested
// without relinking.
func resolve(stampVersion, stampCommit string, bi *debug.BuildInfo) Info {
	in := Info{Version: stampVersion, Commit: stampCommit, Go: runtime.Version()}
	if bi == nil {
		return fill(in)
	}
	if bi.GoVersion != "" {
		in.Go = bi.GoVersion
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value
		}
	}
	if in.Commit == "" && rev != "" {
		in.Commit = rev[:min(len(rev), shortCommit)]
		if dirty == "true" {
			in.Commit += "-dirty"
		}
	}
	// `go install module@vX.Y.Z` records the module version; a local build
	// records "(devel)", which says nothing.
	if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		in.Version = bi.Main.Version
	}
	return fill(in)
}

func fill(in Info) Info {
	if in.Version == "" {
		in.Version = devVersion
	}
	if in.Commit == "" {
		in.Commit = Unknown
	}
	if in.Go == "" {
		in.Go = Unknown
	}
	return in
}

// String is the one-line form the CLI prints: "v1.2.3 (commit abc, go1.26)".
func (i Info) String() string {
	return i.Version + " (commit " + i.Commit + ", " + i.Go + ")"
}
