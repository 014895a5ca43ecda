package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"linker stamps win", "v1.2.0-3-gabc", "abc1234", vcs("0123456789abcdef0123", "true"),
			Info{Version: "v1.2.0-3-gabc", Commit: "abc1234", Go: "go1.26.8"}},
		{"vcs stamp, clean", "", "", vcs("0123456789abcdef0123", "false"),
			Info{Version: "dev", Commit: "0123456789ab", Go: "go1.26.8"}},
		{"vcs stamp, dirty", "", "", vcs("0123456789abcdef0123", "true"),
			Info{Version: "dev", Commit: "0123456789ab-dirty", Go: "go1.26.8"}},
		{"go install of a tagged module", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.1"}},
			Info{Version: "v0.4.1", Commit: Unknown, Go: "go1.26.8"}},
		{"nothing recorded", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			Info{Version: "dev", Commit: Unknown, Go: "go1.26.8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolve(tc.version, tc.commit, tc.bi); got != tc.want {
				t.Fatalf("resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestGetIsComplete(t *testing.T) {
	got := Get()
	if got.Version == "" || got.Commit == "" || got.Go == "" {
		t.Fatalf("Get() = %+v: every field must be set", got)
	}
}

func TestString(t *testing.T) {
	if got, want := (Info{Version: "v1", Commit: "abc", Go: "go1.26"}).String(), "v1 (commit abc, go1.26)"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
