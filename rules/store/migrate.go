package store

import (
	"context"
	"fmt"
)

// migrateBatch keeps each transaction under etcd's default --max-txn-ops (128).
const migrateBatch = 100

// MigrateReport says what Migrate did.
type MigrateReport struct {
	Copied    int      // values written to the destination
	Unchanged int      // already identical there
	Skipped   []string // source values that are no valid rule (with the reason)
}

// Migrate copies every valid rule of from into to (file ↔ etcd), keeping
// to's other rules. Each value is checked as a replay would check it;
// invalid ones are reported and not copied. Writes are compare-and-swap on
// the destination's revisions, so a concurrent writer makes it fail with
// 409 instead of being overwritten blindly.
func Migrate(ctx context.Context, from, to Backend) (MigrateReport, error) {
	var rep MigrateReport
	src, err := from.Load(ctx)
	if err != nil {
		return rep, fmt.Errorf("migrate: read source: %w", err)
	}
	dst, err := to.Load(ctx)
	if err != nil {
		return rep, fmt.Errorf("migrate: read destination: %w", err)
	}
	have := make(map[string]StoredValue, len(dst.Values))
	for _, v := range dst.Values {
		have[v.Key] = v
	}
	var batch []Put
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := to.Commit(ctx, Change{Puts: batch}); err != nil {
			return fmt.Errorf("migrate: write %d rules: %w", len(batch), err)
		}
		rep.Copied += len(batch)
		batch = batch[:0]
		return nil
	}
	seen := map[string]bool{}
	for i, v := range src.Values {
		key := keyOfValue(v.Value)
		switch {
		case key == "":
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("value %d (%q): not a valid rule", i, v.Key))
			continue
		case v.Key != "" && v.Key != key:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("value %d: stored under %q but its rule's key is %q", i, v.Key, key))
			continue
		case seen[key]:
			rep.Skipped = append(rep.Skipped, fmt.Sprintf("value %d: duplicate key %q", i, key))
			continue
		}
		seen[key] = true
		cur, ok := have[key]
		if ok && string(cur.Value) == string(v.Value) {
			rep.Unchanged++
			continue
		}
		batch = append(batch, Put{Key: key, Value: v.Value, Expect: cur.Revision})
		if len(batch) == migrateBatch {
			if err := flush(); err != nil {
				return rep, err
			}
		}
	}
	return rep, flush()
}
