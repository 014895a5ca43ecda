package metrics

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// exposition renders the family name of reg in the text format.
func exposition(t *testing.T, reg *prometheus.Registry, name string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	enc := expfmt.NewEncoder(&sb, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if mf.GetName() == name {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return sb.String()
}

// TestBuildInfoExposition is the golden exposition of infergate_build_info:
// dashboards join on its labels.
func TestBuildInfoExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewBuildInfo(reg, buildinfo.Info{Version: "v0.3.0-2-gabc1234", Commit: "abc1234", Go: "go1.26.8"})
	want := `# HELP infergate_build_info Always 1; the labels say which build is running (version, commit, Go toolchain).
# TYPE infergate_build_info gauge
infergate_build_info{commit="abc1234",go="go1.26.8",version="v0.3.0-2-gabc1234"} 1
`
	if got := exposition(t, reg, "infergate_build_info"); got != want {
		t.Fatalf("exposition\n%s\nwant\n%s", got, want)
	}
}

// TestNewRegistersBuildInfo: the daemon's registry carries this binary's
// build facts.
func TestNewRegistersBuildInfo(t *testing.T) {
	bi := buildinfo.Get()
	got := exposition(t, New().Registry, "infergate_build_info")
	want := `infergate_build_info{commit="` + bi.Commit + `",go="` + bi.Go + `",version="` + bi.Version + `"} 1`
	if !strings.Contains(got, want) {
		t.Fatalf("exposition\n%s\nlacks %s", got, want)
	}
}
