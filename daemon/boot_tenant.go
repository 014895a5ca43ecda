package daemon

import (
	"context"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/tenant"
	"github.com/sirupsen/logrus"
)

// applyFileTenantDoc applies one kind: ApiKey or kind: TenantLimit document
// of --rules to the local key registry, with the logic of `infergate apply
// -f` (tenant.ApplyKey): created, updated, or unchanged on every restart. A
// bad document is logged with its source and skipped, as a bad rule is.
func applyFileTenantDoc(ctx context.Context, keys *tenant.Registry, d rules.Document, log *logrus.Logger) {
	l := log.WithFields(logrus.Fields{"source": d.Source, "kind": d.Kind})
	var out tenant.Outcome
	var err error
	switch d.Kind {
	case rules.KindAPIKey:
		var k tenant.KeySpec
		if k, err = tenant.DecodeKeyDocument(d.Spec); err == nil {
			l = l.WithFields(logrus.Fields{"tenant_id": k.TenantID, "key_id": k.KeyID})
			out, err = tenant.ApplyKey(ctx, keys.Local(), k)
		}
	case rules.KindTenantLimit:
		var t tenant.TenantLimit
		if t, err = tenant.DecodeTenantLimitDocument(d.Spec); err == nil {
			l = l.WithField("tenant_id", t.TenantID)
			out, err = tenant.ApplyTenantLimit(ctx, keys.Local(), t)
		}
	default:
		l.Error("daemon: unknown document kind in rule files; skipped")
		return
	}
	if err != nil {
		l.WithError(err).Error("daemon: file document rejected; keeping the rest")
		return
	}
	if out == tenant.OutcomeUnchanged {
		l.Debug("daemon: file document unchanged")
		return
	}
	l.Info("daemon: file document " + string(out))
}
