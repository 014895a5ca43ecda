package validate

import (
	"context"
	"fmt"

	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/sirupsen/logrus"
)

// StepReplicas checks that every replica sharing the etcd store serves the
// same rule set (equal digests of keys and store revisions).
const StepReplicas = "replicas agree"

// replicas lists the replicas under the store's prefix: PASS when all
// serve one rule set, FAIL when they differ or none is registered, SKIP
// for a single gateway (no --store).
func (w *workflow) replicas(ctx context.Context, res *StepResult) {
	if w.opts.Store == "" {
		res.Status, res.Summary = Skip, "single gateway (no --store etcd://… given)"
		return
	}
	eo := w.opts.Etcd
	if err := eo.ParseURL(w.opts.Store); err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	b, err := etcdstore.Open(eo, log, nil)
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(ctx, w.opts.RequestTimeout)
	defer cancel()
	reps, rev, err := etcdstore.Replicas(ctx, b.Client(), b.Prefix())
	if err != nil {
		res.Status, res.Summary = Fail, "cannot list replicas: "+err.Error()
		return
	}
	digests := map[string]int{}
	for _, r := range reps {
		digests[r.Digest]++
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s at %s: %d rules, revision %d, digest %s", r.ID, r.API, r.Rules, r.Revision, r.Digest))
	}
	switch {
	case len(reps) == 0:
		res.Status, res.Summary = Fail, "no replica is registered under "+b.Prefix()
	case len(digests) > 1:
		res.Status, res.Summary = Fail, fmt.Sprintf("%d replicas serve %d different rule sets (store revision %d): a replica is partitioned, lagging or refused a rule — read its log and infergate_store_rejected_values_total", len(reps), len(digests), rev)
	default:
		res.Status, res.Summary = Pass, fmt.Sprintf("%d replicas serve the same rules (store revision %d)", len(reps), rev)
	}
}
