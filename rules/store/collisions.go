package store

import (
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

// checkVIPCollisions refuses next when another stored rule serves one of
// its addresses on its route (rules.CheckCollision).
func checkVIPCollisions(entries []*Entry, next *spec.Rule) error {
	for _, e := range entries {
		if err := rules.CheckCollision(next, e.Compiled); err != nil {
			return err
		}
	}
	return nil
}
