package datapath_test

import (
	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/rules/store"
)

// The datapath cannot import rules or api (they sit above it); these
// assertions keep its method set in step with their contracts.
var (
	_ store.Runtime    = (*datapath.Runtime)(nil)
	_ api.StatusSource = (*datapath.Runtime)(nil)
)
