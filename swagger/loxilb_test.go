package swagger

import (
	"reflect"
	"testing"
)

// LoxiLB's enums are kept (so clients generated from LoxiLB's swagger and
// ours agree) and the served subset is stated next to them.
func TestServedValuesStated(t *testing.T) {
	sa := Document(testViews()).Definitions[defServiceArgs]
	tests := []struct {
		prop         string
		enum, served []interface{}
	}{
		{"mode", enum(0, 1, 2, 3, 4, 5), enum(4)},
		{"sel", enum(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), enum(0, 1, 2, 3, 4, 8, 10)},
		{"security", enum(0, 1, 2), enum(0)},
		{"protocol", enum("tcp", "udp", "sctp", "icmp"), enum("tcp")},
	}
	for _, tc := range tests {
		s := sa.Properties[tc.prop]
		if s == nil || !reflect.DeepEqual(s.Enum, tc.enum) || !reflect.DeepEqual(s.Served, tc.served) || s.Description == "" {
			t.Errorf("%s: enum %v served %v, want LoxiLB's %v with served %v", tc.prop, s.Enum, s.Served, tc.enum, tc.served)
		}
	}
	for _, p := range []string{"adminStateUp", "annotations"} {
		if s := sa.Properties[p]; s == nil || s.Description == "" {
			t.Errorf("serviceArguments.%s undocumented", p)
		}
	}
}
