package cli

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/infergate/infergate/daemon"
	"github.com/spf13/pflag"
)

// yamlNames collects the yaml names of t's fields, descending into inline
// structs, so a config file and the flags name every option alike.
func yamlNames(t reflect.Type, into map[string]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case name == "-":
		case opts == "inline":
			yamlNames(f.Type, into)
		case name != "":
			into[name] = true
		}
	}
}

// TestServeFlagsAreOptionNames: every serve flag binds a daemon.Options
// field whose yaml name is the flag's, and every yaml name is a flag.
func TestServeFlagsAreOptionNames(t *testing.T) {
	names := map[string]bool{}
	yamlNames(reflect.TypeOf(daemon.Options{}), names)
	flags := map[string]bool{}
	newServeCmd(&globals{}).Flags().VisitAll(func(f *pflag.Flag) {
		if !isSourceFlag(f.Name) { // --config, --print-config choose sources, they are no option
			flags[f.Name] = true
		}
	})
	var noField, noFlag []string
	for f := range flags {
		if !names[f] {
			noField = append(noField, f)
		}
	}
	for n := range names {
		if !flags[n] {
			noFlag = append(noFlag, n)
		}
	}
	sort.Strings(noField)
	sort.Strings(noFlag)
	if len(noField) > 0 || len(noFlag) > 0 {
		t.Fatalf("flags without a yaml field: %v\nyaml fields without a flag: %v", noField, noFlag)
	}
}
